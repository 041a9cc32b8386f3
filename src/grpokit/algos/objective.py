"""The full GRPO objective on one micro-batch: policy loss + beta * KL, aggregated.

    L = Agg_{i,t}[ loss_{i,t} + beta * KL_{i,t} ]        (arXiv 2402.03300, eq. 3, negated)

Pure function; the chosen variants arrive as callables looked up from the registries.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from grpokit.algos.losses import LossInputs, masked_mean
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
    entropy_coef: float = 0.0,
    correction: Optional[Callable[..., tuple[torch.Tensor, dict]]] = None,
    correction_options: Optional[dict] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Scalar loss of a micro-batch and its metrics (tensors, detached).

    ``num_seqs``/``num_tokens`` are the optimizer batch's totals so that gradient accumulation
    over micro-batches sums to exactly the full-batch loss. ``token_weights [B, T]`` (λ-GRPO,
    forking tokens, …) multiply the per-token policy loss; the mask stays the normaliser.
    ``entropy_coef`` adds an entropy bonus -c * H_t per token (``inp.entropy`` must carry gradient).
    ``correction`` (off-policy / sampler mismatch): ``w [B, T] = correction(old_logp, behaviour_logp,
    mask)`` multiplies the policy-gradient term only (not the KL or entropy terms).
    ``loss_options`` are offered to the loss; it takes the keys its signature names (unknown user
    keys were refused at load time).
    """
    per_token, metrics = call_with(policy_loss, inp, context=loss_options or {})  # [B, T]
    if correction is not None:
        if inp.behaviour_logp is None:
            raise ValueError("an off-policy correction needs the sampler's log-probs (behaviour_logp)")
        w, c_metrics = correction(inp.old_logp.detach(), inp.behaviour_logp, inp.mask, **(correction_options or {}))
        per_token = per_token * w
        metrics.update(c_metrics)
    if token_weights is not None:
        per_token = per_token * token_weights
    if beta > 0 and kl_estimator is not None:
        ref = inp.ref_logp.detach() if inp.ref_logp is not None else None
        kl = call_with(kl_estimator, inp.logp, ref, context=kl_options or {})  # [B, T]
        per_token = per_token + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), inp.mask)
    if entropy_coef and inp.entropy is not None:
        # entropy bonus: maximise H, so subtract it from the loss (needs entropy with gradient)
        per_token = per_token - entropy_coef * inp.entropy
    loss = call_with(aggregate, per_token, inp.mask, context={"num_seqs": num_seqs, "num_tokens": num_tokens, "max_len": max_len})
    if inp.entropy is not None:
        metrics["entropy"] = masked_mean(inp.entropy.detach(), inp.mask)
    return loss, {k: v.detach() for k, v in metrics.items()}
