"""Policy losses: per-token loss matrices ``[B, T]`` from typed inputs.

Sign convention: loss = -objective (minimised). Every loss returns
``(per_token_loss [B, T], metrics)``; aggregation and the KL term are applied by
:func:`grpokit.algos.objective.grpo_objective`, so a loss never sees the config.
Variants live in their own modules (listed in :mod:`grpokit.builtins`, loaded on the first
lookup) and register into the same :data:`POLICY_LOSSES` registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from grpokit.algos.ratios import RATIOS
from grpokit.registry import Registry

POLICY_LOSSES = Registry(
    "loss",
    # groupwise: needs whole groups per micro-batch; zero_advantage_zero_gradient: a token with
    # advantage 0 has gradient exactly 0 at every ratio (the learner may skip all-zero rows), or a
    #   function (constraint_kl, **options) -> bool saying so for one update (DisCO's penalty);
    # option_schedule: fn(step, **options) -> options updated before each step's update
    # ratios: the values of algorithm.ratio the loss computes with (None: any registered ratio;
    #   its signature then takes ``ratio``); 'token', the field's default, also stands for "no ratio"
    # ratio_gradient: the loss differentiates through the ratio, so the ratio's declared
    #   aggregations apply (CISPO's ratio is a detached weight)
    # aggregations: the aggregations its per-token values are built for (None: any)
    # kl_aggregation: an aggregation of its own for the beta * KL term (None: the run's aggregation)
    # token_level: its per-token values are per-token terms (False: one sequence / question value
    #   broadcast to every token, which token weights would only rescale)
    # reads_if: {context or option key: (switch, values)}: the key is read only while the option / context
    #   ``switch`` is one of ``values`` (see Registry.context_taken)
    # rows_with_own_gradient: fn(rewards [B], group_ids [B], **options) -> [B] bool, or None for every row:
    #   the rows a term of the loss beside the advantage one (KDRL's reward-masked distillation) has a
    #   gradient on; with zero_advantage_zero_gradient, every other row with advantage 0 has none
    properties={"groupwise": False, "zero_advantage_zero_gradient": False, "option_schedule": None,
                "ratios": ("token",), "ratio_gradient": True, "aggregations": None, "kl_aggregation": None, "token_level": True,
                "reads_if": None, "rows_with_own_gradient": None},
    # context: offered by the objective to every loss that names them, never user options;
    # num_seqs / num_tokens: the optimizer batch's totals (for a loss with a batch-level term)
    context=("epsilon_low", "epsilon_high", "ratio", "num_seqs", "num_tokens"),
    option_carriers=("option_schedule",),
)


@dataclass
class LossInputs:
    """Named tensors every policy loss receives.

    logp:      [B, T] log pi_theta of the sampled tokens (carries gradient)
    old_logp:  [B, T] log pi_old (behaviour policy), no gradient
    adv:       [B] or [B, T] advantages, no gradient
    mask:      [B, T] 1 = token counts in the loss
    ref_logp:  [B, T] log pi_ref, optional, no gradient
    prev_logp: [B, T] log-probs under the policy one optimizer update behind the batch's first
               update (the previous iteration's pi_old; reg_grpo), optional, no gradient
    entropy:   [B, T] policy entropy per position, optional

    Optional inputs of particular variants (a loss whose extra input is absent drops the term
    that needs it, so every loss also runs on the six fields above):
    group_ids:     [B] int, the prompt each row came from (reg_grpo, disco*, kdrl 'group' mask);
                   absent = the whole micro-batch is one group
    rewards:       [B] scalar rewards (kdrl's reward-guided distillation mask)
    teacher_logp:  [B, T] log pi_teacher of the sampled tokens, no gradient (kdrl)
    aux_logp:      [B, T] log-probs of the same tokens from a second policy pass on a masked
                   input (papo: image patches blackened), no gradient unless asked for
    plan_mask:     [B, T] 1 = planning-span token; the rest of ``mask`` is the answer span
                   (ratio 'span', ts_grpo)
    verif_mask:    [B, T] 1 = self-verification token (grpo_verif); the rest of ``mask`` is the
                   solution
    verif_adv:     [B] advantages of the verification part (grpo_verif), no gradient
    constraint_kl: [] token-mean of old_logp - logp over the whole optimizer batch at the
                   current parameters, detached (disco's trust-region constraint D)
    behaviour_logp: [B, T] log-probs recorded by the sampler (off-policy corrections), no gradient
    token_weights: [B, T] per-token weights of a token weighting (λ-GRPO, forking tokens), no
                   gradient; read by :func:`~grpokit.algos.objective.grpo_objective`, never by a
                   loss: they multiply the per-token loss, the mask stays the normaliser; absent = all 1
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    ref_logp: Optional[torch.Tensor] = None
    prev_logp: Optional[torch.Tensor] = None
    entropy: Optional[torch.Tensor] = None
    group_ids: Optional[torch.Tensor] = None
    rewards: Optional[torch.Tensor] = None
    teacher_logp: Optional[torch.Tensor] = None
    aux_logp: Optional[torch.Tensor] = None
    plan_mask: Optional[torch.Tensor] = None
    verif_mask: Optional[torch.Tensor] = None
    verif_adv: Optional[torch.Tensor] = None
    constraint_kl: Optional[torch.Tensor] = None
    behaviour_logp: Optional[torch.Tensor] = None
    token_weights: Optional[torch.Tensor] = None

    def token_adv(self) -> torch.Tensor:
        """Advantages broadcast to ``[B, T]``."""
        return self.adv.unsqueeze(-1).expand_as(self.logp) if self.adv.dim() == 1 else self.adv

    def seq_adv(self) -> torch.Tensor:
        """Advantages per sequence ``[B]`` (the masked token mean when ``adv`` is ``[B, T]``)."""
        return self.adv if self.adv.dim() == 1 else masked_row_mean(self.adv, self.mask)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def masked_row_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(1/|o_i|) sum_t m_it x_it per row, ``[B]`` (0 for an empty row)."""
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def clipped_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """-min(r A, clip(r, 1-eps_low, 1+eps_high) A) per token, and the 0/1 matrix of tokens the min clipped."""
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high) * adv
    return -torch.minimum(unclipped, clipped), (clipped < unclipped).detach().to(ratio.dtype)


@POLICY_LOSSES.register("ppo_clip", zero_advantage_zero_gradient=True, ratios=None)
def ppo_clip_loss(
    inp: LossInputs,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    ratio: str = "token",
    clip_ratio_c: Optional[float] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate: -min(r A, clip(r, 1-eps_low, 1+eps_high) A), r = exp(logp - old).

    GRPO (arXiv 2402.03300) with DAPO's decoupled clip range (arXiv 2503.14476).
    A token whose ratio is clipped in the direction of its advantage gets zero gradient.

    ``ratio`` names the importance ratio in :data:`grpokit.algos.ratios.RATIOS`: 'token'
    (default), 'sequence' = GSPO ("Group Sequence Policy Optimization", arXiv 2507.18071; use
    eps 3e-4 / 4e-4 and ``seq_mean_token_mean``, which then gives (1/G) sum_i of the
    per-sequence term), 'span' = TS-GRPO's split (arXiv 2510.00186).
    ``clip_ratio_c`` (default off): two-sided clip of INTELLECT-2 (arXiv 2505.07291), the ratio
    is clamped to [0, c] before the min, so a token with r > c has zero gradient and, for A < 0,
    loss c|A| instead of growing with r. For c >= 1 + eps_high this equals the dual clip of
    Ye et al. (arXiv 1912.09729; verl's ``clip_ratio_c``).
    """
    adv = inp.token_adv().detach()
    r = RATIOS.get(ratio)(inp)  # [B, T]
    if clip_ratio_c is not None:
        if clip_ratio_c <= 1.0:
            raise ValueError(f"loss option clip_ratio_c must be > 1 (got {clip_ratio_c}); INTELLECT-2 uses 4")
        dual = (r > clip_ratio_c).detach()
        r = torch.clamp(r, max=clip_ratio_c)
    loss, is_clipped = clipped_surrogate(r, adv, epsilon_low, epsilon_high)
    with torch.no_grad():
        metrics = {
            "clip/frac": masked_mean(is_clipped, inp.mask),
            "clip/low_frac": masked_mean(is_clipped * (r < 1.0 - epsilon_low).float(), inp.mask),
            "clip/high_frac": masked_mean(is_clipped * (r > 1.0 + epsilon_high).float(), inp.mask),
            "ratio/mean": masked_mean(r, inp.mask),
        }
        if clip_ratio_c is not None:
            metrics["clip/dual_frac"] = masked_mean(dual.float(), inp.mask)
    return loss, metrics
