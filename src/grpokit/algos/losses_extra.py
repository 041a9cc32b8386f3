"""Token-level variants of the clipped surrogate: CISPO, SAPO, humanline clipping, TS-GRPO spans, GRPO-Verif.

Each registers into :data:`grpokit.algos.losses.POLICY_LOSSES` and returns a per-token loss
``[B, T]`` (loss = -objective). The docstring of each says which aggregation it expects.
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.algos.losses import POLICY_LOSSES, LossInputs, clipped_surrogate, masked_mean
from grpokit.algos.ratios import RATIOS

Metrics = dict[str, torch.Tensor]


_PPO_MASK_ONLY = {"epsilon_low": ("ppo_mask", (True,)), "epsilon_high": ("ppo_mask", (True,))}


# zero_advantage_zero_gradient: the weight multiplies A_it, so a row with A = 0 has gradient 0 at every
# ratio; declared, the learner leaves such rows out (the same update, fewer forwards)
@POLICY_LOSSES.register(
    "cispo", ratios=None, ratio_gradient=False, reads_if=_PPO_MASK_ONLY, zero_advantage_zero_gradient=True,
)
def cispo_loss(
    inp: LossInputs,
    *,
    is_clip_low: Optional[float] = None,
    is_clip_high: float = 0.28,
    ppo_mask: bool = False,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    ratio: str = "token",
) -> tuple[torch.Tensor, Metrics]:
    """CISPO: REINFORCE weighted by a clipped, stop-gradient importance ratio, -sg(clip(r)) A logp.

        L_it = -sg(clip(r_it, 1 - eps_low^IS, 1 + eps_high^IS)) * A_it * l_it        [B, T]

    so grad L_it = -clip(r_it) A_it grad l_it: unlike PPO-clip no token loses its gradient,
    the weight is only bounded. MiniMax-M1 ("Scaling Test-Time Compute Efficiently with
    Lightning Attention", arXiv 2506.13585, eq. 4-5). Expects ``token_mean`` aggregation.

    ``is_clip_low`` None: no lower bound (the paper's choice). ``is_clip_high`` = 0.28 is
    [inferred] (the paper tunes it without stating a value; Trinity-RFT's default).
    ``ppo_mask`` turns on the paper's unified form: the token mask M_it = 0 where PPO would
    clip (A > 0 and r > 1 + epsilon_high, or A < 0 and r < 1 - epsilon_low).
    ``ratio`` picks the weight from RATIOS ('sequence' gives a GSPO-style sequence weight).
    The run's ``epsilon_low``/``epsilon_high`` are used only by ``ppo_mask``.
    """
    adv = inp.token_adv().detach()
    r = RATIOS.get(ratio)(inp).detach()  # [B, T]
    weight = torch.clamp(r, min=None if is_clip_low is None else 1.0 - is_clip_low, max=1.0 + is_clip_high)
    loss = -weight * adv * inp.logp
    keep = torch.ones_like(r)
    if ppo_mask:
        dropped = ((adv > 0) & (r > 1.0 + epsilon_high)) | ((adv < 0) & (r < 1.0 - epsilon_low))
        keep = (~dropped).to(r.dtype)
        loss = loss * keep
    metrics = {
        "clip/frac": masked_mean((weight != r).to(r.dtype), inp.mask),
        "clip/masked_frac": masked_mean(1.0 - keep, inp.mask),
        "ratio/mean": masked_mean(r, inp.mask),
    }
    return loss, metrics


@POLICY_LOSSES.register("sapo", zero_advantage_zero_gradient=True)
def sapo_loss(
    inp: LossInputs, *, tau_pos: float = 1.0, tau_neg: float = 1.05
) -> tuple[torch.Tensor, Metrics]:
    """SAPO: a soft, temperature-controlled sigmoid gate on the token ratio instead of the hard clip.

        f(r; tau) = sigmoid(tau (r - 1)) * 4 / tau,   tau_it = tau_pos if A_it > 0 else tau_neg
        L_it      = -f(r_it; tau_it) A_it,           r_it = exp(clamp(l_it - l^old_it, -20, 20))

    grad L_it = -w_it r_it A_it grad l_it with w_it = 4 sigmoid(x)(1 - sigmoid(x)), x = tau (r - 1):
    w = 1 on-policy (r = 1, any tau), so the first update is plain GRPO's; off-policy tokens are
    attenuated smoothly (never cut to 0 as by the clip), faster for larger tau. tau_neg > tau_pos
    damps negative-advantage tokens more, whose updates spread over the whole vocabulary.
    "Soft Adaptive Policy Optimization", Gao et al. (Qwen), arXiv 2511.20347 (the gate f, its
    gradient weight w, the asymmetric temperatures). Defaults tau_pos = 1.0, tau_neg = 1.05 are
    the paper's, as in TRL's ``loss_type="sapo"`` (``sapo_temperature_pos/neg``) and verl's
    ``tau_pos/tau_neg``; the +-20 log-ratio clamp is verl's (it keeps exp and the backward
    finite). Token ratio only, as in the paper (no ``ratio`` option). Expects
    ``seq_mean_token_mean`` (the paper's (1/G) sum_i (1/|y_i|) sum_t).
    """
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"sapo options tau_pos and tau_neg must be > 0 (got {tau_pos}, {tau_neg})")
    adv = inp.token_adv().detach()
    r = torch.exp(torch.clamp(inp.logp - inp.old_logp.detach(), -20.0, 20.0))  # [B, T]
    tau = torch.where(adv > 0, torch.full_like(r, tau_pos), torch.full_like(r, tau_neg))
    gate = torch.sigmoid(tau * (r - 1.0))
    loss = -gate * (4.0 / tau) * adv
    with torch.no_grad():
        metrics = {
            # the gradient weight w: 1 on-policy, the soft analogue of 1 - the clip fraction
            "sapo/grad_weight": masked_mean(4.0 * gate * (1.0 - gate), inp.mask),
            "ratio/mean": masked_mean(r, inp.mask),
        }
    return loss, metrics


@POLICY_LOSSES.register("humanline", inputs=("ref_logp",), zero_advantage_zero_gradient=True)  # -min(r A, clip(r) A) = 0 at A = 0
def humanline_loss(
    inp: LossInputs,
    *,
    log_eps_p: float = -1.5,
    log_eps_r: float = 1.5,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
) -> tuple[torch.Tensor, Metrics]:
    """Humanline-GRPO: PPO-clip on a ratio against the synced reference, log-ratio clamped to [log eps_P, log eps_R].

        z_it = clamp(l_it - l^ref_it, log_eps_p, log_eps_r),   r_it = exp(z_it)
        L_it = -min(r_it A_it, clip(r_it, 1 - eps_low, 1 + eps_high) A_it)       [B, T]

    A token whose log-ratio leaves the band has zero gradient. "Humanline: Online Alignment as
    Perceptual Loss", arXiv 2509.24207. Aggregation as configured (the recipes use
    ``token_mean``). Defaults -1.5 / 1.5 are open-r1-humanline's; its GRPO recipes use
    -0.1 / 1.0 or -0.1 / 0.5, HALOs -1.0 / 1.5.

    ``ref_logp`` holds the log-probs of the *humanline reference*: after every k-th optimizer
    update the trainer loads into it the weights from before that update
    (:func:`humanline_should_sync`, ``algorithm.ref_sync_every`` = k), so with k = 1 the ratio is
    against the policy one update back (GRPO whose pi_old is the previous update's policy). The
    usual ``beta * k3`` term against it comes from the objective's KL. ``ref_logp`` is a declared
    input: without it this is an error, never a ratio against ``old_logp``.
    """
    if log_eps_p > 0 or log_eps_r < 0:
        raise ValueError(f"humanline needs log_eps_p <= 0 <= log_eps_r (got {log_eps_p}, {log_eps_r})")
    if inp.ref_logp is None:
        raise ValueError("humanline needs ref_logp (the synced reference's log-probs): the trainer scores it")
    adv = inp.token_adv().detach()
    log_r = inp.logp - inp.ref_logp.detach()
    z = torch.clamp(log_r, log_eps_p, log_eps_r)
    loss, is_clipped = clipped_surrogate(torch.exp(z), adv, epsilon_low, epsilon_high)
    with torch.no_grad():
        inside = ((log_r >= log_eps_p) & (log_r <= log_eps_r)).to(z.dtype)
        metrics = {
            "humanline/unclamped_frac": masked_mean(inside, inp.mask),
            "clip/frac": masked_mean(is_clipped, inp.mask),
            "ratio/mean": masked_mean(torch.exp(z), inp.mask),
        }
    return loss, metrics


def humanline_should_sync(step: int, every: int) -> bool:
    """Whether optimizer update ``step`` (1-based) ends with pi_ref <- the policy weights captured before it.

    Humanline syncing ("Humanline: Online Alignment as Perceptual Loss", arXiv 2509.24207; the
    public code's ``on_pre_optimizer_step`` capture and ``global_step % k == 0`` load): every
    ``every`` = k optimizer updates, counted over the run (mu updates per batch count mu times).
    HALOs uses k = 1, open-r1-humanline k in {12, 16, 20, 25}. ``every <= 0`` never syncs (a
    frozen reference). The trainer applies exactly this rule (``trainer/stages.ReferenceSync``).
    """
    return every > 0 and step > 0 and step % every == 0


@POLICY_LOSSES.register(
    "ts_grpo", inputs=("plan_mask",), ratios=("token", "span"), aggregations=("seq_mean_token_mean",), kl_aggregation="token_mean",
)
def ts_grpo_loss(
    inp: LossInputs,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    seq_epsilon_low: float = 3e-4,
    seq_epsilon_high: float = 4e-4,
    plan_weight: float = 1.0,
    answer_weight: float = 1.0,
) -> tuple[torch.Tensor, Metrics]:
    """TS-GRPO: token-level clipped surrogate on the planning span + GSPO sequence term on the answer span.

        J_i = lambda_P (1/|P_i|) sum_{t in P_i} g(r_it; eps) + lambda_S g(s^S_i; eps_s)
        s^S_i = exp((1/|S_i|) sum_{t in S_i} (l_it - l^old_it)),   loss = -(1/G) sum_i J_i

    Thinkquel ("A Model Dedicated to Text-to-dbt Using Synthetic Data and a Span-Aware
    Objective", arXiv 2510.00186). The weighting of the two spans, their normalisers and the
    defaults (lambda = 1, eps_s = 3e-4 / 4e-4) are [inferred]. Spans come
    from ``inp.plan_mask`` (see the 'span' ratio); an empty span contributes 0. Per-token
    values are scaled by |o_i| / |span| so that ``seq_mean_token_mean`` (expected) gives
    (1/G) sum_i J_i. Without a plan span this is GSPO; with plan = mask it is GRPO.

    The objective's beta * KL term is a token mean over all completion tokens of the batch,
    J - beta (1/sum_i |o_i|) sum_it KL_it [inferred from the paper's description], not averaged per
    sequence like J: the registration declares ``kl_aggregation="token_mean"``. It reads
    ``algorithm.ratio`` only as 'span' (the ratio it always computes) and needs ``seq_mean_token_mean``.
    """
    adv = inp.token_adv().detach()
    mask = inp.mask
    plan = inp.plan_mask.to(mask.dtype) * mask if inp.plan_mask is not None else torch.zeros_like(mask)
    answer = mask - plan
    r = RATIOS.get("span")(inp)  # token ratio on P, GSPO-token ratio of S on S
    tok_loss, tok_clipped = clipped_surrogate(r, adv, epsilon_low, epsilon_high)
    seq_loss, seq_clipped = clipped_surrogate(r, adv, seq_epsilon_low, seq_epsilon_high)
    length = mask.sum(-1, keepdim=True)
    plan_part = plan_weight * plan * tok_loss / plan.sum(-1, keepdim=True).clamp(min=1)
    answer_part = answer_weight * answer * seq_loss / answer.sum(-1, keepdim=True).clamp(min=1)
    loss = length * (plan_part + answer_part)
    with torch.no_grad():
        metrics = {
            "clip/frac": masked_mean(tok_clipped, plan),
            "clip/seq_frac": masked_mean(seq_clipped, answer),
            "ts/plan_frac": masked_mean(plan, mask),
            "ratio/mean": masked_mean(r, mask),
        }
    return loss, metrics


@POLICY_LOSSES.register("grpo_verif", inputs=("verif_mask",), optional=("verif_adv",), aggregations=("seq_mean_token_mean",))
def grpo_verif_loss(
    inp: LossInputs,
    *,
    alpha: float = 0.2,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
) -> tuple[torch.Tensor, Metrics]:
    """GRPO-Verif: clipped surrogate on the solution plus alpha times the clipped surrogate on its self-verification.

        J = (1/n) sum_i [ (1/|y_i|) sum_{t in y_i} g(r_it, A_i) + alpha (1/|v_i|) sum_{t in v_i} g(r_it, A^V_i) ]

    "From Solving to Verifying: A Unified Objective for Robust Reasoning in LLMs", arXiv
    2511.15137 (alpha = 0.2, eps = 0.28, beta = 0). ``inp.verif_mask`` marks the verification
    tokens v_i of a row (the rest of ``mask`` is the solution y_i); ``inp.verif_adv [B]`` are
    their advantages A^V (standardised over the verification rewards of the question; if
    absent, ``adv`` is used there, so a ``[B, T]`` adv can carry both). Per-token values are
    scaled by |o_i| / |part|, so ``seq_mean_token_mean`` (expected) gives J exactly when a row
    holds a solution and its verification. If verifications are separate rows instead
    (verif_mask = mask on them), the result is J / 2 (two rows per solution).
    Without ``verif_mask`` this is GRPO's ppo_clip.
    """
    adv = inp.token_adv().detach()
    mask = inp.mask
    ver = inp.verif_mask.to(mask.dtype) * mask if inp.verif_mask is not None else torch.zeros_like(mask)
    sol = mask - ver
    ver_adv = inp.verif_adv.detach().unsqueeze(-1).expand_as(adv) if inp.verif_adv is not None else adv
    r = torch.exp(inp.logp - inp.old_logp.detach())
    sol_loss, sol_clipped = clipped_surrogate(r, adv, epsilon_low, epsilon_high)
    ver_loss, ver_clipped = clipped_surrogate(r, ver_adv, epsilon_low, epsilon_high)
    length = mask.sum(-1, keepdim=True)
    loss = length * (
        sol * sol_loss / sol.sum(-1, keepdim=True).clamp(min=1)
        + alpha * ver * ver_loss / ver.sum(-1, keepdim=True).clamp(min=1)
    )
    with torch.no_grad():
        metrics = {
            "clip/frac": masked_mean(sol_clipped * sol + ver_clipped * ver, mask),
            "verif/token_frac": masked_mean(ver, mask),
            "ratio/mean": masked_mean(r, mask),
        }
    return loss, metrics

