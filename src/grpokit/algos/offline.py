"""Offline objectives on given completions: SFT, DPO, KTO and their humanline variants.

Pure tensor functions registered by name in :data:`OFFLINE_LOSSES` (axis ``offline_loss``). Each
takes one :class:`OfflineInputs` of token log-probs and returns ``(loss, metrics)``: ``loss`` is
this micro-batch's share of the step's loss, normalised by the whole step's counts (the context
arguments ``num_rows`` / ``num_tokens``), so summing the micro-batches' gradients gives the
full-batch gradient exactly. Sequence log-probs are sums over completion tokens, as in the
papers and TRL. Sign convention: loss = -objective (minimised). ``beta`` is ``offline.beta``.

A registration declares ``stage`` (the dataset format it reads: ``sft`` prompt/completion,
``dpo`` prompt/chosen/rejected, ``kto`` prompt/completion/label) and ``ref_sync_every`` (the
reference-sync period the method is defined with; humanline: every step, as HALOs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from grpokit.registry import Registry

OFFLINE_LOSSES = Registry(
    "offline_loss",
    properties={"stage": None, "ref_sync_every": 0},
    # offered by the offline trainer, never user options: the coefficient and the step's totals
    context=("beta", "num_rows", "num_tokens"),
)

Metrics = dict[str, torch.Tensor]


@dataclass
class OfflineInputs:
    """Named tensors every offline loss receives.

    logp:        [B, T] log pi_theta of each completion token (carries gradient)
    mask:        [B, T] 1 = completion token (prompt tokens are never in it)
    ref_logp:    [B, T] log pi_ref of the same tokens, no gradient (dpo, kto)
    label:       [B] 1 = desirable, 0 = undesirable completion (kto)
    kl_logp:     [n, T'] log pi_theta of the step's mismatched pairs (x_i, y_(i-1 mod n)), no gradient (kto)
    kl_ref_logp: [n, T'] log pi_ref of the same pairs (kto)
    kl_mask:     [n, T'] 1 = completion token of a mismatched pair (kto)

    Paired rows (dpo): rows ``[0, m)`` are the chosen completions and rows ``[m, 2m)`` the
    rejected ones, row ``i`` paired with row ``m + i`` (TRL's concatenated layout).
    """

    logp: torch.Tensor
    mask: torch.Tensor
    ref_logp: Optional[torch.Tensor] = None
    label: Optional[torch.Tensor] = None
    kl_logp: Optional[torch.Tensor] = None
    kl_ref_logp: Optional[torch.Tensor] = None
    kl_mask: Optional[torch.Tensor] = None


def _check_band(log_eps_p: float, log_eps_r: float) -> tuple[float, float]:
    if not log_eps_p < 0 < log_eps_r:
        raise ValueError(f"humanline needs log_eps_p < 0 < log_eps_r (got {log_eps_p}, {log_eps_r})")
    return log_eps_p, log_eps_r


def sequence_log_ratios(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, band: tuple[float, float] = (-math.inf, math.inf)
) -> tuple[torch.Tensor, torch.Tensor]:
    """``R [B]`` = sum_t clamp(logp_t - ref_logp_t, log eps_P, log eps_R) over completion tokens, and the unclamped fraction ``[]``.

    The token-level clamp is humanline clipping ("Humanline: Online Alignment as Perceptual
    Loss", Liu, Muennighoff, Ethayarajh, arXiv 2509.24207, its humanline clipping; HALOs ``get_sequence_rewards``):
    a token whose log-ratio leaves the band adds its bound and no gradient. The default band
    (-inf, inf) is the plain log-ratio log pi_theta(y|x) - log pi_ref(y|x) of DPO and KTO.
    """
    diff = logp - ref_logp.detach()
    z = diff.clamp(band[0], band[1]) * mask  # [B, T]
    with torch.no_grad():
        inside = ((diff > band[0]) & (diff < band[1])).to(mask.dtype) * mask
        unclamped = inside.sum() / mask.sum().clamp(min=1)
    return z.sum(-1), unclamped


@OFFLINE_LOSSES.register("sft", inputs=("logp", "mask"), stage="sft")
def sft(inp: OfflineInputs, *, num_tokens: float) -> tuple[torch.Tensor, Metrics]:
    """SFT: token-mean negative log-likelihood of the completion tokens, prompt tokens masked.

        L = -(1 / N) sum_{i,t} m_it log pi_theta(y_it | x_i, y_i,<t),   N = completion tokens in the step

    TRL's completion-only loss (SFTTrainer with prompt/completion data): the mean is over every
    completion token of the optimizer batch, so long completions weigh more than short ones.
    """
    nll = -(inp.logp * inp.mask).sum()
    return nll / num_tokens, {"nll": (nll / inp.mask.sum().clamp(min=1)).detach()}


def _pair_loss(inp: OfflineInputs, beta: float, num_rows: float, band: tuple[float, float]) -> tuple[torch.Tensor, Metrics]:
    """-log sigmoid(beta (R_w - R_l)) summed over this micro-batch's pairs / the step's pairs."""
    m = inp.logp.shape[0] // 2
    r, unclamped = sequence_log_ratios(inp.logp, inp.ref_logp, inp.mask, band)  # [2m]
    chosen, rejected = beta * r[:m], beta * r[m:]  # implicit rewards
    losses = -F.logsigmoid(chosen - rejected)  # [m]
    with torch.no_grad():
        seq_logp = (inp.logp * inp.mask).sum(-1)
        metrics = {
            "rewards/chosen": chosen.mean(), "rewards/rejected": rejected.mean(),
            "rewards/margins": (chosen - rejected).mean(), "rewards/accuracies": (chosen > rejected).to(r.dtype).mean(),
            "logps/chosen": seq_logp[:m].mean(), "logps/rejected": seq_logp[m:].mean(),
        }
    if math.isfinite(band[0]) or math.isfinite(band[1]):
        metrics["humanline/unclamped_frac"] = unclamped
    return losses.sum() / num_rows, {k: v.detach() for k, v in metrics.items()}


@OFFLINE_LOSSES.register("dpo", inputs=("logp", "ref_logp", "mask"), stage="dpo")
def dpo(inp: OfflineInputs, *, beta: float, num_rows: float) -> tuple[torch.Tensor, Metrics]:
    """DPO: -log sigmoid(beta [(log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x))]).

        R(x, y) = sum_t (logp_t - ref_logp_t)      (summed completion log-probs)        [2m]
        L = (1 / n) sum_pairs -log sigmoid(beta (R(x, y_w) - R(x, y_l))),   n = pairs in the step

    Rafailov et al., "Direct Preference Optimization: Your Language Model is Secretly a Reward
    Model", arXiv 2305.18290, Sec. 4 eq. 7 (TRL's ``loss_type="sigmoid"``). Metrics as TRL:
    implicit rewards beta R of the chosen / rejected completions, their margin and the fraction
    of pairs ranked correctly.
    """
    return _pair_loss(inp, beta, num_rows, (-math.inf, math.inf))


@OFFLINE_LOSSES.register("humanline_dpo", inputs=("logp", "ref_logp", "mask"), stage="dpo", ref_sync_every=1)
def humanline_dpo(
    inp: OfflineInputs, *, beta: float, num_rows: float, log_eps_p: float = -1.0, log_eps_r: float = 1.5
) -> tuple[torch.Tensor, Metrics]:
    """Humanline-DPO: DPO on token log-ratios clamped to [log eps_P, log eps_R], against a reference synced every k steps.

        R(x, y) = sum_t clamp(logp_t - ref_logp_t, log_eps_p, log_eps_r)               [2m]
        L = (1 / n) sum_pairs -log sigmoid(beta (R(x, y_w) - R(x, y_l)))

    Liu, Muennighoff, Ethayarajh, "Humanline: Online Alignment as Perceptual Loss", arXiv
    2509.24207, its humanline-DPO variant (HALOs ``DPOTrainer`` with ``humanline=true``). The band defaults are
    HALOs' (-1.0, 1.5). The reference sync (``offline.ref_sync_every``, default 1 for this loss)
    is the trainer's: the reference takes the policy's pre-update weights every k steps.
    """
    return _pair_loss(inp, beta, num_rows, _check_band(log_eps_p, log_eps_r))


def kto_reference_point(
    kl_logp: torch.Tensor, kl_ref_logp: torch.Tensor, kl_mask: torch.Tensor, band: tuple[float, float] = (-math.inf, math.inf)
) -> torch.Tensor:
    """``z_ref []`` = max(0, mean_i R(x_i, y'_i)) over the step's mismatched pairs, detached.

    KTO's reference point, the KL(pi_theta || pi_ref) estimate (Ethayarajh et al., arXiv
    2402.01306, Sec. 4): each prompt x_i is paired with the completion of row i - 1 (mod n) of
    the step's batch, as TRL does; the estimate is clamped at 0 and no gradient flows through it.
    Humanline-KTO clamps the token log-ratios of the pairs too (HALOs).
    """
    r, _ = sequence_log_ratios(kl_logp.detach(), kl_ref_logp, kl_mask, band)
    return r.mean().clamp(min=0).detach()


def _kto_loss(
    inp: OfflineInputs, beta: float, num_rows: float, desirable_weight: float, undesirable_weight: float, band: tuple[float, float]
) -> tuple[torch.Tensor, Metrics]:
    """lambda_D (1 - sigmoid(beta (R - z))) or lambda_U (1 - sigmoid(beta (z - R))) per row, summed / the step's rows."""
    r, unclamped = sequence_log_ratios(inp.logp, inp.ref_logp, inp.mask, band)  # [B]
    z = kto_reference_point(inp.kl_logp, inp.kl_ref_logp, inp.kl_mask, band)
    desirable = inp.label > 0
    losses = torch.where(
        desirable, desirable_weight * (1 - torch.sigmoid(beta * (r - z))), undesirable_weight * (1 - torch.sigmoid(beta * (z - r)))
    )  # [B]
    with torch.no_grad():
        d, u = desirable.to(r.dtype), (~desirable).to(r.dtype)
        chosen = (beta * r * d).sum() / d.sum().clamp(min=1)  # implicit reward of the desirable rows
        rejected = (beta * r * u).sum() / u.sum().clamp(min=1)
        metrics = {"kl": z, "rewards/chosen": chosen, "rewards/rejected": rejected, "rewards/margins": chosen - rejected}
    if math.isfinite(band[0]) or math.isfinite(band[1]):
        metrics["humanline/unclamped_frac"] = unclamped
    return losses.sum() / num_rows, metrics


@OFFLINE_LOSSES.register("kto", inputs=("logp", "ref_logp", "mask", "label", "kl_logp"), stage="kto")
def kto(
    inp: OfflineInputs, *, beta: float, num_rows: float, desirable_weight: float = 1.0, undesirable_weight: float = 1.0
) -> tuple[torch.Tensor, Metrics]:
    """KTO: the Kahneman-Tversky loss of unpaired desirable / undesirable completions around the KL reference point.

        R(x, y) = sum_t (logp_t - ref_logp_t)                                            [B]
        z_ref   = max(0, mean_i R(x_i, y'_i)), detached (mismatched pairs, :func:`kto_reference_point`)
        L_i     = lambda_D (1 - sigmoid(beta (R_i - z_ref)))   if y_i is desirable
                  lambda_U (1 - sigmoid(beta (z_ref - R_i)))   if y_i is undesirable
        L = (1 / n) sum_i L_i,   n = rows in the step

    Ethayarajh et al., "KTO: Model Alignment as Prospect Theoretic Optimization", arXiv
    2402.01306, Sec. 4 (TRL ``KTOTrainer``, ``loss_type="kto"``). The paper suggests
    lambda_D n_D / (lambda_U n_U) in [1, 4/3] for unbalanced data; both weights default to 1.
    """
    return _kto_loss(inp, beta, num_rows, desirable_weight, undesirable_weight, (-math.inf, math.inf))


@OFFLINE_LOSSES.register("humanline_kto", inputs=("logp", "ref_logp", "mask", "label", "kl_logp"), stage="kto", ref_sync_every=1)
def humanline_kto(
    inp: OfflineInputs, *, beta: float, num_rows: float, desirable_weight: float = 1.0, undesirable_weight: float = 1.0,
    log_eps_p: float = -1.0, log_eps_r: float = 1.5,
) -> tuple[torch.Tensor, Metrics]:
    """Humanline-KTO: KTO with token log-ratios clamped to [log eps_P, log eps_R], reference synced every k steps.

        R(x, y) = sum_t clamp(logp_t - ref_logp_t, log_eps_p, log_eps_r)                  [B]
        z_ref   = max(0, mean_i R(x_i, y'_i)) with the same clamp, detached
        L_i     = lambda_D (1 - sigmoid(beta (R_i - z_ref)))  or  lambda_U (1 - sigmoid(beta (z_ref - R_i)))

    Liu, Muennighoff, Ethayarajh, "Humanline: Online Alignment as Perceptual Loss", arXiv
    2509.24207, its humanline-KTO variant (HALOs ``KTOTrainer`` with ``humanline=true``); band defaults HALOs' (-1.0, 1.5).
    """
    band = _check_band(log_eps_p, log_eps_r)
    return _kto_loss(inp, beta, num_rows, desirable_weight, undesirable_weight, band)
