"""Within-group reductions for losses that compare the G completions of one prompt.

Groups are given by ``group_ids [B]`` (any integer labels). Reductions go through the
``[B, B]`` same-group matrix, so they need no ``.item()``/``unique`` host sync and keep
gradients. A loss sees one micro-batch, so groups must be complete inside it (the trainer
cuts micro-batches at group boundaries).
"""

from __future__ import annotations

from typing import Optional

import torch


def same_group(group_ids: Optional[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """``[B, B]`` same-group matrix (dtype of ``like [B]``): 1 where rows i, j share a prompt; all 1 if no group_ids."""
    n = like.shape[0]
    if group_ids is None:
        return torch.ones(n, n, dtype=like.dtype, device=like.device)
    g = group_ids.to(like.device)
    return (g.unsqueeze(0) == g.unsqueeze(1)).to(like.dtype)


def group_sum(x: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """Sum of ``x [B]`` over each row's group, ``[B]``."""
    return same @ x


def group_mean(x: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """Mean of ``x [B]`` over each row's group, ``[B]``."""
    return (same @ x) / same.sum(-1)


def group_masked_mean(x: torch.Tensor, keep: torch.Tensor, same: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of ``x`` over the rows of each group with ``keep`` = 1, and their count; both ``[B]`` (mean 0 if none)."""
    count = same @ keep
    return (same @ (x * keep)) / count.clamp(min=1), count


def group_log_mean_exp(x: torch.Tensor, keep: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """log mean_{j in group(i), keep_j} exp(x_j) per row ``[B]``, max-shifted; finite garbage where a group keeps none.

    Rows of groups without a kept member get an arbitrary finite value (the caller masks them),
    never -inf, so that the backward pass cannot produce NaN.
    """
    member = (same > 0) & (keep > 0).unsqueeze(0)  # [B, B]: j is a kept member of i's group
    member = member | ~member.any(-1, keepdim=True)
    logits = x.unsqueeze(0).expand_as(same).masked_fill(~member, float("-inf"))
    return torch.logsumexp(logits, dim=-1) - torch.log(member.sum(-1).to(x.dtype))


def live_row_share(live: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """``[B]``: |group(i)| / #live rows of group(i) on a live row, 0 on a row without loss tokens.

    ``live [B]`` is 1 on rows with at least one loss token. A per-group term broadcast to every
    row and multiplied by this keeps its group's weight under ``seq_mean_token_mean`` ((1/B)
    sum_i): the rows without loss tokens (masked truncation, empty completions), which that
    aggregate cannot see, hand their share to the group's other rows. 1 everywhere when every
    row is live.
    """
    n_live = same @ live
    return torch.where(live > 0, same.sum(-1) / n_live.clamp(min=1), torch.zeros_like(live))
