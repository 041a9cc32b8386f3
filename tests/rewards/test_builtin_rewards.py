"""Tests for the built-in rewards, each on hand-made completions."""

import pytest

from grpokit.data.tasks import TASKS
from grpokit.rewards import REWARDS

HAND_TESTED = {"answer_match", "answer_tiers", "math_verify", "format_regex", "countdown_equation", "sorted_list"}


def test_text_builtins_are_registered():
    # every registered name (these and the group / SQL / model rewards) must also be named in
    # some test: tests/test_registry_coverage.py enforces that
    assert HAND_TESTED <= set(REWARDS.names())


@pytest.mark.parametrize("name", sorted(HAND_TESTED))
def test_every_builtin_ignores_unknown_columns_and_has_a_summary(name):
    columns = {"answer": ["2, 5, 9"], "numbers": [[2, 5, 9]], "target": [16], "task": ["x"]}
    scores = REWARDS.get(name)(["p"], ["Answer: 2, 5, 9"], **columns, unknown_option=1)
    assert len(scores) == 1 and (scores[0] is None or isinstance(scores[0], float))
    assert REWARDS.summary(name)


def test_answer_match():
    fn = REWARDS.get("answer_match")
    completions = ["37 + 45 = 82", "The answer is 81.", "It is **82.0**", "no idea", "x"]
    answers = ["82", "82", "82", "82", None]
    assert fn(["p"] * 5, completions, answer=answers) == [1.0, 0.0, 1.0, 0.0, None]


def test_answer_match_requires_answer_column():
    with pytest.raises(ValueError, match="'answer' column"):
        REWARDS.get("answer_match")(["p"], ["1"])


def test_answer_match_missing_ok_scores_unlabelled_rows_none():
    # a logged-only judge of a label-free preset: no 'answer' column -> None (not applicable) per row
    assert REWARDS.get("answer_match")(["p", "q"], ["1", "2"], missing_ok=True) == [None, None]
    assert REWARDS.get("answer_match")(["p"], ["1"], answer=["1"], missing_ok=True) == [1.0]  # labels still used


def test_answer_tiers_grpo_verif_solution_reward():
    fn = REWARDS.get("answer_tiers")
    completions = ["37 + 45 = 82", "The answer is 81.", "no idea", "x"]
    # correct +1, incorrect -1, no extractable number -1.5, no gold answer None
    assert fn(["p"] * 4, completions, answer=["82", "82", "82", None]) == [1.0, -1.0, -1.5, None]
    assert fn(["p"], ["none"], answer=["1"], invalid=-2.0) == [-2.0]


def test_math_verify():
    fn = REWARDS.get("math_verify")
    completions = [
        "So the result is $\\boxed{82}$.",
        "The answer is 81",
        "We get $\\frac{1}{2}$",
        "",
        "anything",
    ]
    answers = ["82", "82", "0.5", "82", None]
    assert fn(["p"] * 5, completions, answer=answers) == [1.0, 0.0, 1.0, 0.0, None]


def test_format_regex():
    fn = REWARDS.get("format_regex")
    assert fn(["p", "p", "p"], ["hello", "   ", ""]) == [1.0, 0.0, 0.0]
    pattern = r"<think>.*</think>\s*Answer:"
    completions = ["<think>a\nb</think> Answer: 3", "Answer: 3"]
    assert fn(["p", "p"], completions, pattern=pattern) == [1.0, 0.0]


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("Let me think.\nAnswer: (3 + 4) * 2", 1.0),  # 7 * 2 = 14
        ("Answer: 2 * (4 + 3) = 14", 1.0),  # text after "=" ignored
        ("Answer: **3*4+2**.", 1.0),  # 12 + 2 = 14; markdown and final period stripped
        ("work...\n4 * 3 + 2", 1.0),  # no "Answer:": last line
        ("Answer: 7 + 7", 0.0),  # 7 is not given, and used twice
        ("Answer: 3 * 4 + 2 + 2", 0.0),  # 2 reused: 3*4 + 2 + 2 = 16 is not 14 anyway
        ("Answer: (2 + 3) * 4 - 3 - 3", 0.0),  # reuses 3
        ("Answer: 3 + 4 + 2", 0.0),  # 9 != 14
        ("Answer: __import__('os')", 0.0),
        ("Answer: 2 ** 4", 0.0),  # power parses but is not allowed
        ("Answer: 4 / (3 - 3)", 0.0),  # reuses 3; also division by zero
        ("Answer:", 0.0),
    ],
)
def test_countdown_equation(completion, expected):
    fn = REWARDS.get("countdown_equation")
    assert fn(["p"], [completion], numbers=[[3, 4, 2]], target=[14]) == [expected]


def test_countdown_division_and_string_numbers():
    fn = REWARDS.get("countdown_equation")
    # 8 / (3 - 1) = 4 exactly; numbers given as text, as they come back from a CSV file.
    assert fn(["p"], ["Answer: 8 / (3 - 1)"], numbers=["[8, 3, 1]"], target=["4"]) == [1.0]
    # Division by zero scores 0 instead of raising: 8 / (1 - 1) with numbers 8, 1, 1.
    assert fn(["p"], ["Answer: 8 / (1 - 1)"], numbers=[[8, 1, 1]], target=[4]) == [0.0]


def test_countdown_task_answers_score_one():
    splits = TASKS.get("countdown")(seed=0, n_train=20, n_heldout=0)
    rows = splits.train
    fn = REWARDS.get("countdown_equation")
    scores = fn(
        [r["prompt"] for r in rows],
        [f"Answer: {r['answer']}" for r in rows],
        numbers=[r["numbers"] for r in rows],
        target=[r["target"] for r in rows],
    )
    assert scores == [1.0] * 20


def test_sorted_list():
    fn = REWARDS.get("sorted_list")
    completions = [
        "Sorted: 2, 5, 9",
        "Answer: 2,5,9. That was 3 numbers.",  # list after "Answer:" preferred
        "The input 9, 2, 5 sorted is 2, 5, 9",
        "Answer: 9, 5, 2",
        "I don't know",
    ]
    scores = fn(["p"] * 5, completions, answer=["2, 5, 9"] * 5)
    assert scores == [1.0, 1.0, 1.0, 0.0, 0.0]
