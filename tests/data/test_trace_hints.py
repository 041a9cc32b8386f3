"""DeepVideo-R1's difficulty-decreasing hint: a prefix, sized by ΔR, of the best answer-conditioned trace."""

import random

import pytest

from grpokit.data.curricula import CURRICULA, SOURCE_KEY
from grpokit.data.trace_hints import reasoning_words, trace_prefix


def test_reasoning_words_stop_before_the_answer():
    assert reasoning_words("<think>the square starts at the top and moves left</think><answer>left</answer>", "left") == \
        "the square starts at the top and moves".split()
    assert reasoning_words("first red then blue. Red!", "red") == ["first"]  # case and punctuation ignored
    assert reasoning_words("B. pick up celery", "B. pick up celery") == []  # the answer alone: no reasoning
    assert reasoning_words("<think>we need the sum 4 2</think>", "42") == "we need the sum 4 2".split()  # words, not digits
    assert reasoning_words("it moves up up", "left") == []  # never states the answer: its last words are its own answer
    assert reasoning_words("it moves<answer>left</answer>", "left") == ["it", "moves"]


def test_trace_prefix_takes_ceil_f_n_words():
    words = "a b c d e f g h i j".split()  # n = 10
    assert [len(trace_prefix(words, f).split()) for f in (0.01, 0.25, 0.5, 1.0, 3.0)] == [1, 3, 5, 10, 10]


def _hard_curriculum(sampled, deltas):
    """A trace-hint curriculum that has seen one hard row per ΔR in ``deltas`` (buffer mean 0.5)."""
    seen = []

    def sampler(rows, k):
        seen.append((rows, k))
        return [sampled[r["answer"]] for r in rows]

    cur = CURRICULA.get("difficulty_augmentation")(trace_samples=3)
    cur.bind_policy(sampler)
    rows = [{"prompt": f"q{i}", "answer": a} for i, a in enumerate(sampled)]
    # R̄ = 0.5 - ΔR for each hard row; one easy partner per row keeps the buffer mean at 0.5
    cur.observe(rows + [{"prompt": f"e{i}", "answer": "x"} for i in range(len(rows))],
                [0.5 - d for d in deltas] + [0.5 + d for d in deltas])
    return cur, rows, seen


def test_the_hint_is_a_prefix_of_the_best_trace_growing_with_the_gap():
    trace = "<think>the square is at the left edge in the first frame and at the right edge in the last so it moves right</think>"
    sampled = {
        "right": [("it moves left", 0.0), (trace, 1.0), ("<think>no idea</think> right", 1.0)],  # best: first of the 1.0s
        "up": [("up up", 0.0), (trace.replace("right", "up"), 0.5), ("down", 0.0)],
    }
    cur, rows, seen = _hard_curriculum(sampled, [0.1, 0.4])
    out = cur.transform(rows, random.Random(0))
    # the sampler saw the answer-conditioned prompts, k = trace_samples
    assert [r["prompt"] for r in seen[0][0]] == ["q0\nThe answer is right.", "q1\nThe answer is up."] and seen[0][1] == 3
    # row 0: ΔR 0.1 -> f = 0.1 of the n = 14 words before the first "right" -> ceil(1.4) = 2 words
    assert out[0]["prompt"] == "q0\nHint: the square" and out[0][SOURCE_KEY] == "q0"
    # row 1: ΔR 0.4, best trace (reward 0.5) cut before its first "up": n = 14 -> ceil(5.6) = 6 words
    assert out[1]["prompt"] == "q1\nHint: the square is at the left"
    for row, answer in zip(out, ("right", "up")):
        assert answer not in row["prompt"].split("\n", 1)[1].lower().split()
    m = cur.metrics()
    assert (m["hinted"], m["hinted_total"], m["perturbed"]) == (2.0, 2.0, 0.0)


def test_a_trace_without_reasoning_before_the_answer_gives_no_hint():
    cur, rows, _ = _hard_curriculum({"left": [("left", 1.0), ("right", 0.0)]}, [0.5])
    assert cur.transform(rows, random.Random(0))[0] is rows[0]
    assert cur.metrics()["hint_unavailable"] == 1.0 and cur.metrics()["hinted"] == 0.0


def test_step_counts_restart_with_each_draw_and_totals_accumulate():
    cur = CURRICULA.get("difficulty_augmentation")(hint="method", hint_builder=lambda row, f, rng: "Hint: look")
    rows = [{"prompt": "hard", "answer": "a"}, {"prompt": "easy", "answer": "b"}]
    cur.observe(rows, [0.25, 0.75])
    for step in (1, 2):
        cur.transform(rows, random.Random(0))
        cur.transform(rows[:1], random.Random(0))  # a second sampling round of the same step
        m = cur.metrics()
        assert (m["hinted"], m["perturbed"]) == (2.0, 1.0), step  # only this step's draws
        assert (m["hinted_total"], m["perturbed_total"]) == (2.0 * step, 1.0 * step)
        cur.observe(rows, [0.25, 0.75])


def test_trace_hints_need_a_bound_policy_and_refuse_a_method_builder():
    cur = CURRICULA.get("difficulty_augmentation")()
    rows = [{"prompt": "hard", "answer": "a"}, {"prompt": "easy", "answer": "b"}]
    cur.observe(rows, [0.0, 1.0])
    with pytest.raises(ValueError, match="no policy is bound.*hint=method"):
        cur.transform(rows, random.Random(0))
    with pytest.raises(ValueError, match="hint='method'"):
        CURRICULA.get("difficulty_augmentation")(hint_builder=lambda row, f, rng: "Hint: x")
    with pytest.raises(ValueError, match="hint must be"):
        CURRICULA.get("difficulty_augmentation")(hint="answer")
    with pytest.raises(ValueError, match="answer_cue"):
        CURRICULA.get("difficulty_augmentation")(answer_cue="no placeholder")
