"""Tests for the Clinical-R1 CRPO rule rewards (arXiv 2512.00601), hand values from the authors' reward code."""

import pytest

from grpokit.rewards import REWARDS
from grpokit.rewards.crpo import (
    CRPO_WEIGHTS,
    crpo_objectives,
    normalise_response,
    parse_options,
)

CRPO_REWARDS = (
    "crpo_accuracy",
    "crpo_format",
    "crpo_language",
    "crpo_faithfulness",
    "crpo_comprehensiveness",
)
PROMPT = "Which vitamin deficiency causes rickets?\nA. Vitamin C\nB. Vitamin D\nC. Iron\nD. Zinc"
GOOD = (
    "<think>Option A causes scurvy. Iron (C) causes anaemia; zinc is unrelated. "
    "Rickets is vitamin D deficiency, so the answer is B.</think>"
    "<answer>Vitamin D. \\boxed{B}</answer>"
)


def _run(name, completions, prompt=PROMPT, **columns):
    return REWARDS.get(name)([prompt] * len(completions), completions, **columns)


def test_crpo_accuracy_spec_values():
    completions = ["… \\boxed{B}", "… \\boxed{C}", "\\boxed{B} … \\boxed{B}", "\\boxed{42}",
                   "\\boxed B", "no box", "\\boxed{b}"]
    # one right letter 1; wrong 0; two boxes -2; non-letter -0.5; "\boxed" without {..} -1;
    # zero boxes -0 = 0; lower-case letter is not an option letter -0.5.
    scores = _run("crpo_accuracy", completions, answer=["B"] * 7)
    assert scores == [1.0, 0.0, -2.0, -0.5, -1.0, 0.0, -0.5]
    assert _run("crpo_accuracy", ["\\boxed{B}"], answer=[None]) == [None]


def test_crpo_format_spec_values():
    completions = [
        "<think>a</think><answer>So B. \\boxed{B}</answer>",  # tags + box + summary: 1.5
        "<think>a</think>\n<answer>\\boxed{B}</answer>",  # box only: 1.0
        "<think>a</think><answer>\\boxed{B} \\boxed{C}</answer>",  # two boxes: 1.0
        "So B. \\boxed{B}",  # tags missing: 0
        "<think>a</think><answer>B</answer> trailing",  # text after </answer>: 0
    ]
    assert _run("crpo_format", completions) == [1.5, 1.0, 1.0, 0.0, 0.0]


def test_crpo_language_counts_ascii_english_characters():
    # "héllo": 4 of 5 characters allowed -> 0.8; "<think>" prefix is all allowed.
    assert _run("crpo_language", ["héllo", "", "ok 123\n"]) == pytest.approx([0.8, 0.0, 1.0])
    # After the auto "<think>" prefix (7 chars): "<think>维生" -> 7 / 9.
    assert _run("crpo_language", ["维生"], prompt="Q <think>") == pytest.approx([7 / 9])


def test_normalise_response_prefix_eos_and_typos():
    text = normalise_response("Q\n<think>", "a<\\think><answer>\\boxed{B}<\\answer><|im_end|>junk")
    assert text == "<think>a</think><answer>\\boxed{B}</answer>"
    assert normalise_response("Q <think>", "<think>x</think>") == "<think>x</think>"
    assert normalise_response("Q", "x", think_prefix=True) == "<think>x"
    assert normalise_response("Q <think>", "x", think_prefix=False) == "x"
    # With the prefix added, an answer-only completion gets the full format reward.
    completion = "reasoning</think><answer>So B. \\boxed{B}</answer>"
    assert _run("crpo_format", [completion], prompt="Q <think>") == [1.5]


def test_crpo_faithfulness_inferred_values():
    completions = [
        GOOD,  # asserts B, boxes B -> 1
        GOOD.replace("\\boxed{B}", "\\boxed{C}"),  # asserts B, boxes C -> 0
        "<think>The answer is vitamin D.</think><answer>\\boxed{B}</answer>",  # by text -> 1
        "<think>B is correct. Wait, the answer is (C).</think><answer>\\boxed{C}</answer>",  # last
        "<think>Hard to say.</think><answer>\\boxed{B}</answer>",  # no claim -> 0.5
        "<think>The answer is B.</think><answer>none</answer>",  # no box -> 0.5
        "The answer is B. \\boxed{B}",  # no think block -> 0.5
    ]
    assert _run("crpo_faithfulness", completions) == [1.0, 0.0, 1.0, 1.0, 0.5, 0.5, 0.5]


def test_crpo_comprehensiveness_inferred_values():
    completions = [
        GOOD,  # A by "Option A", C by "(C)", D by text "zinc", B by text "vitamin d" -> 4/4
        "<think>Only (B) fits.</think><answer>\\boxed{B}</answer>",  # 1/4
        "<think>Vitamin B12? no.</think>",  # "vitamin b12" names no option -> 0/4
        "no think at all",  # 0.0
    ]
    assert _run("crpo_comprehensiveness", completions) == [1.0, 0.25, 0.0, 0.0]
    # Options from the column (list, dict or text) win over the prompt; none at all -> None.
    opts = [["scurvy", "rickets"], {"A": "scurvy", "B": "rickets"}, "A. scurvy\nB. rickets"]
    text = "<think>Not scurvy.</think>"
    assert _run("crpo_comprehensiveness", [text] * 3, prompt="Q", options=opts) == [0.5] * 3
    assert _run("crpo_comprehensiveness", [text], prompt="Q") == [None]


def test_parse_options_formats():
    assert parse_options(None, "I. Intro\nA) x\n(B) y\nC: z\nE. skipped") == {
        "A": "x", "B": "y", "C": "z",
    }
    assert parse_options(["p", "q"]) == {"A": "p", "B": "q"}
    assert parse_options({"b": "q"}) == {"B": "q"}
    assert parse_options(None, "no options here") == {}


def test_crpo_objectives_equal_the_registered_rewards():
    completions = [GOOD, "<think>x</think><answer>\\boxed{42}</answer>", "plain"]
    columns = {"answer": ["B", "B", "A"]}
    objectives = crpo_objectives([PROMPT] * 3, completions, **columns)
    assert set(objectives[0]) == set(CRPO_WEIGHTS)
    for key in CRPO_WEIGHTS:
        expected = _run(f"crpo_{key}", completions, **columns)
        assert [o[key] for o in objectives] == expected
    assert objectives[0] == {"accuracy": 1.0, "format": 1.5, "language": 1.0,
                             "faithfulness": 1.0, "comprehensiveness": 1.0}
    assert crpo_objectives(["Q"], ["x"])[0]["accuracy"] is None  # no answer column


def test_weighted_total_moves_by_ten_when_only_correctness_changes():
    # No claim in <think> (faith 0.5 both) and the same text otherwise: only r_acc differs.
    right = "<think>Hmm.</think><answer>Done. \\boxed{B}</answer>"
    wrong = right.replace("{B}", "{C}")
    a, b = crpo_objectives([PROMPT] * 2, [right, wrong], answer=["B", "B"])

    def total(o):
        return sum(CRPO_WEIGHTS[k] * (o[k] or 0.0) for k in CRPO_WEIGHTS)

    assert CRPO_WEIGHTS["accuracy"] == 10.0
    assert total(a) - total(b) == pytest.approx(10.0)  # 10 * (1 - 0)


@pytest.mark.parametrize("name", CRPO_REWARDS)
def test_crpo_rewards_ignore_unknown_columns_and_have_summaries(name):
    scores = _run(name, [GOOD], answer=["B"], evidence=["text"], unknown_option=1)
    assert len(scores) == 1 and isinstance(scores[0], float)
    assert REWARDS.summary(name)


def test_column_length_mismatch_is_a_one_line_error():
    with pytest.raises(ValueError, match="column 'answer' has 1 rows, expected 2"):
        _run("crpo_accuracy", [GOOD, GOOD], answer=["B"])
    with pytest.raises(ValueError, match="needs a 'answer' column"):
        _run("crpo_accuracy", [GOOD])
