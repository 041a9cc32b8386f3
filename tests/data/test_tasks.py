"""Tests for grpokit.data.tasks: determinism, disjoint splits, options, correct answers."""

import re

import pytest

from grpokit.data.tasks import TASKS, TaskSplits

ARITH = re.compile(r"^What is (\d+) ([-+*]) (\d+)\?$")


def _prompts(rows):
    """Each row's prompt identity: its text, plus its images / video for the vision tasks (their question text repeats)."""
    from grpokit.data.files import visual_key

    return [row["prompt"] + visual_key(row) for row in rows]


# Generators' tasks whose prompts are a few conditions by design (the sample is the image, drawn anew):
# rows repeat their prompt; tests/diffusion checks them.
CONDITION_TASKS = {"flow_images", "palette_classes"}
# EtCon's held-out rows are the paraphrases of the train edits (generalisation), so they follow n_train; tests/editing.
PARAPHRASE_TASKS = {"counterfactual_edits"}
UNIQUE = [n for n in TASKS.names() if n not in CONDITION_TASKS | PARAPHRASE_TASKS]


@pytest.mark.parametrize("name", sorted(CONDITION_TASKS | PARAPHRASE_TASKS))
def test_condition_and_paraphrase_tasks_are_deterministic_and_seeded(name):
    a = TASKS.get(name)(seed=3, n_train=40, n_heldout=10)
    assert a == TASKS.get(name)(seed=3, n_train=40, n_heldout=10)
    assert a != TASKS.get(name)(seed=4, n_train=40, n_heldout=10)
    assert len(a.train) == 40 and len(a.heldout) == 10
    for row in a.train + a.heldout:
        assert isinstance(row["prompt"], str) and isinstance(row["answer"], str)
    if name in PARAPHRASE_TASKS:  # a paraphrase is never the edit prompt itself
        assert not set(_prompts(a.train)) & set(_prompts(a.heldout))


@pytest.mark.parametrize("name", UNIQUE)
def test_every_task_is_deterministic_and_disjoint(name):
    a = TASKS.get(name)(seed=3, n_train=40, n_heldout=10)
    b = TASKS.get(name)(seed=3, n_train=40, n_heldout=10)
    c = TASKS.get(name)(seed=4, n_train=40, n_heldout=10)
    assert isinstance(a, TaskSplits)
    assert a == b
    assert _prompts(a.train) != _prompts(c.train)
    assert len(a.train) == 40 and len(a.heldout) == 10
    train, heldout = set(_prompts(a.train)), set(_prompts(a.heldout))
    assert len(train) == 40 and len(heldout) == 10  # no duplicates within a split
    assert not train & heldout
    for row in a.train + a.heldout:
        assert isinstance(row["prompt"], str) and isinstance(row["answer"], str)
        assert row["task"] == name
    assert TASKS.summary(name)


def test_every_task_has_a_dedicated_test():
    # Adding a task without a hand test (here or in its own test file) makes this fail.
    assert set(TASKS.names()) == {"arithmetic", "countdown", "sorting", "text_to_sql",
                                  "clinical_mcq", "safety_prompts",  # tests/data/test_mcq_task.py, test_safety_task.py
                                  "ts_sql",  # tests/data/test_ts_sql.py
                                  "prompt_rewrites",  # tests/data/test_rewrite_task.py
                                  "guess_number", "tool_arithmetic", "text_navigation",  # these three: tests/envs
                                  "vision_qa", "video_qa",  # tests/vision
                                  "counterfactual_edits",  # tests/editing
                                  "flow_images", "palette_classes", "mdm_add", "mdm_countdown", "mdm_reverse", "mdm_sort"}  # tests/diffusion


@pytest.mark.parametrize("name", [n for n in TASKS.names() if n not in PARAPHRASE_TASKS])
def test_heldout_does_not_depend_on_n_train(name):
    small = TASKS.get(name)(seed=0, n_train=5, n_heldout=8)
    large = TASKS.get(name)(seed=0, n_train=50, n_heldout=8)
    assert small.heldout == large.heldout


def test_arithmetic_answers_and_operators():
    splits = TASKS.get("arithmetic")(seed=1, n_train=200, n_heldout=50, digits=2)
    seen_ops = set()
    for row in splits.train + splits.heldout:
        a, op, b = ARITH.match(row["prompt"]).groups()
        a, b = int(a), int(b)
        assert 10 <= a <= 99 and 10 <= b <= 99  # exactly two digits
        expected = {"+": a + b, "-": a - b, "*": a * b}[op]
        assert row["answer"] == str(expected)
        seen_ops.add(op)
    assert seen_ops == {"+", "-", "*"}


def test_arithmetic_respects_operator_subset_and_nonnegative_subtraction():
    # 1-digit a - b with a >= b: 10 + 9 + ... + 1 = 55 distinct prompts; take 50.
    splits = TASKS.get("arithmetic")(seed=0, n_train=50, n_heldout=0, operators=["-"], digits=1)
    for row in splits.train:
        a, op, b = ARITH.match(row["prompt"]).groups()
        assert op == "-"
        assert int(a) >= int(b)
        assert int(row["answer"]) >= 0


def test_arithmetic_negative_subtraction_allowed_when_asked():
    splits = TASKS.get("arithmetic")(
        seed=0, n_train=60, n_heldout=0, operators=["-"], digits=1, nonnegative=False
    )
    assert any(row["answer"].startswith("-") for row in splits.train)


def test_arithmetic_digit_range():
    splits = TASKS.get("arithmetic")(
        seed=2, n_train=300, n_heldout=0, operators=["+"], digits=[1, 3]
    )
    lengths = set()
    for row in splits.train:
        a, _, b = ARITH.match(row["prompt"]).groups()
        lengths.update({len(a), len(b)})
        assert int(row["answer"]) == int(a) + int(b)
    assert lengths == {1, 2, 3}


def test_arithmetic_template():
    splits = TASKS.get("arithmetic")(
        seed=0, n_train=1, n_heldout=0, operators=["*"], digits=1, template="Compute {a}{op}{b}."
    )
    assert re.fullmatch(r"Compute \d\*\d\.", splits.train[0]["prompt"])


def test_arithmetic_too_small_option_space_names_the_option():
    # 1-digit "+" has 10 * 10 = 100 distinct prompts; 101 cannot be filled.
    with pytest.raises(ValueError, match="digits"):
        TASKS.get("arithmetic")(seed=0, n_train=91, n_heldout=10, operators=["+"], digits=1)
    # Exactly 100 can.
    full = TASKS.get("arithmetic")(seed=0, n_train=90, n_heldout=10, operators=["+"], digits=1)
    assert len(full.train) == 90


@pytest.mark.parametrize(
    "options", [{"operators": ["/"]}, {"operators": []}, {"digits": 0}, {"digits": [3, 1]}]
)
def test_arithmetic_bad_options(options):
    with pytest.raises(ValueError):
        TASKS.get("arithmetic")(seed=0, n_train=1, n_heldout=0, **options)


def test_countdown_answer_reaches_target_with_given_numbers():
    splits = TASKS.get("countdown")(seed=0, n_train=50, n_heldout=10, num_count=4, max_number=12)
    for row in splits.train + splits.heldout:
        assert len(row["numbers"]) == 4
        assert all(1 <= n <= 12 for n in row["numbers"])
        assert row["target"] > 0
        used = sorted(int(x) for x in re.findall(r"\d+", row["answer"]))
        assert used == sorted(row["numbers"])
        assert re.fullmatch(r"[\d+\-*() ]+", row["answer"])
        assert eval(row["answer"], {"__builtins__": {}}) == row["target"]  # digits/ops only
        assert str(row["target"]) in row["prompt"]


def test_countdown_too_small_option_space():
    # Two numbers from 1..1 give one prompt family: only targets 2 (1+1) and 1 (1*1).
    with pytest.raises(ValueError, match="max_number"):
        TASKS.get("countdown")(seed=0, n_train=3, n_heldout=0, num_count=2, max_number=1)


def test_sorting_answers():
    splits = TASKS.get("sorting")(seed=0, n_train=30, n_heldout=5, length=5, max_number=9)
    for row in splits.train + splits.heldout:
        assert len(row["numbers"]) == 5
        assert row["answer"] == ", ".join(str(n) for n in sorted(row["numbers"]))
    row = {"numbers": [9, 2, 5]}
    assert ", ".join(map(str, sorted(row["numbers"]))) == "2, 5, 9"


def test_sorting_too_small_option_space():
    # length 1 over 0..2: 3 distinct prompts.
    with pytest.raises(ValueError, match="max_number"):
        TASKS.get("sorting")(seed=0, n_train=3, n_heldout=1, length=1, max_number=2)
