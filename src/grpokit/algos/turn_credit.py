"""Per-turn credit for multi-turn episodes: each turn's tokens are credited with the reward from that turn on.

Episode credit (GRPO's, and ActiveVLN's, arXiv 2509.12618 §IV) broadcasts one advantage, the
group-standardised episode return, to every sampled token. With rewards that arrive during the
episode (a tool call that worked, a sub-goal reached) that also credits a turn with rewards that
came before it. Reward-to-go credit (the return-based advantages of turn-level GRPO variants,
e.g. GTPO, Ding et al., arXiv 2511.14846, §3; the policy-gradient theorem's causality, Sutton &
Barto §13.3) gives turn ``k`` of episode ``i``

    G_{i,k} = sum_{j >= k} gamma^(j-k) r_{i,j}
    A_{i,k} = (G_{i,k} - mean_g(R)) / (std_g(R) + eps)     (scale "group"; "none": G - mean_g(R))

with ``r_{i,j}`` the reward of turn ``j`` and ``R_i = sum_j r_{i,j}`` the episode's total reward,
so with ``gamma = 1`` the first turn's advantage is exactly the episode's GRPO advantage, and
with rewards only at the end every turn's is [grpokit's formulation: the baseline and scale are
the group's episode statistics, not per-turn ones]. A group whose episodes all have the same
total gets 0 on every token, as GRPO gives it.

Shapes: B episodes, K turns (0-padded), U sampled-token columns.
"""

from __future__ import annotations

import torch

from grpokit.algos.advantages import _constant_groups, group_mean_std


def turn_index(action_mask: torch.Tensor) -> torch.Tensor:
    """``[B, U]`` the 0-based turn of every sampled token (a turn is a run of ``action_mask`` 1s), -1 elsewhere."""
    act = action_mask.bool()
    before = torch.zeros_like(act)
    before[:, 1:] = act[:, :-1]
    index = (act & ~before).long().cumsum(-1) - 1
    return torch.where(act, index, torch.full_like(index, -1))


def reward_to_go(turn_rewards: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """``G [B, K]`` with ``G_k = r_k + gamma * G_{k+1}`` from per-turn rewards ``[B, K]`` (0 past an episode's end)."""
    out = torch.zeros_like(turn_rewards)
    running = torch.zeros_like(turn_rewards[:, 0]) if turn_rewards.shape[1] else None
    for k in range(turn_rewards.shape[1] - 1, -1, -1):
        running = turn_rewards[:, k] + gamma * running
        out[:, k] = running
    return out


def reward_to_go_advantages(
    turn_rewards: torch.Tensor, group_ids: torch.Tensor, action_mask: torch.Tensor, *, gamma: float = 1.0,
    scale: str = "group", std_mode: str = "unbiased", std_eps: float = 1e-6,
) -> torch.Tensor:
    """Token advantages ``[B, U]``: turn ``k``'s tokens get ``(G_{i,k} - mean_g R) / (std_g R + eps)`` (0 off the action mask).

    turn_rewards: ``[B, K]`` each episode's per-turn rewards (its total reward R is their sum);
    group_ids: ``[B]``; action_mask: ``[B, U]`` 1 on sampled tokens; scale: ``group`` (divide by
    the group std, GRPO) or ``none`` (Dr. GRPO). Sampled tokens of a turn past column K-1 (a turn
    the environment never answered) get the reward-to-go 0 of "no reward after it".
    """
    if scale not in ("group", "none"):
        raise ValueError(f"reward-to-go credit: scale must be 'group' or 'none', got {scale!r}")
    totals = turn_rewards.sum(-1)
    mean, std, _ = group_mean_std(totals, group_ids, std_mode)
    g = reward_to_go(turn_rewards, gamma)
    index = turn_index(action_mask)
    padded = torch.cat([g, g.new_zeros(g.shape[0], 1)], dim=1)  # column K: turns without a reward
    adv = padded.gather(1, index.clamp(min=0, max=g.shape[1])) - mean[:, None]
    if scale == "group":
        adv = adv / (std[:, None] + std_eps)
    constant = _constant_groups(totals, group_ids)[:, None]  # all totals equal: no signal, as GRPO
    return torch.where((index >= 0) & ~constant, adv, torch.zeros_like(adv))
