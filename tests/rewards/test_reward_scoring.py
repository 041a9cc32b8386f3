"""Tests for grpokit.rewards.scoring.score_completions."""

import math

import pytest
import torch

from grpokit.rewards import NamedReward, RewardError, RewardScores, score_completions


def constant(value):
    def fn(prompts, completions, **kwargs):
        return [value] * len(completions)

    return fn


def by_index(values):
    """Reward returning ``values`` for the batch, looked up by completion text per sample."""

    def fn(prompts, completions, **kwargs):
        return [values[int(c)] for c in completions]

    return fn


def fails_on(bad):
    """Reward that raises when any completion equals ``bad`` (so a batch with it raises)."""

    def fn(prompts, completions, **kwargs):
        if bad in completions:
            raise ZeroDivisionError("boom")
        return [1.0] * len(completions)

    return fn


PROMPTS = ["p0", "p1", "p2"]
COMPLETIONS = ["0", "1", "2"]


def test_weighted_total():
    rewards = [
        NamedReward("a", by_index([1.0, 0.0, 0.5])),
        NamedReward("b", constant(1.0), weight=0.5),
        NamedReward("c", constant(2.0), weight=-1.0),
    ]
    scores = score_completions(rewards, PROMPTS, COMPLETIONS, columns={})
    assert isinstance(scores, RewardScores)
    # total = a + 0.5 * 1 - 1 * 2 = a - 1.5
    torch.testing.assert_close(scores.total, torch.tensor([-0.5, -1.5, -1.0]))
    torch.testing.assert_close(scores.per_reward["b"], torch.tensor([1.0, 1.0, 1.0]))
    assert scores.failures == {"a": 0, "b": 0, "c": 0}
    assert scores.total.dtype == torch.float32 and scores.total.shape == (3,)


def test_none_becomes_nan_and_is_excluded_from_total():
    rewards = [
        NamedReward("a", by_index([None, 1.0, None])),
        NamedReward("b", by_index([2.0, None, None]), weight=2.0),
    ]
    scores = score_completions(rewards, PROMPTS, COMPLETIONS, columns={})
    a = scores.per_reward["a"]
    assert math.isnan(a[0]) and a[1] == 1.0 and math.isnan(a[2])
    # sample 0: 0 + 2 * 2 = 4; sample 1: 1 + 0 = 1; sample 2: every reward None -> 0
    torch.testing.assert_close(scores.total, torch.tensor([4.0, 1.0, 0.0]))


def test_columns_are_passed_per_sample():
    def matches(prompts, completions, answer, **kwargs):
        return [float(c == a) for c, a in zip(completions, answer)]

    scores = score_completions(
        [NamedReward("m", matches)], PROMPTS, COMPLETIONS, columns={"answer": ["0", "9", "2"]}
    )
    torch.testing.assert_close(scores.total, torch.tensor([1.0, 0.0, 1.0]))


def test_on_error_raise_names_reward_and_sample():
    rewards = [NamedReward("ok", constant(1.0)), NamedReward("flaky", fails_on("1"))]
    with pytest.raises(RewardError) as info:
        score_completions(rewards, PROMPTS, COMPLETIONS, columns={})
    message = str(info.value)
    assert message == "reward 'flaky' failed on sample 1 (prompt 'p1'): ZeroDivisionError: boom"


def test_on_error_zero_counts_failures():
    rewards = [NamedReward("flaky", fails_on("2"), weight=3.0)]
    scores = score_completions(rewards, PROMPTS, COMPLETIONS, columns={}, on_error="zero")
    torch.testing.assert_close(scores.per_reward["flaky"], torch.tensor([1.0, 1.0, 0.0]))
    torch.testing.assert_close(scores.total, torch.tensor([3.0, 3.0, 0.0]))  # 3 * score
    assert scores.failures == {"flaky": 1}


def test_wrong_length_names_reward_and_lengths():
    def short(prompts, completions, **kwargs):
        return [1.0]

    with pytest.raises(RewardError, match="reward 'short' returned 1 scores for 3 completions"):
        score_completions([NamedReward("short", short)], PROMPTS, COMPLETIONS, columns={})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1.0"])
def test_non_finite_or_non_number_scores_rejected(bad):
    with pytest.raises(RewardError, match="reward 'bad' returned .* for sample 0"):
        score_completions([NamedReward("bad", constant(bad))], PROMPTS, COMPLETIONS, columns={})


def test_ints_bools_and_tensors_accepted():
    reward = NamedReward("mixed", by_index([1, True, torch.tensor(0.5)]))
    scores = score_completions([reward], PROMPTS, COMPLETIONS, columns={})
    torch.testing.assert_close(scores.total, torch.tensor([1.0, 1.0, 0.5]))


def test_bad_arguments():
    reward = [NamedReward("a", constant(1.0))]
    with pytest.raises(ValueError, match="on_error"):
        score_completions(reward, PROMPTS, COMPLETIONS, columns={}, on_error="ignore")
    with pytest.raises(ValueError, match="column 'answer' has 1 rows for 3"):
        score_completions(reward, PROMPTS, COMPLETIONS, columns={"answer": ["x"]})
    with pytest.raises(ValueError, match="unique"):
        score_completions(reward * 2, PROMPTS, COMPLETIONS, columns={})


def test_builtin_rewards_through_scoring():
    from grpokit.rewards import REWARDS

    rewards = [
        NamedReward("answer_match", REWARDS.get("answer_match")),
        NamedReward("format_regex", REWARDS.get("format_regex"), weight=0.1),
    ]
    completions = ["7 + 8 = 15", "It is 16", ""]
    scores = score_completions(
        rewards, PROMPTS, completions, columns={"answer": ["15", "15", "15"]}
    )
    # 1 + 0.1 * 1, 0 + 0.1 * 1, 0 + 0.1 * 0
    torch.testing.assert_close(scores.total, torch.tensor([1.1, 0.1, 0.0]))


def test_hung_reward_is_reported_by_name_within_the_limit():
    import time as _time

    from grpokit.rewards.scoring import RewardTimeout

    def hangs(prompts, completions, **_):
        _time.sleep(5)
        return [1.0] * len(completions)

    start = _time.perf_counter()
    with pytest.raises(RewardTimeout, match="reward 'slow' did not return within 0.2 s"):
        score_completions([NamedReward("slow", hangs)], ["p"], ["c"], {}, timeout_s=0.2)
    assert _time.perf_counter() - start < 2
    scores = score_completions([NamedReward("slow", hangs), NamedReward("ok", lambda p, c, **_: [1.0])],
                               ["p"], ["c"], {}, on_error="zero", timeout_s=0.2)
    assert scores.failures == {"slow": 1, "ok": 0}
    assert scores.total.tolist() == [1.0]


def test_group_level_reward_receives_group_ids():
    def first_in_group(prompts, completions, group_ids, **_):
        seen, out = set(), []
        for g in group_ids:
            out.append(0.0 if g in seen else 1.0)
            seen.add(g)
        return out

    first_in_group.group_level = True
    scores = score_completions([NamedReward("first", first_in_group)], ["p"] * 4, ["a", "b", "c", "d"], {},
                               group_ids=[0, 0, 1, 1])
    assert scores.total.tolist() == [1.0, 0.0, 1.0, 0.0]


def test_dict_valued_reward_becomes_named_columns():
    def two(prompts, completions, **_):
        return [{"acc": 1.0, "fmt": 0.5} for _ in completions]

    scores = score_completions([NamedReward("multi", two, weight=2.0)], ["p", "q"], ["a", "b"], {})
    assert set(scores.per_reward) == {"multi/acc", "multi/fmt"}
    # total = 2 * (1.0 + 0.5)
    assert scores.total.tolist() == [3.0, 3.0]
