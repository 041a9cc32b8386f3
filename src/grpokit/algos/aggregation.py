"""Loss aggregation: reduce a per-token loss matrix ``[B, T]`` with a mask to one scalar.

Gradient accumulation must not change the result, so every mode accepts the *global*
normalisers of the whole optimizer batch: ``num_seqs`` (completions in the batch) and
``num_tokens`` (sum of the mask over the batch). When omitted, the local ones are used.
Conventions: arXiv 2402.03300 (GRPO), 2503.14476 (DAPO token-mean), 2503.20783 (Dr. GRPO).
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.registry import Registry

AGGREGATIONS = Registry("aggregation", context=("num_seqs", "num_tokens", "max_len"))


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(
    loss: torch.Tensor, mask: torch.Tensor, *, num_seqs: Optional[float] = None
) -> torch.Tensor:
    """(1/B) sum_i (1/|o_i|) sum_t m_it L_it — original GRPO (each sequence weighs the same)."""
    lengths = mask.sum(-1).clamp(min=1)  # [B]
    per_seq = (loss * mask).sum(-1) / lengths
    return per_seq.sum() / (num_seqs if num_seqs is not None else loss.shape[0])


@AGGREGATIONS.register("token_mean")
def token_mean(
    loss: torch.Tensor, mask: torch.Tensor, *, num_tokens: Optional[float] = None
) -> torch.Tensor:
    """sum_it m L / sum_it m — DAPO token-level loss (each token weighs the same)."""
    denom = num_tokens if num_tokens is not None else mask.sum().clamp(min=1)
    return (loss * mask).sum() / denom


@AGGREGATIONS.register("seq_mean_token_sum")
def seq_mean_token_sum(
    loss: torch.Tensor, mask: torch.Tensor, *, num_seqs: Optional[float] = None
) -> torch.Tensor:
    """(1/B) sum_i sum_t m_it L_it — sequence mean of token sums."""
    return (loss * mask).sum() / (num_seqs if num_seqs is not None else loss.shape[0])


@AGGREGATIONS.register("constant")
def constant_normaliser(
    loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    num_seqs: Optional[float] = None,
    max_len: Optional[int] = None,
) -> torch.Tensor:
    """sum_it m L / (B * L_max) — Dr. GRPO constant normaliser (L_max = generation budget)."""
    if max_len is None:
        raise ValueError("the 'constant' aggregation needs max_len (the completion-length cap)")
    b = num_seqs if num_seqs is not None else loss.shape[0]
    return (loss * mask).sum() / (b * max_len)
