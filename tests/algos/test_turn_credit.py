"""Reward-to-go credit for multi-turn episodes: turn segmentation, discounted returns, token advantages (hand-computed)."""

import math

import pytest
import torch

from grpokit.algos.advantages import grpo_advantage
from grpokit.algos.turn_credit import reward_to_go, reward_to_go_advantages, turn_index

# two episodes of one group: turns are the runs of 1s (observation tokens 0 between them)
ACTION = torch.tensor([[1, 1, 0, 1, 0, 1, 1],
                       [1, 0, 1, 1, 0, 1, 0]])
TURN_REWARDS = torch.tensor([[1.0, 0.0, 2.0],   # total 3
                             [0.0, 1.0, 0.0]])  # total 1
GROUP = torch.tensor([0, 0])


def test_turn_index_numbers_the_runs_of_sampled_tokens():
    assert turn_index(ACTION).tolist() == [[0, 0, -1, 1, -1, 2, 2], [0, -1, 1, 1, -1, 2, -1]]


def test_reward_to_go_sums_the_turn_and_the_discounted_later_turns():
    assert reward_to_go(TURN_REWARDS).tolist() == [[3.0, 2.0, 2.0], [1.0, 1.0, 0.0]]
    # gamma 0.5: G_2 = 2, G_1 = 0 + 0.5 * 2 = 1, G_0 = 1 + 0.5 * 1 = 1.5
    assert reward_to_go(TURN_REWARDS, 0.5).tolist() == [[1.5, 1.0, 2.0], [0.5, 1.0, 0.0]]


def test_each_turn_is_credited_with_the_reward_from_it_on_against_the_groups_episode_mean():
    # mean of the totals 2; G - 2: episode 0 turns [1, 0, 0], episode 1 turns [-1, -1, -2]
    adv = reward_to_go_advantages(TURN_REWARDS, GROUP, ACTION, scale="none")
    assert adv.tolist() == [[1, 1, 0, 0, 0, 0, 0], [-1, 0, -1, -1, 0, -2, 0]]
    # scale "group": divided by the unbiased std of the totals, sqrt(((3-2)^2 + (1-2)^2) / 1) = sqrt(2)
    scaled = reward_to_go_advantages(TURN_REWARDS, GROUP, ACTION, std_eps=0.0)
    torch.testing.assert_close(scaled, adv / math.sqrt(2))


def test_the_first_turn_gets_grpos_episode_advantage_and_terminal_rewards_credit_every_turn_alike():
    rewards = torch.tensor([[0.5, 0.0, 1.0], [0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    groups = torch.tensor([0, 0, 1, 1])
    action = torch.tensor([[1, 0, 1, 0, 1]] * 4)
    adv = reward_to_go_advantages(rewards, groups, action)
    episode, _ = grpo_advantage(rewards.sum(-1), groups)
    torch.testing.assert_close(adv[:, 0], episode)
    terminal = torch.zeros(4, 3)
    terminal[:, 2] = rewards.sum(-1)  # the same totals, paid at the end: every turn carries the episode's advantage
    adv = reward_to_go_advantages(terminal, groups, action)
    torch.testing.assert_close(adv, episode[:, None] * action)


def test_a_group_of_equal_totals_gets_no_signal_and_a_bad_scale_is_refused():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # both total 1, though the turns differ
    assert not reward_to_go_advantages(rewards, GROUP, torch.ones(2, 3, dtype=torch.long)).any()
    with pytest.raises(ValueError, match="scale"):
        reward_to_go_advantages(rewards, GROUP, torch.ones(2, 3, dtype=torch.long), scale="batch")
