"""Group filters and length shaping from DAPO: which rows to train on, and the overlong penalty.

Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv 2503.14476
(§3.2 dynamic sampling, §3.4 overlong reward shaping). Pure tensor functions returning ``(value, metrics)``; each takes its own
inputs as keywords and ignores the rest. What each returns differs, so the trainer calls each
at its own place:

* ``dynamic_sampling(rewards [B], group_ids [B]) -> keep [B] bool`` (after scoring, on the
  outcome reward: drop rows, then sample more prompts until the batch is full — the resampling
  loop is the trainer's, ``trainer/collect.py``);
* ``overlong_punishment(lengths [B], max_len, cache_len) -> R_len [B]`` (added to the reward);
* ``mask_truncated(mask [B, T], truncated [B]) -> mask [B, T]`` (overlong filtering).
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.registry import Registry

FILTERS = Registry("filter")


@FILTERS.register("dynamic_sampling")
def dynamic_sampling(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, min_range: float = 0.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DAPO dynamic sampling keep-mask: keep_i = (max_g R - min_g R > min_range) for i's group g.

    With the default ``min_range = 0`` this keeps exactly the groups with non-zero reward
    variance, i.e. ``0 < #correct < G`` for 0/1 rewards; all-correct and all-wrong groups
    (GRPO advantage 0) are dropped. [inferred] ``min_range`` > 0 also drops groups whose rewards
    differ only by noise. Shapes: rewards, group_ids ``[B]`` → keep ``[B]`` (bool).
    """
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    r = rewards.detach()
    inf = torch.full((num_groups,), float("inf"), dtype=r.dtype, device=r.device)
    gmax = (-inf).scatter_reduce(0, group_ids, r, reduce="amax")
    gmin = inf.scatter_reduce(0, group_ids, r, reduce="amin")
    present = torch.isfinite(gmax)
    keep_group = present & (gmax - gmin > min_range)
    keep = keep_group[group_ids]
    n_present = present.sum().clamp(min=1)
    metrics = {
        "filter/kept_frac": keep.float().mean() if keep.numel() else keep.new_zeros((), dtype=torch.float32),
        "filter/kept_groups_frac": keep_group.sum() / n_present,
    }
    return keep, metrics


@FILTERS.register("overlong_punishment")
def overlong_punishment(
    lengths: torch.Tensor,
    *,
    max_len: Optional[int] = None,
    cache_len: Optional[int] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DAPO soft overlong punishment R_len(|y|), added to the task reward.

    ``R_len = 0`` if ``|y| ≤ L_max − L_cache``; ``((L_max − L_cache) − |y|) / L_cache`` if
    ``L_max − L_cache < |y| ≤ L_max``; ``−1`` if ``|y| > L_max``. A linear ramp from 0 to −1
    across the last ``L_cache`` tokens of the budget. Shapes: lengths ``[B]`` (completion token
    counts) → ``[B]`` float. DAPO defaults: ``max_len = 20480``, ``cache_len = 4096``.
    """
    if max_len is None or cache_len is None:
        raise ValueError("overlong_punishment needs max_len (L_max) and cache_len (L_cache)")
    if not 0 < cache_len <= max_len:
        raise ValueError(f"overlong_punishment needs 0 < cache_len <= max_len, got {cache_len} and {max_len}")
    n = lengths.to(torch.get_default_dtype() if not lengths.is_floating_point() else lengths.dtype)
    start = float(max_len - cache_len)
    ramp = (start - n) / cache_len
    r_len = torch.where(n <= start, torch.zeros_like(n), torch.where(n <= max_len, ramp, -torch.ones_like(n)))
    metrics = {
        "overlong/penalised_frac": (r_len < 0).float().mean() if r_len.numel() else r_len.new_zeros(()),
        "overlong/penalty_mean": r_len.mean() if r_len.numel() else r_len.new_zeros(()),
    }
    return r_len, metrics


@FILTERS.register("mask_truncated")
def mask_truncated(
    mask: torch.Tensor, *, truncated: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DAPO overlong filtering: m'_it = m_it · (1 − truncated_i), the loss mask without truncated rows.

    A truncated completion has no final answer, so its reward says little about its tokens.
    Shapes: mask ``[B, T]``, truncated ``[B]`` (bool) → mask ``[B, T]`` (same dtype).
    """
    if truncated is None:
        raise ValueError("mask_truncated needs truncated [B] (the rollout's truncation flags)")
    keep = (~truncated.bool()).to(mask.dtype)
    return mask * keep[:, None], {"filter/truncated_frac": truncated.float().mean()}
