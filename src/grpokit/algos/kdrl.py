"""KDRL: GRPO plus reverse-KL distillation towards a teacher on the student's own samples."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch

from grpokit.algos.groups import same_group
from grpokit.algos.kl import KL_ESTIMATORS
from grpokit.algos.losses import POLICY_LOSSES, LossInputs, masked_mean, ppo_clip_loss
from grpokit.registry import is_set

Metrics = dict[str, torch.Tensor]

KD_MASKS = ("none", "response", "group")


def kdrl_coefficient(step: int, *, beta_0: float = 5e-3, beta_min: float = 1e-3, kappa: float = 0.0) -> float:
    """KDRL's distillation coefficient beta_t = max(beta_min, beta_0 - kappa * t) (constant beta_0 when kappa = 0).

    arXiv 2506.02208. beta_0 = 5e-3 -> beta_min = 1e-3 are [recalled]; kappa was not recovered:
    kappa = (beta_0 - beta_min) / S reaches beta_min at step S (S ~ half the run is an [inferred] choice).
    """
    if kappa == 0.0:
        return beta_0
    return max(beta_min, beta_0 - kappa * step)


def kd_weights(inp: LossInputs, kd_mask: str) -> torch.Tensor:
    """Reward-guided distillation weights w_i ``[B]``: 'none' 1, 'response' 1[r_i < 1], 'group' 1[max_g r = 0]."""
    if kd_mask not in KD_MASKS:
        raise ValueError(f"kdrl option kd_mask '{kd_mask}' is not one of: {', '.join(KD_MASKS)}")
    ones = torch.ones(inp.logp.shape[0], dtype=inp.logp.dtype, device=inp.logp.device)
    if kd_mask == "none":
        return ones
    if inp.rewards is None:
        raise ValueError(f"kdrl kd_mask='{kd_mask}' needs LossInputs.rewards; pass the rewards or set kd_mask='none'")
    return reward_mask(inp.rewards.detach().to(ones), inp.group_ids, kd_mask).to(ones.dtype)


def reward_mask(rewards: torch.Tensor, group_ids: Optional[torch.Tensor], kd_mask: str) -> torch.Tensor:
    """``[B]`` bool for ``kd_mask`` 'response' (r_i < 1) or 'group' (no correct response in the row's group)."""
    if kd_mask == "response":
        return rewards < 1
    same = same_group(group_ids, rewards) > 0  # [B, B]
    group_max = rewards.unsqueeze(0).expand_as(same).masked_fill(~same, float("-inf")).amax(-1)
    return group_max <= 0


def kdrl_option_schedule(step: int, *, beta_0: Optional[float] = None, beta_min: float = 1e-3, kappa: float = 0.0) -> dict:
    """Per-step options of ``kdrl``: ``kd_coef`` = :func:`kdrl_coefficient` (step) when ``beta_0`` is given, else none."""
    if beta_0 is None:
        return {}
    return {"kd_coef": kdrl_coefficient(step, beta_0=beta_0, beta_min=beta_min, kappa=kappa)}


_IN_LOSS = ("kd_placement", ("loss",))  # kd_placement='reward' shapes the advantage with the detached k1 instead
_SCHEDULED = ("beta_0", is_set)  # beta_min / kappa shape the schedule of beta_0, which then replaces kd_coef
_READS_IF = {"kd_estimator": _IN_LOSS, "kd_full_denominator": _IN_LOSS, "beta_min": _SCHEDULED, "kappa": _SCHEDULED,
             "kd_coef": ("beta_0", (None,))}


def distilled_rows(rewards: torch.Tensor, group_ids: torch.Tensor, *, kd_mask: str = "response",
                   kd_full_denominator: bool = True) -> Optional[torch.Tensor]:
    """``[B]`` bool: the rows the distillation term has a gradient on (w_i > 0); None for every row.

    With the reward-guided mask a correct response of a tied group (advantage 0, w_i = 0) has no
    gradient at all, so the learner may leave it out, teacher forward included: the same update,
    since the loss is normalised by the whole batch. ``kd_full_denominator=False`` renormalises the
    term over each micro-batch's distilled tokens, which leaving rows out would change: every row.
    """
    if not kd_full_denominator or kd_mask not in ("response", "group"):
        return None
    return reward_mask(rewards.float(), group_ids, kd_mask)


@POLICY_LOSSES.register("kdrl", inputs=("teacher_logp", "rewards", "group_ids"), option_schedule=kdrl_option_schedule, ratios=None,
                        reads_if=_READS_IF, zero_advantage_zero_gradient=True, rows_with_own_gradient=distilled_rows)
def kdrl_loss(
    inp: LossInputs,
    *,
    kd_coef: float = 5e-3,
    kd_estimator: str = "k2",
    kd_mask: str = "response",
    kd_placement: str = "loss",
    kd_full_denominator: bool = True,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    ratio: str = "token",
    clip_ratio_c: Optional[float] = None,
) -> tuple[torch.Tensor, Metrics]:
    """KDRL: PPO-clipped GRPO surrogate plus kd_coef times a reverse-KL estimate to the teacher.

        delta_it = l_it - l^T_it                 (teacher log-probs of the student's tokens)
        L_it     = -min(r A, clip(r) A) + kd_coef * w_i * k(delta_it)        [B, T]

    "KDRL: Post-Training Reasoning LLMs via Unified Knowledge Distillation and Reinforcement
    Learning", arXiv 2506.02208. Expects ``token_mean`` (the paper's 1 / sum_i |o_i|). The
    paper writes the GRPO part unclipped (one on-policy update); PPO-clip keeps multi-update
    use safe and equals it on-policy. Gradients: k1 -> grad l (useless on-policy),
    k2 -> delta grad l (the paper's choice), k3 -> (1 - e^-delta) grad l.

    ``kd_coef`` is beta_t; its schedule is the trainer's (:func:`kdrl_coefficient`).
    ``kd_estimator`` 'k1' | 'k2' | 'k3' (KL_ESTIMATORS). ``kd_mask`` [recalled/inferred]:
    'response' (default) distils only incorrect responses (r_i < 1), 'group' only prompts with
    no correct response, 'none' all; needs ``inp.rewards``. ``kd_placement`` 'loss' (default)
    or 'reward': A_it <- A_it - kd_coef * w_i * delta_it (detached k1, no re-normalisation).
    ``kd_full_denominator`` True keeps the denominator over all tokens when the mask removes
    responses; False renormalises the KD term over the distilled tokens of the micro-batch.
    Without ``inp.teacher_logp`` it raises (it would be ``ppo_clip``, another method). The metric
    ``kd/teacher_gap`` (mean |l - l^T| over all loss tokens) is 0 exactly when the teacher is the student.
    """
    clip = {"epsilon_low": epsilon_low, "epsilon_high": epsilon_high, "ratio": ratio, "clip_ratio_c": clip_ratio_c}
    if inp.teacher_logp is None:
        raise ValueError("kdrl needs teacher_logp [B, T] (the teacher's log-probs of the sampled tokens): set model.teacher")
    if kd_placement not in ("loss", "reward"):
        raise ValueError(f"kdrl option kd_placement '{kd_placement}' is not one of: loss, reward")
    teacher = inp.teacher_logp.detach()
    w = kd_weights(inp, kd_mask).unsqueeze(-1)  # [B, 1]
    delta = inp.logp - teacher  # [B, T]
    if kd_placement == "reward":
        shaped = inp.token_adv().detach() - kd_coef * w * delta.detach()
        loss, metrics = ppo_clip_loss(replace(inp, adv=shaped), **clip)
        kd = delta.detach()
    else:
        loss, metrics = ppo_clip_loss(inp, **clip)
        kd = KL_ESTIMATORS.get(kd_estimator)(inp.logp, teacher) * w
        if not kd_full_denominator:
            active = (w * inp.mask).sum()
            kd = kd * (inp.mask.sum() / active.clamp(min=1)).detach()
        loss = loss + kd_coef * kd
    with torch.no_grad():
        metrics["kd/kl"] = masked_mean(kd.detach(), inp.mask)
        # teacher-student disagreement on every loss token, unmasked by kd_mask: 0 iff the teacher is the student
        metrics["kd/teacher_gap"] = masked_mean(delta.detach().abs(), inp.mask)
        metrics["kd/mask_frac"] = masked_mean(w.expand_as(inp.mask), inp.mask)
        metrics["kd/coef"] = inp.logp.new_tensor(kd_coef)
    return loss, metrics
