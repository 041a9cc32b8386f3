"""Variational reasoning: importance weights of posterior traces, the multi-trace bound, forward-KL weights.

Zhou et al., "Variational Reasoning for Language Models", arXiv 2509.22637: its ELBO and
multi-trace objective, its forward-KL posterior training and its reading of RFT / GRPO as
accuracy-weighted forward-KL steps; the estimators of π(Y|x,z) and the top-1 selection follow
the authors' released data-building scripts (``variational_reasoning/build_data_{GML,Acc}.py``). Question ``x``, thinking trace ``z``, answer
``y``, correct answers ``Y``; ``π_θ(z, y|x) = π_θ(z|x) π_θ(y|x,z)``; a variational posterior
``q_φ(z|x, y*)`` sees the reference answer. With K traces ``z_k ~ q_φ``:

    ρ_k = π_θ(z_k|x) π_θ(Y|x,z_k) / q_φ(z_k|x,y*)
    L_K = E[ log (1/K) Σ_k ρ_k ]  ≤  log P_θ(Y|x),   L_1 ≤ L_2 ≤ … (IWAE)
    ∇_θ L_K = E[ Σ_k ρ̃_k ∇_θ log π_θ(z_k, Y|x) ],   ρ̃_k = ρ_k / Σ_j ρ_j   (weighted SFT)

and the posterior is trained by forward KL on the policy's own samples,
``−∇_φ KL(p_θ(z|x,Y) ‖ q_φ) = E_{z~π_θ}[ π_θ(Y|x,z)/P_θ(Y|x) ∇_φ log q_φ(z|x,y*) ]``, i.e. with
binary correctness an SFT of ``q_φ`` on the correct samples weighted ``1[correct]/#correct`` per
question. Pure tensor functions: every result is on the device of its inputs; no gradient flows
through a weight (callers pass detached log-probs).
"""

from __future__ import annotations

import torch


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def _num_groups(group_ids: torch.Tensor) -> int:
    return int(group_ids.max()) + 1 if group_ids.numel() else 0


def _group_sum(x: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``[G]`` per-group sums of ``x [B]``."""
    return torch.zeros(_num_groups(group_ids), dtype=x.dtype, device=x.device).index_add_(0, group_ids, x)


def _group_max(x: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``[G]`` per-group maxima of ``x [B]`` (−inf for a group whose entries are all −inf)."""
    empty = torch.full((_num_groups(group_ids),), float("-inf"), dtype=x.dtype, device=x.device)
    return empty.scatter_reduce(0, group_ids, x, reduce="amax")


def group_logsumexp(x: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``[G]`` log Σ_{k in g} exp(x_k), stable; −inf for a group whose entries are all −inf."""
    gmax = _group_max(x, group_ids)
    shift = torch.where(torch.isfinite(gmax), gmax, torch.zeros_like(gmax))  # all −inf: exp(−inf) = 0 below
    return _group_sum((x - shift[group_ids]).exp(), group_ids).log() + shift


def trace_log_ratio(pi_logp: torch.Tensor, pi_mask: torch.Tensor, q_logp: torch.Tensor, q_mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` per-token mean of ``log π_θ(z_t|·) − log q_φ(z_t|·)`` over the shared length of the two arrays.

    ``pi_logp, pi_mask [B, T1]`` and ``q_logp, q_mask [B, T2]`` are the left-aligned log-probs of
    the same trace tokens under the policy (plain prompt) and the posterior (hinted prompt);
    row i uses its first ``n_i = min(|π_i|, |q_i|)`` tokens (0 for an empty trace). The mean (a
    log geometric-mean likelihood ratio) is the authors' numerically sane stand-in for the sum,
    ``think_logp_diff`` in their scripts (arXiv 2509.22637, estimating the likelihood ratio).
    """
    n = torch.minimum(pi_mask.sum(-1), q_mask.sum(-1)).to(pi_logp.dtype)  # [B]
    width = min(pi_logp.shape[1], q_logp.shape[1])
    positions = torch.arange(width, device=pi_logp.device)
    shared = (positions[None, :] < n[:, None]).to(pi_logp.dtype)  # [B, width]
    diff = (pi_logp[:, :width] - q_logp[:, :width]) * shared
    return diff.sum(-1) / n.clamp(min=1)


def gml_log_likelihood(answer_logp: torch.Tensor, answer_mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` log π̂_GML(Y|x,z) = mean_t log π_θ(y*_t | x, z, y*_<t): log of the geometric-mean likelihood of y*.

    ``answer_logp, answer_mask [B, A]``: log-probs of the reference answer's tokens after the
    trace (mask 1 = an answer token). A row without answer tokens gets 0 (π̂ = 1). GML estimator
    of arXiv 2509.22637 (``initial_answer_logps.mean()`` in build_data_GML.py).
    """
    m = answer_mask.to(answer_logp.dtype)
    return (answer_logp * m).sum(-1) / m.sum(-1).clamp(min=1)


def acc_log_likelihood(correct: torch.Tensor) -> torch.Tensor:
    """``[B]`` log π̂_Acc(Y|x,z) = log((1/n) Σ_j 1[y_j ∈ Y]) from ``correct [B, n_ans]`` (or ``[B]``: n_ans = 1).

    −inf where no answer is correct: such a trace gets ρ = 0, as the authors' scripts keep only
    traces with accuracy > 0 (build_data_Acc.py). Acc estimator of arXiv 2509.22637.
    """
    c = _float(correct)
    frac = c.mean(-1) if c.dim() == 2 else c
    return frac.log()


def log_importance_weights(log_pi_hat: torch.Tensor, log_ratio: torch.Tensor) -> torch.Tensor:
    """``[B]`` log ρ_k = log π̂(Y|x,z_k) + log π_θ(z_k|x)/q_φ(z_k|x,y*) (the ratio as :func:`trace_log_ratio` gives it)."""
    return log_pi_hat + log_ratio


def iwae_bound(log_rho: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``[G]`` L_K = log (1/K_g) Σ_{k in g} ρ_k per question (−inf where every ρ_k = 0).

    ``log_rho, group_ids [B]``; ``K_g`` is the number of traces of question g. Averaged over draws
    of the traces it is the multi-trace (IWAE) lower bound of log P_θ(Y|x), monotone in K
    (arXiv 2509.22637, the multi-trace objective).
    """
    k = _group_sum(torch.ones_like(log_rho), group_ids)
    return group_logsumexp(log_rho, group_ids) - k.clamp(min=1).log()


def trace_weights(log_rho: torch.Tensor, group_ids: torch.Tensor, selection: str = "soft") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``[B]`` weights of the posterior traces, per question: ρ̃_k = ρ_k / Σ_j ρ_j ('soft') or the argmax one-hot ('top1').

    'soft' is the paper's IWAE gradient (arXiv 2509.22637, the multi-trace objective); 'top1' keeps only the trace of
    largest ρ (ties → the first row), the authors' released pipeline. A question whose traces all
    have ρ = 0 (log ρ = −inf, e.g. no correct answer under 'acc') gets weight 0 on every trace —
    where the authors fall back to the dataset's own response, which an RL run does not have.
    Metrics: ``ess`` (mean over valid questions of 1 / Σ_k ρ̃_k², between 1 and K) and
    ``valid_frac`` (questions with a trace of ρ > 0).
    """
    lse = group_logsumexp(log_rho, group_ids)  # [G]
    valid = torch.isfinite(lse)  # [G]
    if selection == "soft":
        w = torch.where(valid[group_ids], (log_rho - lse[group_ids]).exp(), torch.zeros_like(log_rho))
    elif selection == "top1":
        rows = torch.arange(log_rho.shape[0], device=log_rho.device)
        at_max = (log_rho == _group_max(log_rho, group_ids)[group_ids]) & valid[group_ids]
        sentinel = torch.full_like(rows, log_rho.shape[0])
        first = sentinel[: _num_groups(group_ids)].scatter_reduce(0, group_ids, torch.where(at_max, rows, sentinel), reduce="amin")
        w = (rows == first[group_ids]).to(log_rho.dtype)
    else:
        raise ValueError(f"unknown trace selection '{selection}'; choose soft or top1")
    ess = 1.0 / _group_sum(w**2, group_ids)[valid]
    metrics = {
        "ess": ess.mean() if ess.numel() else log_rho.new_zeros(()),
        "valid_frac": valid.to(log_rho.dtype).mean() if valid.numel() else log_rho.new_zeros(()),
    }
    return w, metrics


def forward_kl_weights(correct: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``[B]`` w_i = r_i / Σ_{j in group(i)} r_j (0 where the sum is 0): the forward-KL posterior weights.

    ``correct [B]``: π̂(Y|x,z_i) of each of the policy's own samples (1[correct] for binary
    correctness, then ``1[correct]/#correct``); negative values are clamped to 0. Every question
    with a correct sample weighs 1 in total — not its accuracy ``p`` (RFT) nor ``sqrt(p/(1−p))``
    (GRPO). arXiv 2509.22637, forward-KL posterior training.
    """
    r = _float(correct.detach()).clamp(min=0)
    total = _group_sum(r, group_ids)[group_ids]
    return torch.where(total > 0, r / total.clamp(min=torch.finfo(r.dtype).tiny), torch.zeros_like(r))


def rft_implicit_weight(p: torch.Tensor) -> torch.Tensor:
    """w_RFT(p) = p: rejection-sampling finetuning is a forward-KL step toward the posterior scaled by accuracy p (arXiv 2509.22637)."""
    return p


def grpo_implicit_weight(p: torch.Tensor) -> torch.Tensor:
    """w_GRPO(p) = p/σ = sqrt(p/(1−p)), σ = sqrt(p(1−p)): binary-reward GRPO's implicit question weight.

    On-policy, unclipped and std-normalised, ``E[(r−p)/σ ∇log π] = (p/σ) E_post[∇log π]``;
    without the std (Dr. GRPO) the weight is p, like RFT. The forward-KL objective weighs 1.
    arXiv 2509.22637, its reading of RFT and binary-reward RL as local forward-KL objectives.
    """
    return torch.sqrt(p / (1.0 - p))


__all__ = [
    "group_logsumexp", "trace_log_ratio", "gml_log_likelihood", "acc_log_likelihood", "log_importance_weights",
    "iwae_bound", "trace_weights", "forward_kl_weights", "rft_implicit_weight", "grpo_implicit_weight",
]
