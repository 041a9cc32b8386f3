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
        assert result.info["steps"] <= step_budget(row["n_gt"]) and "door" in row["prompt"]  # noise turns fit the budget
        noise = [t for t, w in zip(row["expert_turns"], row["expert_weights"]) if w == 0]
        assert row["expert_turns"][-1] == "stop" and "stop" not in " ".join(row["expert_turns"][:-1])
        assert len(noise) <= 2 and (noise or result.info["steps"] == row["n_gt"])  # a clean demonstration is the shortest path
        assert result.info["spl"] == pytest.approx(row["n_gt"] / result.info["steps"])  # SPL: 1 on the shortest path
    assert sum(0 in row["expert_weights"] for row in rows) >= 3  # noise reached some demonstrations (p = 0.3 per turn)


def test_dart_noise_turns_are_recovered_from_and_noise_0_is_the_clean_path():
    from grpokit.envs.navigation import noisy_expert_turns

    env, noisy = environment_factory("text_navigation")(), 0
    for seed in range(30):
        ep = navigation_episode(seed)
        assert 0 not in noisy_expert_turns(ep, seed, noise=0.0)[1]
        turns, weights = noisy_expert_turns(ep, seed, noise=1.0)
        assert (turns, weights) == noisy_expert_turns(ep, seed, noise=1.0)  # seeded
        assert weights[-1] == 1 and turns[-1] == "stop" and weights.count(0) <= 2
        noisy += 0 in weights
        env.reset({"world_seed": seed, "rooms": 2, "room_size": 4})
        for turn in turns:  # the expert recovers from every noise turn and still ends within the step budget
            result = env.step(turn)
        assert result.terminated and result.info["success"] == 1.0 and not result.info["pruned"]
    assert noisy >= 20  # at noise 1, most demonstrations carry noise (the rest had no room in their budget)


def test_the_expert_stops_in_a_turn_of_its_own_facing_the_goal():
    from grpokit.envs.navigation import noisy_expert_turns

    for seed in range(10):
        ep = navigation_episode(seed)
        moves = ep["expert"][:-1]
        turns, weights = noisy_expert_turns(ep, seed, noise=0.0)
        assert ep["expert"][-1] == "stop" and "stop" not in moves
        assert turns == [", ".join(moves[i : i + 3]) for i in range(0, len(moves), 3)] + ["stop"] and set(weights) == {1}
        env = environment_factory("text_navigation")()
        env.reset({"world_seed": seed, "rooms": 2, "room_size": 4})
        for turn in turns[:-1]:
            view = env.step(turn).observation
        goal = ep["instruction"].split("stop at the ")[1].rstrip(".")
        assert view.endswith(f"in front of you is a {goal}.") or view.endswith(f"in front of you is an {goal}.")


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
    assert result.info["spl"] == 0.0  # a failure
    env = environment_factory("text_navigation")(early_stopping=False)
    env.reset(row)
    for _ in range(budget):
        assert not env.step("turn left, turn right").terminated  # only the turn budget ends it now


def test_a_malformed_turn_ends_the_episode_as_a_failure(rows):
    env = environment_factory("text_navigation")()
    env.reset(rows[0])
    result = env.step("I will walk to the door")
    assert result.terminated and result.reward == 0.0 and result.info["malformed"] == 1.0


def test_the_world_size_travels_with_the_row_and_colours_name_one_door():
    from grpokit.envs.navigation import make_world
    import random

    rows = TASKS.get("text_navigation")(0, 10, 2, rooms=3).train
    env = environment_factory("text_navigation")()
    for row in rows:
        assert (row["rooms"], row["room_size"]) == (3, 4)
        env.reset(row)
        assert env.world.rooms == 3  # the row's world, not a default one
        for turn in row["expert_turns"]:
            result = env.step(turn)
        assert result.info["success"] == 1.0
        colours = [colour for colour, _ in env.world.doors.values()]
        assert len(colours) == 12 and len(set(colours)) == 12  # "the red door" is one door
        assert len({colour for colour, _, _ in env.world.objects.values()}) == 9
    # 2 x 2 worlds are the ones drawn before the extra colours (seed 0, pinned from that code)
    assert navigation_episode(0)["instruction"] == "Go through the grey door, then stop at the purple table."
    assert navigation_episode(0)["expert"] == ["turn left", "forward", "forward", "turn right", "forward", "stop"]
    with pytest.raises(ValueError, match="rooms <= 3"):
        make_world(random.Random(0), 4, 4)
    with pytest.raises(ValueError, match=r"no rooms, room_size column"):  # no silent 2 x 2 world
        env.reset({"world_seed": 0})


def test_every_option_of_text_navigation_changes_the_episode(rows):
    """Each constructor option acts (a default-valued option would pass any test), and a value that cannot act is refused."""
    import math

    row = rows[0]
    env = environment_factory("text_navigation")()
    env.reset(row)
    d = math.dist(env.agent[:2], env.goal)
    assert d > 3.0 and env.step("stop").reward == 0.0  # the default 3 m: too far
    # success_distance d + 1, r_base 30: R = 30 * (1 - d / (d + 1)) = 30 / (d + 1), a success
    env = environment_factory("text_navigation")(success_distance=d + 1, r_base=30.0)
    env.reset(row)
    result = env.step("stop")
    assert result.info["success"] == 1.0 and result.reward == pytest.approx(30.0 / (d + 1), abs=1e-9)
    n_gt = row["n_gt"]
    for options, budget in (({"tol": 1.0}, n_gt), ({"n_max": 3}, min(2 * n_gt, 3))):  # min(floor(tol * N_gt), N_max)
        env = environment_factory("text_navigation")(**options)
        env.reset(row)
        assert env.budget == budget
    four = "turn left, turn right, turn left, turn right"
    env.reset(row)
    assert env.step(four).info["malformed"] == 1.0  # 3 actions a turn by default
    env = environment_factory("text_navigation")(max_actions_per_turn=4)
    env.reset(row)
    assert not env.step(four).terminated and env.steps == 4
    for bad in ({"success_distance": 0.0}, {"tol": -1.0}, {"n_max": 0}, {"max_actions_per_turn": 0}):
        with pytest.raises(ValueError, match=f"environment.options.{next(iter(bad))}="):
            environment_factory("text_navigation")(**bad)
