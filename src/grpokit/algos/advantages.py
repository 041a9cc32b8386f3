"""Advantage estimators: turn per-completion rewards into per-completion advantages.

Pure tensor functions. Inputs: ``rewards [B]`` (float) and ``group_ids [B]`` (int64, the prompt
each completion came from, values in ``0..num_groups-1``). Output: ``(adv [B], metrics)``.
"""

from __future__ import annotations

import torch

from grpokit.registry import Registry

ADVANTAGES = Registry("advantage")


def group_mean_std(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_mode: str = "unbiased"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-completion group mean, group std and group size, each ``[B]``.

    ``std_mode='unbiased'`` divides by (n - 1) as ``torch.std`` does (TRL, verl);
    ``'population'`` divides by n.
    """
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    counts = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, group_ids, torch.ones_like(rewards))
    sums = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, group_ids, rewards)
    mean = sums / counts.clamp(min=1)
    sq = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, group_ids, (rewards - mean[group_ids]) ** 2)
    denom = counts - 1 if std_mode == "unbiased" else counts
    std = (sq / denom.clamp(min=1)).sqrt()
    return mean[group_ids], std[group_ids], counts[group_ids]


@ADVANTAGES.register("grpo")
def grpo_advantage(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    scale: str = "group",
    std_mode: str = "unbiased",
    std_eps: float = 1e-6,
    allow_singleton_groups: bool = False,
    **_: object,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO group-relative advantage A_i = (R_i - mean_g) / (std + eps).

    ``scale``: 'group' divides by the group std (DeepSeekMath, arXiv 2402.03300), 'batch' by the
    std of the whole batch's rewards, 'none' not at all (Dr. GRPO, arXiv 2503.20783).
    Groups whose rewards are all equal get advantage exactly 0 (counted in
    ``adv/zero_var_frac``). A group of one completion raises unless
    ``allow_singleton_groups`` (then mean 0, std 1 as verl does).
    """
    mean, std, counts = group_mean_std(rewards, group_ids, std_mode)
    singleton = counts < 2
    if bool(singleton.any()):
        if not allow_singleton_groups:
            raise ValueError("GRPO needs at least 2 completions per group (rollout.group_size >= 2)")
        mean = torch.where(singleton, torch.zeros_like(mean), mean)
        std = torch.where(singleton, torch.ones_like(std), std)
    centred = rewards - mean
    zero_var = (std == 0) & ~singleton
    if scale == "group":
        adv = centred / (std + std_eps)
    elif scale == "batch":
        adv = centred / (rewards.std(unbiased=std_mode == "unbiased") + std_eps)
    elif scale == "none":
        adv = centred
    else:
        raise ValueError(f"unknown advantage scale '{scale}'; choose group, batch or none")
    adv = torch.where(zero_var, torch.zeros_like(adv), adv)
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 1
    zero_groups = torch.zeros(num_groups).index_add_(0, group_ids, zero_var.float()) > 0
    metrics = {
        "adv/mean": adv.mean(),
        "adv/std": adv.std() if adv.numel() > 1 else torch.zeros(()),
        "adv/abs_mean": adv.abs().mean(),
        "adv/zero_var_frac": zero_groups.float().mean(),
    }
    return adv, metrics


@ADVANTAGES.register("dr_grpo")
def dr_grpo_advantage(
    rewards: torch.Tensor, group_ids: torch.Tensor, **kwargs: object
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dr. GRPO advantage A_i = R_i - mean_g (no std division; arXiv 2503.20783)."""
    kwargs = {k: v for k, v in kwargs.items() if k != "scale"}
    return grpo_advantage(rewards, group_ids, scale="none", **kwargs)
