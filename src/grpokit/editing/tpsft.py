"""TPSFT: Targeted Proximal SFT, the edit stage of EtCon, as a pure tensor loss.

Li et al., "EtCon: Edit-then-Consolidate for Reliable Knowledge Editing", arXiv 2512.04753
(edit stage). The authors' TPSFT code is not released; the objective below is [inferred] from
the abstract ("localizes the edit via a trust-region objective to limit policy drift") and from
Proximal SFT (Zhu et al., "Proximal Supervised Fine-Tuning", arXiv 2508.17784), whose objective
TPSFT's name follows: PPO's clipped surrogate with a constant advantage A = 1 on the target
tokens of the given completion,

    r_t = pi_theta(y_t | s_t) / pi_old(y_t | s_t) = exp(logp_t - old_logp_t)        [B, T]
    L   = -(1 / N) sum_t m_t min(r_t, clip(r_t, 1 - eps, 1 + eps)),   N = target tokens

With A > 0 the minimum is r_t below 1 + eps and the constant 1 + eps above it, so a token whose
probability has grown past (1 + eps) pi_old gets exactly zero gradient: the update stops growing
it. At theta = theta_old, r = 1, the loss is -1 per token and its gradient, -(1/N) sum_t m_t
grad logp_t, is the SFT gradient. "Targeted": the edit trains only a window of FFN weights
(:mod:`grpokit.editing.editor`) and the loss covers only the new object's tokens.

Registered as the offline objective ``tpsft`` (stage ``sft``): there ``ref_logp`` is the
reference model's, i.e. the starting model (``anchor="pre_edit"``), or a snapshot refreshed
every ``offline.ref_sync_every`` steps.
"""

from __future__ import annotations

import torch

from grpokit.algos.offline import OFFLINE_LOSSES, OfflineInputs

Metrics = dict[str, torch.Tensor]


def tpsft_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, epsilon: float = 0.2) -> torch.Tensor:
    """Per-token ``-min(r, clip(r, 1 - eps, 1 + eps)) * mask`` ``[B, T]``, r = exp(logp - old_logp); old_logp gets no gradient."""
    if epsilon <= 0:
        raise ValueError(f"tpsft: epsilon={epsilon} must be > 0 (the trust region 1 +- epsilon)")
    ratio = torch.exp(logp - old_logp.detach())
    return -torch.minimum(ratio, ratio.clamp(1.0 - epsilon, 1.0 + epsilon)) * mask


def tpsft_metrics(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, epsilon: float) -> Metrics:
    """``ratio`` (mean r over target tokens) and ``clipped`` (fraction with r > 1 + eps: no gradient), detached."""
    with torch.no_grad():
        ratio = torch.exp(logp - old_logp)
        n = mask.sum().clamp(min=1)
        return {"ratio": (ratio * mask).sum() / n, "clipped": ((ratio > 1.0 + epsilon).to(mask.dtype) * mask).sum() / n}


@OFFLINE_LOSSES.register("tpsft", inputs=("logp", "ref_logp", "mask"), stage="sft")
def tpsft(inp: OfflineInputs, *, num_tokens: float, epsilon: float = 0.2) -> tuple[torch.Tensor, Metrics]:
    """TPSFT (EtCon, arXiv 2512.04753): PPO-clip with A = 1 on the completion tokens against pi_ref as pi_old.

        r_t = exp(logp_t - ref_logp_t),   L = -(1 / N) sum_{i,t} m_it min(r_it, clip(r_it, 1 - eps, 1 + eps))

    The reference is the starting model, or the pre-update policy every ``offline.ref_sync_every``
    steps (PSFT's refreshed pi_old). eps defaults to 0.2 [inferred].
    """
    token = tpsft_token_loss(inp.logp, inp.ref_logp, inp.mask, epsilon)
    return token.sum() / num_tokens, tpsft_metrics(inp.logp, inp.ref_logp, inp.mask, epsilon)
