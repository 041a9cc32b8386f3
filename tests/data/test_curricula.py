"""Curricula: hand-computed routing, hints, perturbations, filter counts, state round trips."""

import json
import random

import pytest

from grpokit.data.curricula import (
    CURRICULA,
    SOURCE_KEY,
    hint_leaks,
    prompt_key,
    reword_and_distract,
    worked_steps_hint,
)


def _rows(*prompts, answers=None):
    answers = answers or ["1"] * len(prompts)
    return [{"prompt": p, "answer": a} for p, a in zip(prompts, answers)]


def test_registry_names():
    assert "difficulty_augmentation" in CURRICULA and "pass_rate_filter" in CURRICULA


# --- difficulty_augmentation ------------------------------------------------------------------


def test_routing_matches_spec_example():
    # Buffer (0.2, 0.9, 0.6, 0.7): mean 0.6. ΔR = 0.6 − R̄: 0.4 (hint), −0.3 (perturb), 0 (none).
    cur = CURRICULA.get("difficulty_augmentation")(hint="method")
    rows = _rows("What is 47 * 23?", "What is 12 + 30?", "mid", "other", answers=["1081", "42", "5", "7"])
    cur.observe(rows, [0.2, 0.9, 0.6, 0.7])
    assert cur.buffer_mean() == pytest.approx(0.6)
    out = cur.transform(rows[:3], random.Random(0))
    # hard: f = 0.4, the 3-step multiplication method → k = ceil(0.4·3) = 2 steps, no computed number
    assert out[0]["prompt"] == "What is 47 * 23?\nHint: Split 23 into its tens and its ones. Multiply 47 by each part."
    assert out[0][SOURCE_KEY] == "What is 47 * 23?" and out[0]["answer"] == "1081"
    # easy: f = 0.3 → ceil(0.3·3) = 1 distractor, reworded with the same operands, same answer
    easy = out[1]
    assert easy["answer"] == "42" and easy[SOURCE_KEY] == "What is 12 + 30?"
    assert easy["prompt"].split(" (Ignore")[0] in (
        "Add 30 to 12. What number do you get?", "Compute the sum of 12 and 30.")
    assert easy["prompt"].count(",") == 0 and "Ignore these unrelated numbers:" in easy["prompt"]
    assert out[2] is rows[2]  # ΔR = 0 → untouched
    m = cur.metrics()
    assert (m["hinted"], m["perturbed"], m["unchanged"]) == (1.0, 1.0, 1.0)
    assert rows[0]["prompt"] == "What is 47 * 23?"  # inputs are not mutated


def test_unseen_prompt_and_observation_credit_to_source():
    cur = CURRICULA.get("difficulty_augmentation")(window=3, hint="method")
    assert cur.transform(_rows("new"), random.Random(0))[0]["prompt"] == "new"
    cur.observe(_rows("a", "b"), [0.0, 1.0])  # buffer mean 0.5; a is hard
    hinted = cur.transform(_rows("a", answers=["123"]), random.Random(0))[0]
    cur.observe([hinted], [1.0])  # credited to "a", buffer (0, 1, 1) mean 2/3
    assert prompt_key(hinted) == "a" and cur.difficulty["a"] == 1.0
    assert cur.buffer_mean() == pytest.approx(2 / 3)
    cur.observe(_rows("c"), [0.0])  # window 3 evicts the first 0.0 → (1, 1, 0)
    assert list(cur.buffer) == [1.0, 1.0, 0.0]


def test_measure_augmented_off_and_prompt_ema():
    cur = CURRICULA.get("difficulty_augmentation")(measure_augmented=False, prompt_ema=0.5, hint="method")
    cur.observe(_rows("a"), [0.0])
    cur.observe([{"prompt": "a\nHint", SOURCE_KEY: "a"}], [1.0])
    assert cur.difficulty["a"] == 0.0 and len(cur.buffer) == 2
    cur.observe(_rows("a"), [1.0])  # EMA: 0.5·1 + 0.5·0 = 0.5
    assert cur.difficulty["a"] == 0.5


def test_hint_fraction_grows_with_difficulty():
    row = {"prompt": "What is 36 + 45?", "answer": "81", "task": "arithmetic"}  # 3-step column addition
    # k = clip(ceil(f·3), 1, 3): f 0.1 → 1 step, 0.5 → ceil(1.5) = 2, 1.0 → all 3
    lengths = [worked_steps_hint(row, f, None).count(".") for f in (0.1, 0.5, 1.0)]
    assert lengths == [1, 2, 3]
    assert worked_steps_hint({"prompt": "What is 3 - 1?", "answer": "2"}, 0.1, None) == "Hint: Start at 3."
    sort = {"prompt": "Sort these numbers in ascending order: 3, 1.", "answer": "1, 3", "task": "sorting"}
    assert worked_steps_hint(sort, 0.2, None) == "Hint: Find the smallest of the numbers first."
    assert worked_steps_hint({"prompt": "no task", "answer": "7"}, 1.0, None) is None


def test_hard_row_without_answer_is_counted_not_changed():
    cur = CURRICULA.get("difficulty_augmentation")(hint="method")
    rows = [{"prompt": "x"}, {"prompt": "y"}]
    cur.observe(rows, [0.0, 1.0])
    assert cur.transform(rows[:1], random.Random(0))[0] is rows[0]
    assert cur.metrics()["hint_unavailable"] == 1.0


def test_perturbation_keeps_answer_and_scales_noise():
    rng = random.Random(1)
    row = {"prompt": "Sort 3, 1, 2.", "answer": "1, 2, 3"}
    weak, strong = reword_and_distract(row, 0.1, rng), reword_and_distract(row, 1.0, rng)
    # ceil(0.1·3) = 1 and ceil(1.0·3) = 3 numbers appended to the unchanged question
    assert weak["prompt"].startswith("Sort 3, 1, 2. (Ignore") and weak["answer"] == "1, 2, 3"
    assert len(weak["prompt"].split(": ")[1].split(", ")) == 1
    assert len(strong["prompt"].split(": ")[1].split(", ")) == 3


def test_custom_builders_are_used():
    cur = CURRICULA.get("difficulty_augmentation")(
        hint="method", hint_builder=lambda row, f, rng: "H" + "+" * round(f * 8),
        perturber=lambda row, f, rng: {**row, "prompt": row["prompt"].upper()},
    )
    rows = _rows("hard", "easy")
    cur.observe(rows, [0.25, 0.75])  # mean 0.5 → ΔR = +0.25 / −0.25
    out = cur.transform(rows, random.Random(0))
    assert [r["prompt"] for r in out] == ["hard\nH++", "EASY"]  # f = 0.25 → round(2.0) = 2 pluses


def test_difficulty_state_round_trip_is_json():
    cur = CURRICULA.get("difficulty_augmentation")(window=4, hint="method")
    rows = _rows("a", "b", answers=["55", "66"])
    cur.observe(rows, [0.0, 1.0])
    cur.transform(rows, random.Random(0))
    state = json.loads(json.dumps(cur.state_dict()))
    again = CURRICULA.get("difficulty_augmentation")(window=4, hint="method")
    again.load_state_dict(state)
    assert again.metrics() == cur.metrics() and again.difficulty == cur.difficulty
    assert again.transform(rows, random.Random(5)) == cur.transform(rows, random.Random(5))


def test_difficulty_rejects_bad_options():
    with pytest.raises(ValueError, match="window"):
        CURRICULA.get("difficulty_augmentation")(window=0)
    with pytest.raises(ValueError, match="group accuracies"):
        CURRICULA.get("difficulty_augmentation")(hint="method").observe(_rows("a"), [])


# --- pass_rate_filter -------------------------------------------------------------------------


def test_offline_filter_keeps_rates_in_range():
    f = CURRICULA.get("pass_rate_filter")(low=0.1, high=0.8, pass_rates={"p_easy": 0.9})
    rows = [
        {"prompt": "p_easy"},  # 0.9 > 0.8 (from pass_rates) → easy
        {"prompt": "p_hard", "pass_rate": 0.05},  # < 0.1 → hard
        {"prompt": "p_ok", "pass_rate": 0.1},  # inclusive bounds → kept
        {"prompt": "p_top", "pass_rate": 0.8},  # kept
        {"prompt": "p_unknown"},  # no rate → kept by default
    ]
    assert [r["prompt"] for r in f.select(rows)] == ["p_ok", "p_top", "p_unknown"]
    assert f.metrics() == {"dropped_easy": 1.0, "dropped_hard": 1.0, "dropped_offline": 2.0, "dropped_online": 0.0}
    f.select(rows)  # counts are distinct prompts, not calls
    assert f.metrics()["dropped_offline"] == 2.0
    strict = CURRICULA.get("pass_rate_filter")(keep_unknown=False)
    assert strict.select(rows) == [rows[2], rows[3]]


def test_online_filter_after_n_observations():
    f = CURRICULA.get("pass_rate_filter")(min_observations=2)
    rows = _rows("solved", "hopeless", "mixed")
    f.observe(rows, [1.0, 0.0, 1.0])
    assert all(f.keep(r) for r in rows)  # one observation < N = 2
    f.observe(rows, [1.0, 0.0, 0.0])  # means: 1, 0, 0.5
    assert [f.keep(r) for r in rows] == [False, False, True]
    assert f.online_rate(rows[2]) == 0.5
    assert f.metrics() == {"dropped_easy": 1.0, "dropped_hard": 1.0, "dropped_offline": 0.0, "dropped_online": 2.0}
    hinted = {"prompt": "solved\nHint", SOURCE_KEY: "solved"}
    assert not f.keep(hinted)  # identified by the source prompt
    off = CURRICULA.get("pass_rate_filter")(online=False, min_observations=1)
    off.observe(rows[:1], [1.0])
    assert off.keep(rows[0])


def test_pass_rate_state_round_trip_is_json():
    f = CURRICULA.get("pass_rate_filter")(min_observations=1)
    rows = _rows("a", "b")
    f.observe(rows, [0.0, 0.5])
    f.select(rows)
    again = CURRICULA.get("pass_rate_filter")(min_observations=1)
    again.load_state_dict(json.loads(json.dumps(f.state_dict())))
    assert again.metrics() == f.metrics() and [again.keep(r) for r in rows] == [False, True]


def test_pass_rate_rejects_bad_bounds():
    with pytest.raises(ValueError, match="low"):
        CURRICULA.get("pass_rate_filter")(low=0.9, high=0.1)



def test_leaking_hints_from_any_builder_are_refused():
    assert hint_leaks("Hint: the answer starts with 4.", "42", "What is 25 + 17?")  # 4 is no number of the question
    assert hint_leaks("Hint: add 14 and 28.", "42", "What is 14 + 28?")  # digits 1428 hold 42
    assert not hint_leaks("Hint: add 25 and 17.", "42", "What is 25 + 17?")  # digits 2517
    cur = CURRICULA.get("difficulty_augmentation")(hint="method", hint_builder=lambda row, f, rng: "Hint: it is 42.")
    rows = [{"prompt": "What is 25 + 17?", "answer": "42"}, {"prompt": "y", "answer": "1"}]
    cur.observe(rows, [0.0, 1.0])
    assert cur.transform(rows[:1], random.Random(0))[0] is rows[0]  # unchanged
    assert cur.metrics()["hint_refused"] == 1.0 and cur.metrics()["hinted"] == 0.0
