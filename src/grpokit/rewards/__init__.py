"""Rewards: built-in reward functions, loading user rewards, and batch scoring."""

from grpokit.rewards.builtin import REWARDS
from grpokit.rewards.loading import RewardLoadError, resolve_reward
from grpokit.rewards.scoring import NamedReward, RewardError, RewardScores, score_completions

__all__ = [
    "REWARDS",
    "NamedReward",
    "RewardError",
    "RewardLoadError",
    "RewardScores",
    "score_completions",
    "resolve_reward",
]
