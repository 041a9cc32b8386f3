"""Off-policy and sampler-mismatch corrections: a detached per-token weight on the policy-gradient term.

Three policies meet in one update. ``behaviour_logp`` ``[B, T]`` is what the sampler recorded
for each sampled token (the HF in-process sampler or vLLM, possibly with weights k steps
older, and with an inference engine's numerics even at equal weights). ``old_logp`` ``[B, T]``
is the proximal policy: the learner's weights before this update (``logp.detach()`` of the
learner's forward at mu = 1, the recomputed old log-probs at mu > 1). ``logp`` is the policy
being trained. The PPO ratio ``r = pi_theta / pi_old`` stays the loss's business; a correction
handles the remaining gap, the behaviour importance ratio

    rho_t = pi_old(o_t) / pi_behav(o_t) = exp(old_logp_t - behaviour_logp_t),

and turns it into a weight ``w`` ``[B, T]`` for the decoupled objective

    J = E_{o ~ pi_behav} [ (1/|o|) sum_t  w_t * min(r_t A_t, clip(r_t, 1-eps, 1+eps) A_t) ].

Contract of every registered correction::

    fn(old_logp [B, T], behaviour_logp [B, T], mask [B, T] (float, 1 = keep), *, options)
        -> (weight [B, T] detached float tensor, metrics {name: 0-d detached tensor})

The trainer multiplies the per-token policy-gradient loss (not the KL term) by ``weight``;
aggregation then applies ``mask`` as usual. A token given weight 0 stays in the loss
denominator (AReaL's ``ppo_actor_loss_fn`` divides by the count of the original loss mask, so
rejecting tokens does not inflate the gradient of the others). verl's rejection sampling
(``rollout_rs``) differs: it removes rejected tokens from ``response_mask``, so they also leave
the denominator of token-mean aggregations and the surviving tokens weigh more. TRL multiplies
the per-token loss by its (masked) ratio like we do.

Shared numerics: the log-ratio is computed in float32 or wider from detached inputs and taken
as 0 off the mask; a NaN from ``-inf - (-inf)`` becomes 0 (as AReaL does) and the log-ratio of
a token, then of a sequence, is clamped to [-20, 20] before ``exp`` (verl's bound; e^20 ~ 4.9e8
lies far beyond any sensible cap or band). Padding gets weight 1 from every correction, as
from ``none`` (the aggregation's mask drops it either way).

Metrics, all masked means over ``mask``: ``offpolicy/kl_k1`` = mean(behav - old) and
``offpolicy/kl_k3`` = mean(rho - 1 - log rho), both estimating KL(pi_behav || pi_old) from the
sampler's tokens (k3 >= 0 per token, lower variance; "Approximating KL Divergence", Schulman
2020); ``offpolicy/weight_mean``; ``offpolicy/truncated_frac`` (tokens whose weight was cut down
to the cap) and ``offpolicy/masked_frac`` (tokens set to 0), a rejected sequence counting all of
its tokens. ``none`` reports none of them; :func:`mismatch_kl` gives the two KL numbers without
a correction.
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.registry import Registry

# Every correction but 'none' declares the input behaviour_logp (the sampler's log-probs).
CORRECTIONS = Registry("correction")

# verl's SAFETY_BOUND on log-ratios before exp (exp(20) ~ 4.9e8)
_LOG_BOUND = 20.0


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def _log_ratio(old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log rho = old_logp - behaviour_logp ``[B, T]``, detached, >= float32, 0 off the mask, clamped to +-20."""
    dtype = torch.promote_types(old_logp.dtype, torch.float32)
    d = old_logp.detach().to(dtype) - behaviour_logp.detach().to(dtype)
    d = torch.where(mask > 0, d, torch.zeros_like(d))  # padding may hold -inf or garbage
    return torch.nan_to_num(d, nan=0.0).clamp(-_LOG_BOUND, _LOG_BOUND)


def _sequence_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, geometric: bool) -> torch.Tensor:
    """sum_t m_it log rho_it per row (mean over the row's tokens if ``geometric``), broadcast to ``[B, T]``."""
    s = log_ratio.sum(-1, keepdim=True)  # log_ratio is already 0 off the mask
    if geometric:
        s = s / mask.to(s.dtype).sum(-1, keepdim=True).clamp(min=1)
    return s.clamp(-_LOG_BOUND, _LOG_BOUND).expand_as(log_ratio)


def _kl_metrics(log_ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "offpolicy/kl_k1": _masked_mean(-log_ratio, mask),
        "offpolicy/kl_k3": _masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, mask),
    }


def _result(
    weight: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor, truncated: torch.Tensor, masked: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    m = mask.to(weight.dtype)
    weight = torch.where(m > 0, weight, torch.ones_like(weight))  # a sequence weight also lands on padding
    metrics = _kl_metrics(log_ratio, m)
    metrics["offpolicy/weight_mean"] = _masked_mean(weight, m)
    metrics["offpolicy/truncated_frac"] = _masked_mean(truncated.to(weight.dtype), m)
    metrics["offpolicy/masked_frac"] = _masked_mean(masked.to(weight.dtype), m)
    return weight, metrics


def _truncate(
    rho: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if cap < 1.0:
        raise ValueError(f"correction option cap must be >= 1 so that on-policy tokens keep weight 1 (got {cap})")
    truncated = rho > cap
    return _result(rho.clamp(max=cap), log_ratio, mask, truncated, torch.zeros_like(truncated))


def _mask_outside(
    rho: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor, low: Optional[float], high: Optional[float]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if (low is not None and not 0.0 <= low <= 1.0) or (high is not None and high < 1.0):
        raise ValueError(
            f"correction options need 0 <= low <= 1 <= high so that on-policy tokens are kept (got low={low}, high={high})"
        )
    out = torch.zeros_like(rho, dtype=torch.bool)
    if low is not None:
        out = out | (rho < low)
    if high is not None:
        out = out | (rho > high)
    return _result(torch.where(out, torch.zeros_like(rho), rho), log_ratio, mask, torch.zeros_like(out), out)


def mismatch_kl(old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """``offpolicy/kl_k1`` and ``offpolicy/kl_k3``: KL(pi_behav || pi_old) estimated on the sampler's tokens.

    k1 = mean_t m_t (behav_t - old_t), k3 = mean_t m_t (rho_t - 1 - log rho_t), rho = exp(old - behav);
    0-d detached tensors, for logging the mismatch when the correction is ``none``.
    """
    log_ratio = _log_ratio(old_logp, behaviour_logp, mask)
    return _kl_metrics(log_ratio, mask.to(log_ratio.dtype))


def unit_weight_with_mismatch(
    old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``none``'s weight 1 with :func:`mismatch_kl`'s metrics: an off-policy batch trained uncorrected on purpose."""
    weight, _ = no_correction(old_logp, behaviour_logp, mask)
    return weight, mismatch_kl(old_logp, behaviour_logp, mask)


@CORRECTIONS.register("none")
def no_correction(
    old_logp: torch.Tensor, behaviour_logp: Optional[torch.Tensor], mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """No correction, w = 1: the batch is trained as if the proximal policy had sampled it.

    Exact when the learner sampled the batch itself with its current weights (synchronous HF
    sampling); ``behaviour_logp`` is not read (it may be None). No metrics.
    """
    return torch.ones_like(old_logp, dtype=torch.promote_types(old_logp.dtype, torch.float32)), {}


@CORRECTIONS.register("decoupled", inputs=("behaviour_logp",))
def decoupled(
    old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, *, cap: Optional[float] = 5.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Decoupled PPO's behaviour importance weight: w_t = rho_t if rho_t <= cap else 0.

    rho_t = exp(old_logp_t - behaviour_logp_t), ``[B, T]``. The decoupled objective
    E_{pi_behav}[(pi_prox / pi_behav) min(r A, clip(r) A)] with the proximal policy pi_prox =
    ``old_logp`` ("Batch size-invariance for policy optimization", Hilton et al., arXiv
    2110.00641), as used for asynchronous RL by "AReaL: A Large-Scale Asynchronous Reinforcement
    Learning System for Language Reasoning" (arXiv 2505.24298).

    Follows AReaL's ``ppo_actor_loss_fn`` with ``behav_imp_weight_cap`` (areal/utils/functional.py):
    a token whose weight exceeds the cap gets weight 0 (rho == cap is kept), there is no lower
    bound, and the token stays in the loss denominator. ``cap`` = None keeps every weight
    uncapped (AReaL-lite's default); the default 5.0 is the value AReaL's docs recommend and its
    later default (``behave_imp_weight_mode='token_mask'``, cap 5). ``mis_token`` with
    ``low=None, high=cap`` computes the same weight.
    """
    if cap is not None and cap < 1.0:
        raise ValueError(
            f"correction option cap must be >= 1 (or null for no cap) so that on-policy tokens keep weight 1 (got {cap})"
        )
    log_ratio = _log_ratio(old_logp, behaviour_logp, mask)
    return _mask_outside(torch.exp(log_ratio), log_ratio, mask, None, cap)


@CORRECTIONS.register("tis_token", inputs=("behaviour_logp",))
def tis_token(
    old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, *, cap: float = 2.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level truncated importance sampling of the sampler-learner mismatch: w_t = min(rho_t, cap).

    rho_t = exp(old_logp_t - behaviour_logp_t), ``[B, T]``. "Your Efficient RL Framework
    Secretly Brings You Off-Policy RL Training" (Yao et al., 2025,
    https://fengyao.notion.site/off-policy-rl); truncation of the importance weight as in
    "Safe and Efficient Off-Policy Reinforcement Learning" (Munos et al., arXiv 1606.02647).
    Matches verl's ``rollout_is='token'`` (weight clamped to ``rollout_is_threshold``, default
    2.0, our default) and TRL's ``vllm_importance_sampling_mode='token_truncate'`` with
    ``vllm_importance_sampling_clip_min=None`` (TRL's default cap is 3.0; its optional lower
    clamp is not offered here).
    """
    log_ratio = _log_ratio(old_logp, behaviour_logp, mask)
    return _truncate(torch.exp(log_ratio), log_ratio, mask, cap)


@CORRECTIONS.register("tis_sequence", inputs=("behaviour_logp",))
def tis_sequence(
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    cap: float = 2.0,
    geometric: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Sequence-level truncated importance sampling: w_it = min(exp(sum_t m_it log rho_it), cap) on every token of row i.

    log rho_it = old_logp_it - behaviour_logp_it, ``[B, T]``; the sequence ratio is the product
    of the row's token ratios, unbiased for the whole completion but with a variance that grows
    with its length. ``geometric=True`` uses the geometric mean exp((1/|o_i|) sum_t m_it log
    rho_it) instead (length-invariant, as AReaL's sequence-level modes and GSPO's ratio;
    biased). Same paper as ``tis_token`` (Yao et al., 2025, https://fengyao.notion.site/off-policy-rl).
    Matches verl's ``rollout_is='sequence'`` and TRL's ``'sequence_truncate'`` (product form,
    sum of the masked log-ratios); verl exposes the geometric mean only as a rejection filter
    (``rollout_rs='seq_mean_k1'``).
    """
    log_ratio = _log_ratio(old_logp, behaviour_logp, mask)
    rho = torch.exp(_sequence_log_ratio(log_ratio, mask, geometric))
    return _truncate(rho, log_ratio, mask, cap)


@CORRECTIONS.register("mis_token", inputs=("behaviour_logp",))
def mis_token(
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    low: Optional[float] = 0.5,
    high: Optional[float] = 5.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level masked importance sampling: w_t = rho_t if low <= rho_t <= high else 0.

    rho_t = exp(old_logp_t - behaviour_logp_t), ``[B, T]``: the raw ratio inside the band, 0
    outside it (no truncation). IcePop of "Every Step Evolves: Scaling Reinforcement Learning
    for Trillion-Scale Thinking Model" (arXiv 2510.18855), whose band [0.5, 5] is our default;
    also "When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference
    Mismatch" (Liu, Li et al., 2025, https://richardli.xyz/rl-collapse). Follows TRL's
    ``vllm_importance_sampling_mode='token_mask'`` (ratio outside [clip_min, clip_max] set to
    0, the raw ratio kept inside; a bound of None is open). verl instead rejects by removing
    the token from the response mask (``rollout_rs='token_k1'``) and weighs the kept ones
    separately.
    """
    log_ratio = _log_ratio(old_logp, behaviour_logp, mask)
    return _mask_outside(torch.exp(log_ratio), log_ratio, mask, low, high)


@CORRECTIONS.register("mis_sequence", inputs=("behaviour_logp",))
def mis_sequence(
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    low: Optional[float] = 0.5,
    high: Optional[float] = 2.0,
    geometric: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Sequence-level masked importance sampling: w_it = s_i if low <= s_i <= high else 0, s_i = exp(sum_t m_it log rho_it).

    log rho_it = old_logp_it - behaviour_logp_it, ``[B, T]``; the sequence ratio s_i (the
    geometric mean exp((1/|o_i|) sum_t m_it log rho_it) if ``geometric``) weighs every token of
    row i, and a row outside the band is dropped whole. Papers as ``mis_token``. Follows TRL's
    ``'sequence_mask'`` (product of the masked token ratios; TRL's default band is [None, 3]);
    our default [1/2, 2] is symmetric in log space, as verl's ``seq_sum_k1`` rejection bounds
    (lower defaults to 1/upper). With the product, a long completion leaves any band from small
    per-token gaps alone (the "length trap" of Liu, Li et al.); ``geometric=True`` avoids it.
    """
    log_ratio = _log_ratio(old_logp, behaviour_logp, mask)
    rho = torch.exp(_sequence_log_ratio(log_ratio, mask, geometric))
    return _mask_outside(rho, log_ratio, mask, low, high)
