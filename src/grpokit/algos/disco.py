"""DisCO: discriminative objective over positive/negative completions, with a squared-hinge KL constraint.

"DisCO: Reinforcing Large Reasoning Models with Discriminative Constrained Optimization",
arXiv 2505.12366; authors' code Optimization-AI/DisCO.

Per question q with positives O+ and negatives O- among its G completions, a sequence score
s(o) ('log_l': (1/|o|) sum_t l_t; 'l_ratio': (1/|o|) sum_t exp(l_t - l^old_t)) and

    DisCO-b:  J(q) = mean_{O+} s - mean_{O-} s
    DisCO:    J(q) = mean_{O+} s - tau log mean_{O-} exp(s / tau)          (DRO, log-mean-exp)
    L = -(1/N_q) sum_{q valid} J(q) + (beta/2) [D - delta]_+^2

with D the token-mean of l^old - l (k1 estimate of KL(pi_old || pi_theta)). Only questions
with a positive and a negative contribute; all questions count in N_q.

Both losses expect ``seq_mean_token_mean``: J(q) is broadcast to every token of each of q's G
rows, so the aggregate is (1/B) sum_i J(q_i) = (1/N_q) sum_q J(q) for complete groups of equal
size (``inp.group_ids``; absent: the micro-batch is one group). Positives/negatives are the
rows with A > 0 / A < 0: for binary rewards and GRPO or Dr. GRPO advantages that is exactly
r = 1 / r = 0 in mixed groups, and groups with equal rewards (A = 0) are invalid [inferred
generalisation to non-binary rewards: above / below the group mean]. A row without loss
tokens (``mask_truncated`` on a truncated row, an empty completion) is in neither O+ nor O-,
and q's J is spread over its other rows (:func:`grpokit.algos.groups.live_row_share`), so q
still weighs 1/N_q; Reg-GRPO treats such rows the same way.

Options: ``score`` 'log_l' | 'l_ratio'; ``delta`` = 1e-4 and ``constraint_beta`` = 1e3 for the
constraint. The constraint needs D over the whole (globally gathered) optimizer batch at the
current parameters: pass it as ``inp.constraint_kl`` (:func:`disco_constraint_kl`), or set
``local_constraint=True`` to use the micro-batch's own D (exact when the micro-batch is the
optimizer batch). With neither, the penalty is off [inferred default, so that a batch without
signal gives no gradient]; with one update per rollout batch (the paper's scripts) D = 0 anyway.
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.algos.groups import group_log_mean_exp, group_masked_mean, live_row_share, same_group
from grpokit.algos.losses import POLICY_LOSSES, LossInputs, masked_mean, masked_row_mean

Metrics = dict[str, torch.Tensor]


def disco_scores(inp: LossInputs, score: str) -> torch.Tensor:
    """Sequence scores ``[B]``: 'log_l' = (1/|o|) sum_t l_t, 'l_ratio' = (1/|o|) sum_t exp(l_t - l^old_t)."""
    if score == "log_l":
        tok = inp.logp
    elif score == "l_ratio":
        tok = torch.exp(inp.logp - inp.old_logp.detach())
    else:
        raise ValueError(f"disco option score '{score}' is not one of: log_l, l_ratio")
    return masked_row_mean(tok, inp.mask)


def disco_constraint_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """DisCO's constraint D, the token-mean of old_logp - logp, ``[]`` (over the optimizer batch for the trainer)."""
    return masked_mean(old_logp.detach() - logp, mask)


def _constraint(
    inp: LossInputs, delta: float, beta: float, local: bool, num_seqs: Optional[float], num_tokens: Optional[float]
) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """Per-token squared-hinge penalty ``[B, T]`` and D, or None when no D is available.

    The hinge factor c = beta [D - delta]_+ is detached and multiplies a per-token carrier of
    l^old - l scaled by s_i = |o_i| N_seq / N_tok (the optimizer batch's sequence and token
    counts ``num_seqs``, ``num_tokens``; default: this micro-batch's), so that under
    ``seq_mean_token_mean`` the micro-batch contributes c sum_{mb} m (l^old - l) / N_tok: summed
    over micro-batches that is c D and its gradient beta [D - delta]_+ grad D (as in the
    authors' code), whatever the micro-batch size. The carrier's value is cancelled by its
    detached copy and replaced by (beta/2) [D - delta]_+^2 per token with the same scale, so the
    micro-batches' values sum to (beta/2) [D - delta]_+^2.
    """
    mask = inp.mask
    diff = inp.old_logp.detach() - inp.logp  # [B, T]
    if inp.constraint_kl is not None:
        d = inp.constraint_kl.detach()
    elif local:
        d = masked_mean(diff, mask).detach()
    else:
        return None
    hinge = torch.clamp(d - delta, min=0)
    coef = beta * hinge
    n_seqs = num_seqs if num_seqs is not None else mask.shape[0]
    n_tok = num_tokens if num_tokens is not None else mask.sum().clamp(min=1)
    scale = mask.sum(-1, keepdim=True) * n_seqs / n_tok  # seq_mean_token_mean -> sum over tokens / N_tok
    return scale * (coef * (diff - diff.detach()) + 0.5 * beta * hinge**2), d


def _disco(
    inp: LossInputs, *, score: str, tau: Optional[float], delta: float, constraint_beta: float, local_constraint: bool,
    num_seqs: Optional[float], num_tokens: Optional[float],
) -> tuple[torch.Tensor, Metrics]:
    s = disco_scores(inp, score)  # [B]
    adv = inp.seq_adv().detach()
    live = (inp.mask.sum(-1) > 0).to(s.dtype)  # rows with loss tokens
    pos, neg = (adv > 0).to(s.dtype) * live, (adv < 0).to(s.dtype) * live
    same = same_group(inp.group_ids, s)  # [B, B]
    mean_pos, n_pos = group_masked_mean(s, pos, same)
    if tau is None:
        neg_term, n_neg = group_masked_mean(s, neg, same)
    else:
        neg_term, n_neg = tau * group_log_mean_exp(s / tau, neg, same), same @ neg
    valid = (n_pos > 0) & (n_neg > 0)
    j = torch.where(valid, mean_pos - neg_term, torch.zeros_like(s))  # J(q) on every row of q
    loss = (-j * live_row_share(live, same)).unsqueeze(-1).expand_as(inp.logp)
    with torch.no_grad():
        metrics = {
            "disco/valid_frac": valid.to(s.dtype).mean(),
            "disco/score_pos": (s * pos).sum() / pos.sum().clamp(min=1),
            "disco/score_neg": (s * neg).sum() / neg.sum().clamp(min=1),
        }
    penalty = _constraint(inp, delta, constraint_beta, local_constraint, num_seqs, num_tokens)
    if penalty is not None:
        loss = loss + penalty[0]
        metrics["disco/constraint_kl"] = penalty[1]
    return loss, metrics


def tied_groups_have_no_gradient(
    constraint_kl: Optional[torch.Tensor], *, delta: float = 1e-4, constraint_beta: float = 1e3, local_constraint: bool = False,
) -> bool:
    """Whether a question whose completions all have advantage 0 adds exactly 0 to this update's gradient.

    Its J(q) is 0 (no positive and negative), so only the penalty reaches it, with gradient
    beta [D - delta]_+ grad D: 0 when beta = 0, when the trainer's batch-level D (``constraint_kl``)
    is at most delta, or when no D is given and the penalty is off (the batch's first update, at
    the sampler's weights). With ``local_constraint`` D is the micro-batch's own, unknown before
    its forward (and changed by leaving rows out): never. The learner then leaves such groups out
    of the forward/backward, as it does for PPO-clip's all-zero rows.
    """
    if constraint_beta == 0:
        return True
    if constraint_kl is not None:
        return float(constraint_kl) <= delta
    return not local_constraint


_ZERO = {"zero_advantage_zero_gradient": tied_groups_have_no_gradient}


@POLICY_LOSSES.register(
    "disco", inputs=("group_ids",), optional=("constraint_kl",), groupwise=True, aggregations=("seq_mean_token_mean",), token_level=False,
    **_ZERO,
)
def disco_loss(
    inp: LossInputs,
    *,
    score: str = "log_l",
    tau: float = 10.0,
    delta: float = 1e-4,
    constraint_beta: float = 1e3,
    local_constraint: bool = False,
    num_seqs: Optional[float] = None,
    num_tokens: Optional[float] = None,
) -> tuple[torch.Tensor, Metrics]:
    """DisCO (DRO): -[mean_{O+} s - tau log mean_{O-} exp(s/tau)] per question + squared-hinge KL penalty.

    arXiv 2505.12366. ``tau`` = 10 is the authors' log-L script (their config default is 1);
    tau -> inf recovers disco_b, tau -> 0 the hardest negative. d(-J)/ds(o'_k) =
    softmax_k(s(O-)/tau) for negatives and -1/|O+| for positives.
    """
    if tau <= 0:
        raise ValueError(f"disco option tau must be > 0 (got {tau})")
    opts = {"delta": delta, "constraint_beta": constraint_beta, "local_constraint": local_constraint}
    return _disco(inp, score=score, tau=tau, num_seqs=num_seqs, num_tokens=num_tokens, **opts)


@POLICY_LOSSES.register(
    "disco_b", inputs=("group_ids",), optional=("constraint_kl",), groupwise=True, aggregations=("seq_mean_token_mean",), token_level=False,
    **_ZERO,
)
def disco_b_loss(
    inp: LossInputs,
    *,
    score: str = "log_l",
    delta: float = 1e-4,
    constraint_beta: float = 1e3,
    local_constraint: bool = False,
    num_seqs: Optional[float] = None,
    num_tokens: Optional[float] = None,
) -> tuple[torch.Tensor, Metrics]:
    """DisCO-b: -[mean_{O+} s - mean_{O-} s] per question + squared-hinge KL penalty.

    arXiv 2505.12366 (the basic, non-DRO objective).
    """
    opts = {"delta": delta, "constraint_beta": constraint_beta, "local_constraint": local_constraint}
    return _disco(inp, score=score, tau=None, num_seqs=num_seqs, num_tokens=num_tokens, **opts)


# Trainer hook: with several updates per batch the trainer supplies the batch-level KL D.
