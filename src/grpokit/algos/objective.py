"""The full GRPO objective on one micro-batch: policy loss + beta * KL, aggregated.

    L = Agg_{i,t}[ loss_{i,t} + beta * KL_{i,t} ]        (arXiv 2402.03300, eq. 3, negated)

Pure function; the chosen variants arrive as callables looked up from the registries.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from grpokit.algos.losses import LossInputs, masked_mean


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
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Scalar loss of a micro-batch and its metrics (tensors, detached).

    ``num_seqs``/``num_tokens`` are the optimizer batch's totals so that gradient accumulation
    over micro-batches sums to exactly the full-batch loss. ``token_weights [B, T]`` (λ-GRPO,
    forking tokens, …) multiply the per-token policy loss; the mask stays the normaliser.
    """
    per_token, metrics = policy_loss(inp, **(loss_options or {}))  # [B, T]
    if token_weights is not None:
        per_token = per_token * token_weights
    if beta > 0:
        if inp.ref_logp is None or kl_estimator is None:
            raise ValueError("beta > 0 needs ref_logp and a KL estimator")
        kl = kl_estimator(inp.logp, inp.ref_logp.detach(), **(kl_options or {}))  # [B, T]
        per_token = per_token + beta * kl
        metrics["kl"] = masked_mean(kl.detach(), inp.mask)
    loss = aggregate(per_token, inp.mask, num_seqs=num_seqs, num_tokens=num_tokens, max_len=max_len)
    if inp.entropy is not None:
        metrics["entropy"] = masked_mean(inp.entropy.detach(), inp.mask)
    return loss, {k: v.detach() for k, v in metrics.items()}
