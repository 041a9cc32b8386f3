"""ActiveVLN in miniature: the paper's reward, step budget and malformed-turn rule, and the world's expert."""

import pytest

from grpokit.data.tasks import TASKS
from grpokit.envs.base import environment_factory
from grpokit.envs.navigation import navigation_episode, parse_turn, step_budget, weighted_success


def test_weighted_success_follows_the_paper():
    assert weighted_success(True, 1.5) == pytest.approx(7.5)  # 15 * (1 - 1.5 / 3)
    assert weighted_success(True, 3.0) == 0.0  # a success, with zero weight
    assert weighted_success(True, 3.01) == 0.0 and weighted_success(False, 0.5) == 0.0  # too far; no stop
    assert weighted_success(True, float("inf")) == 0.0  # an unreachable goal does not crash the reward


def test_step_budget_is_tol_times_the_expert_path_capped_at_n_max():
    assert step_budget(37) == 74 and step_budget(80) == 120


def test_parse_turn_takes_up_to_three_primitive_actions():
    assert parse_turn("forward, turn left, stop") == ["forward", "turn left", "stop"]
    assert parse_turn(" Forward ") == ["forward"]
    assert parse_turn("forward, forward, forward, forward") is None  # more than 3
    assert parse_turn("go north") is None and parse_turn("") is None


@pytest.fixture(scope="module")
def rows():
    return TASKS.get("text_navigation")(0, 20, 5).train


def test_the_expert_path_succeeds_and_the_world_is_a_function_of_the_seed(rows):
    env = environment_factory("text_navigation")()
    for row in rows:
        assert navigation_episode(row["world_seed"])["instruction"] in row["prompt"]
        assert env.reset(row) == ""  # the row's prompt is the first observation
        for turn in row["expert_turns"]:
            result = env.step(turn)
        assert result.terminated and result.info["success"] == 1.0 and result.reward == pytest.approx(10.0)  # d = 1
        assert result.info["steps"] == row["n_gt"] and "door" in row["prompt"]


def test_the_step_after_the_budget_ends_the_episode_as_a_failure(rows):
    row = {**rows[0]}
    env = environment_factory("text_navigation")(tol=2.0)
    env.reset(row)
    budget = step_budget(row["n_gt"])
    for _ in range(budget // 2):  # turning in place: 2 executed steps per turn, never a stop
        result = env.step("turn left, turn right")
        assert not result.terminated
    for _ in range(budget % 2):
        assert not env.step("turn left").terminated
    result = env.step("turn left")  # executed step budget + 1
    assert result.terminated and result.reward == 0.0 and result.info["pruned"] == 1.0 and result.info["steps"] == budget + 1
    env = environment_factory("text_navigation")(early_stopping=False)
    env.reset(row)
    for _ in range(budget):
        assert not env.step("turn left, turn right").terminated  # only the turn budget ends it now


def test_a_malformed_turn_ends_the_episode_as_a_failure(rows):
    env = environment_factory("text_navigation")()
    env.reset(rows[0])
    result = env.step("I will walk to the door")
    assert result.terminated and result.reward == 0.0 and result.info["malformed"] == 1.0
