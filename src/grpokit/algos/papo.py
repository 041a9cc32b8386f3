"""PAPO: GRPO plus an implicit perception KL (original vs masked image) and a double entropy penalty."""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.algos.losses import POLICY_LOSSES, LossInputs, masked_mean, ppo_clip_loss

Metrics = dict[str, torch.Tensor]


def perception_kl(logp: torch.Tensor, aux_logp: torch.Tensor) -> torch.Tensor:
    """PAPO's per-token k3 estimate of KL(pi(.|q,I) || pi(.|q,I_mask)), ``[B, T]``, with verl's low_var_kl clamps.

        d = clamp(l^mask - l, -20, 20),   kappa = clamp(exp(d) - d - 1, -10, 10)   (>= 0)

    computed as ``expm1(d) - d``: the same value, without float32's cancellation to exactly 0 for
    |d| below ~1e-4 (where kappa ~ d^2 / 2).
    """
    d = torch.clamp(aux_logp - logp, -20.0, 20.0)
    return torch.clamp(torch.expm1(d) - d, -10.0, 10.0)


# eta_2 multiplies l^mask, which has no gradient unless aux_grad: set, it would change only the logged loss value
@POLICY_LOSSES.register("papo", inputs=("aux_logp", "entropy"), ratios=None, reads_if={"mask_entropy_coef": ("aux_grad", (True,))})
def papo_loss(
    inp: LossInputs,
    *,
    gamma: float = 0.01,
    entropy_coef: float = 0.03,
    mask_entropy_coef: float = 0.03,
    kl_clip: Optional[float] = None,
    aux_grad: bool = False,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    ratio: str = "token",
    clip_ratio_c: Optional[float] = None,
) -> tuple[torch.Tensor, Metrics]:
    """PAPO: clipped GRPO surrogate - gamma * perception KL + eta_1 * H_orig + eta_2 * H_mask, per token.

        L_it = -min(r A, clip(r) A) - gamma kappa_it + eta_1 (-l_it) + eta_2 (-l^mask_it)     [B, T]

    "Perception-Aware Policy Optimization for Multimodal Reasoning", arXiv 2507.06448
    (authors' code MikeWangWZHL/PAPO). ``inp.aux_logp`` = l^mask, the same tokens scored with
    the image patch-blackened (a second forward pass); kappa (:func:`perception_kl`) is
    *maximised*, and both sample entropies -l and -l^mask are *penalised* against
    KL-hacking. Aggregation as the base loss (``token_mean`` in the authors' configs).

    Defaults: gamma = 0.01; eta_1 = eta_2 = 0.03 (the DAPO scripts; the GRPO config turns
    double entropy off: set both to 0). ``aux_grad`` False detaches l^mask (the authors'
    default ``RECOMPUTE_AUG_LOG_PROBS=False``: computed once before the update), so eta_2 then
    changes the loss value only, and a ``mask_entropy_coef`` set in ``loss_options`` without
    ``aux_grad: true`` is refused at load.
    ``kl_clip`` c clips kappa to [0, c] (authors' optional feature). For text-only rows pass
    ``aux_logp = logp.detach()`` there (kappa = 0, zero perception gradient).
    Without ``inp.aux_logp`` all PAPO terms are absent and this is ``ppo_clip``.
    """
    loss, metrics = ppo_clip_loss(
        inp, epsilon_low=epsilon_low, epsilon_high=epsilon_high, ratio=ratio, clip_ratio_c=clip_ratio_c
    )
    if inp.aux_logp is None:
        return loss, metrics
    aux = inp.aux_logp if aux_grad else inp.aux_logp.detach()
    kappa = perception_kl(inp.logp, aux)
    if kl_clip is not None:
        kappa = torch.clamp(kappa, 0.0, kl_clip)
    loss = loss - gamma * kappa + entropy_coef * (-inp.logp) + mask_entropy_coef * (-aux)
    with torch.no_grad():
        metrics["papo/kl_prcp"] = masked_mean(kappa, inp.mask)
        metrics["papo/entropy_orig"] = masked_mean(-inp.logp, inp.mask)
        metrics["papo/entropy_mask"] = masked_mean(-aux, inp.mask)
    return loss, metrics
