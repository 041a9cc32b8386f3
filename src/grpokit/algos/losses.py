"""Policy losses: per-token loss matrices ``[B, T]`` from typed inputs.

Sign convention: loss = -objective (minimised). Every loss returns
``(per_token_loss [B, T], metrics)``; aggregation and the KL term are applied by
:func:`grpokit.algos.objective.grpo_objective`, so a loss never sees the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from grpokit.registry import Registry

POLICY_LOSSES = Registry("loss")


@dataclass
class LossInputs:
    """Named tensors every policy loss receives.

    logp:      [B, T] log pi_theta of the sampled tokens (carries gradient)
    old_logp:  [B, T] log pi_old (behaviour policy), no gradient
    adv:       [B] or [B, T] advantages, no gradient
    mask:      [B, T] 1 = token counts in the loss
    ref_logp:  [B, T] log pi_ref, optional, no gradient
    entropy:   [B, T] policy entropy per position, optional
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    ref_logp: Optional[torch.Tensor] = None
    entropy: Optional[torch.Tensor] = None

    def token_adv(self) -> torch.Tensor:
        """Advantages broadcast to ``[B, T]``."""
        return self.adv.unsqueeze(-1).expand_as(self.logp) if self.adv.dim() == 1 else self.adv


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip_loss(
    inp: LossInputs, *, epsilon_low: float = 0.2, epsilon_high: float = 0.2, **_: object
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate: -min(r A, clip(r, 1-eps_low, 1+eps_high) A), r = exp(logp - old).

    GRPO (arXiv 2402.03300) with DAPO's decoupled clip range (arXiv 2503.14476).
    A token whose ratio is clipped in the direction of its advantage gets zero gradient.
    """
    adv = inp.token_adv().detach()
    log_ratio = inp.logp - inp.old_logp.detach()
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        is_clipped = (clipped < unclipped).float()
        metrics = {
            "clip/frac": masked_mean(is_clipped, inp.mask),
            "clip/low_frac": masked_mean(is_clipped * (ratio < 1.0 - epsilon_low).float(), inp.mask),
            "clip/high_frac": masked_mean(is_clipped * (ratio > 1.0 + epsilon_high).float(), inp.mask),
            "ratio/mean": masked_mean(ratio, inp.mask),
        }
    return loss, metrics
