"""The full GRPO objective on one micro-batch: policy loss + beta * KL, aggregated.

    L = Agg_{i,t}[ loss_{i,t} + beta * KL_{i,t} ]        (arXiv 2402.03300, eq. 3, negated)

with per-token weights of a token weighting applied as its registration's ``kl_scope`` says.

Pure function; the chosen variants arrive as callables looked up from the registries.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from grpokit.algos.losses import LossInputs, masked_mean
from grpokit.algos.token_weights import KL_SCOPES
from grpokit.registry import call_with


def grpo_objective(
    inp: LossInputs,
    *,
    policy_loss: Callable[..., tuple[torch.Tensor, dict]],
    aggregate: Callable[..., torch.Tensor],
    kl_estimator: Optional[Callable[..., torch.Tensor]] = None,
    beta: float = 0.0,
    loss_options: Optional[dict] = None,
    num_seqs: Optional[float] = None,
    num_tokens: Optional[float] = None,
    max_len: Optional[int] = None,
    kl_options: Optional[dict] = None,
    token_weights: Optional[torch.Tensor] = None,
    kl_scope: str = "weighted",
    num_selected: Optional[float] = None,
    entropy_coef: float = 0.0,
    correction: Optional[Callable[..., tuple[torch.Tensor, dict]]] = None,
    correction_options: Optional[dict] = None,
    kl_aggregate: Optional[Callable[..., torch.Tensor]] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Scalar loss of a micro-batch and its metrics (tensors, detached).

    ``num_seqs``/``num_tokens`` are the optimizer batch's totals so that gradient accumulation
    over micro-batches sums to exactly the full-batch loss; they are also offered to the loss
    (a loss with a batch-level term, e.g. DisCO's constraint, takes them). ``token_weights
    [B, T]`` (λ-GRPO, forking tokens, …) multiply the per-token loss; the mask stays the
    normaliser. ``kl_scope`` (declared by the token weighting's registration) says how they meet
    the β·KL term:

        'weighted':  L = Agg[ w_it (loss_it + β KL_it) ]                      (λ-GRPO's code)
        'selected':  L = Agg[ w_it loss_it ] + β Σ_{w_it>0} KL_it / N_sel     (SPINE's masked KL)

    with ``N_sel = num_selected``, the optimizer batch's count of selected loss tokens (default:
    this micro-batch's), so micro-batches sum to the full-batch term. With weights equal to the
    mask ('all') both are GRPO's ``Agg[loss + β KL]``.
    ``entropy_coef`` adds an entropy bonus -c * H_t per token (``inp.entropy`` must carry gradient).
    ``correction`` (off-policy / sampler mismatch): ``w [B, T] = correction(old_logp, behaviour_logp,
    mask)`` multiplies the policy-gradient term only (not the KL or entropy terms).
    ``loss_options`` are offered to the loss; it takes the keys its signature names (unknown user
    keys were refused at load time).
    ``kl_aggregate`` (a loss's declared ``kl_aggregation``): the β·KL term is reduced by it on its
    own, ``L = Agg[loss] + β KLAgg[KL]``, e.g. TS-GRPO's token-mean KL under a sequence-mean loss.
    """
    context = {**(loss_options or {}), "num_seqs": num_seqs, "num_tokens": num_tokens}
    totals = {"num_seqs": num_seqs, "num_tokens": num_tokens, "max_len": max_len}  # the aggregations' context
    per_token, metrics = call_with(policy_loss, inp, context=context)  # [B, T]
    if correction is not None:
        if inp.behaviour_logp is None:
            raise ValueError("an off-policy correction needs the sampler's log-probs (behaviour_logp)")
        w, c_metrics = correction(inp.old_logp.detach(), inp.behaviour_logp, inp.mask, **(correction_options or {}))
        per_token = per_token * w
        metrics.update(c_metrics)
    if kl_scope not in KL_SCOPES:
        raise ValueError(f"unknown kl_scope '{kl_scope}'; choose one of: {', '.join(KL_SCOPES)}")
    if token_weights is not None:
        per_token = per_token * token_weights
    kl_term = None
    if beta > 0 and kl_estimator is not None:
        ref = inp.ref_logp.detach() if inp.ref_logp is not None else None
        kl = call_with(kl_estimator, inp.logp, ref, context=kl_options or {})  # [B, T]
        metrics["kl"] = masked_mean(kl.detach(), inp.mask)
        weighted_kl = kl if token_weights is None else kl * token_weights
        if token_weights is not None and kl_scope == "selected":
            kl_term = _selected_kl(kl, token_weights, inp.mask, beta, num_selected)
        elif kl_aggregate is not None:
            kl_term = beta * call_with(kl_aggregate, weighted_kl, inp.mask, context=totals)
        else:
            per_token = per_token + beta * weighted_kl
    if entropy_coef and inp.entropy is not None:
        # entropy bonus: maximise H, so subtract it from the loss (needs entropy with gradient)
        per_token = per_token - entropy_coef * inp.entropy
    loss = call_with(aggregate, per_token, inp.mask, context=totals)
    if kl_term is not None:
        loss = loss + kl_term
    if inp.entropy is not None:
        metrics["entropy"] = masked_mean(inp.entropy.detach(), inp.mask)
    return loss, {k: v.detach() for k, v in metrics.items()}


def _selected_kl(
    kl: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, beta: float, num_selected: Optional[float]
) -> torch.Tensor:
    """``[]`` β Σ_{i,t: w_it m_it > 0} KL_it / N_sel: the KL restricted to the selected tokens, their mean.

    kl, weights, mask: ``[B, T]``. ``N_sel`` is the optimizer batch's selected-token count
    (``num_selected``; default: this micro-batch's, at least 1). SPINE's KL anchor on the forking
    tokens f, ``λ_KL Σ f·k3 / Σ f`` ("SPINE: Token-Selective Test-Time Reinforcement Learning
    with Entropy-Band Regularization", arXiv 2511.17938).
    """
    selected = (weights * mask) > 0
    n = num_selected if num_selected is not None else selected.sum().clamp(min=1)
    return beta * torch.where(selected, kl, torch.zeros_like(kl)).sum() / n
