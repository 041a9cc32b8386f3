"""Reg-GRPO: regress the group-standardised sequence log-ratio onto the GRPO advantage."""

from __future__ import annotations

import torch

from grpokit.algos.groups import group_sum, live_row_share, same_group
from grpokit.algos.losses import POLICY_LOSSES, LossInputs

Metrics = dict[str, torch.Tensor]


@POLICY_LOSSES.register("reg_grpo", inputs=("group_ids", "prev_logp"), groupwise=True, aggregations=("seq_mean_token_mean",), token_level=False)
def reg_grpo_loss(
    inp: LossInputs,
    *,
    eps: float = 1e-6,
    std_mode: str = "unbiased",
    length_norm: bool = False,
    skip_zero_var_groups: bool = True,
) -> tuple[torch.Tensor, Metrics]:
    """Reg-GRPO squared error between the GRPO advantage and the standardised sequence log-ratio.

        rho_i     = sum_t m_it (l_it - l^prev_it)                                 [B]
        A^theta_i = (rho_i - mean_g rho) / sqrt(var_g(rho) + eps)                 [B]
        L         = (1/G) sum_i (A_i - A^theta_i)^2          (no clip, no min)

    DeepVideo-R1 ("Video Reinforcement Fine-Tuning via Difficulty-aware Regressive GRPO",
    arXiv 2506.07464, §3.2, App. A). ``adv`` is the target A_i (group-standardised rewards, no
    gradient); groups come from ``inp.group_ids`` (absent: the micro-batch is one group).
    The per-sequence error is broadcast to every token, so ``seq_mean_token_mean`` (expected)
    gives (1/B) sum_i. The KL term is the objective's usual ``beta * k3`` against pi_ref.

    pi_old of the paper's per-iteration objective, max E[R] - lambda KL(pi_theta || pi_old), is
    ``inp.prev_logp``: the policy one optimizer update behind the batch's first update (the
    previous iteration's policy; ``trainer.stages.PreviousPolicySnapshot``), fixed for all mu
    updates of the batch [inferred: the paper writes pi_theta_old and its code was not available
    to us]. With pi_old = the sampling policy, every batch's first update has rho = 0 and
    var(rho) = 0, where the standardised rho is undefined (std() gives NaN gradients, and with
    eps inside the square root the step degenerates to REINFORCE scaled by 1/sqrt(eps), which
    gradient clipping then truncates); one update behind, rho_j = log pi_theta(y_j) -
    log pi_prev(y_j) differs between completions and the first update regresses it. Only the
    run's very first update, which has no earlier policy, sees rho = 0 (``eps`` keeps it finite:
    dL/drho_j = -2 A_j / (G sqrt(eps))). Options, all [inferred]: ``eps`` = 1e-6;
    ``std_mode`` 'unbiased' | 'population' (match the advantage's convention so a perfect fit
    exists); ``length_norm`` uses rho_i / |o_i|; ``skip_zero_var_groups`` drops groups whose
    targets are all 0 (equal rewards: no signal, only noise), which still count in B.

    A row without loss tokens (``mask_truncated`` on a truncated row, an empty completion) is
    left out of its group's mean, variance and count G, and its group's mean error runs over
    the other rows (:func:`grpokit.algos.groups.live_row_share`), as DisCO does.
    """
    if eps <= 0:
        raise ValueError(f"reg_grpo option eps must be > 0 (got {eps}); it keeps the first on-policy update finite")
    if std_mode not in ("unbiased", "population"):
        raise ValueError(f"reg_grpo std_mode '{std_mode}' is not one of: unbiased, population")
    mask = inp.mask
    rho = ((inp.logp - inp.prev_logp.detach()) * mask).sum(-1)  # [B] against the previous iteration's policy
    if length_norm:
        rho = rho / mask.sum(-1).clamp(min=1)
    live = (mask.sum(-1) > 0).to(rho.dtype)  # rows with loss tokens
    target = inp.seq_adv().detach()  # [B]
    same = same_group(inp.group_ids, rho)  # [B, B]
    count = group_sum(live, same)  # live rows of each row's group
    centred = (rho - group_sum(rho * live, same) / count.clamp(min=1)) * live
    denom = (count - 1).clamp(min=1) if std_mode == "unbiased" else count.clamp(min=1)
    var = group_sum(centred**2, same) / denom
    pred = centred / torch.sqrt(var + eps)
    per_seq = (target - pred) ** 2 * live  # [B]
    valid = live
    if skip_zero_var_groups:
        valid = (group_sum(target.abs() * live, same) > 0).to(per_seq.dtype) * live
        per_seq = per_seq * valid
    loss = (per_seq * live_row_share(live, same)).unsqueeze(-1).expand_as(inp.logp)
    with torch.no_grad():
        metrics = {
            "reg/sq_err": (per_seq.sum() / valid.sum().clamp(min=1)),
            "reg/rho_std": var.sqrt().mean(),
            "reg/valid_frac": valid.mean(),
        }
    return loss, metrics


# Trainer hook: the loss forms groups inside a micro-batch, so micro-batches must hold whole groups.
