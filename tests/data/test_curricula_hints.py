"""Difficulty-aware augmentation's hints never leak the gold answer's digits (issue 13, fault 4).

Only APIs that existed at d3cb0f9 are used, so the old answer-prefix hint fails behaviourally.
"""

import random
import re

import pytest

from grpokit.data.curricula import CURRICULA, SOURCE_KEY


def _digits(text):
    return "".join(ch for ch in text if ch.isdigit())


@pytest.mark.parametrize("question", ["What is 25 + 17?", "What is 14 + 28?", "What is 6 * 7?", "What is 50 - 8?"])
def test_curriculum_hints_do_not_leak_the_answer_digits(question):
    # every one equals 42; the hard branch hints at every difficulty f = ΔR = 0.1 .. 1.0
    for delta in (0.1, 0.4, 0.7, 1.0):
        cur = CURRICULA.get("difficulty_augmentation")(hint="method")
        hard, other = {"prompt": question, "answer": "42", "task": "arithmetic"}, {"prompt": "x", "answer": "1"}
        cur.observe([hard, other], [0.0, 2 * delta])  # buffer mean = delta → ΔR(hard) = delta − 0 = delta
        out = cur.transform([hard], random.Random(0))[0]
        hint = out["prompt"][len(question) + 1 :]
        assert out[SOURCE_KEY] == question and hint.startswith("Hint:"), out
        # rule part 1: every number in the hint is one of the question's ("starting with 4" is not)
        assert set(re.findall(r"\d+", hint)) <= set(re.findall(r"\d+", question)), hint
        # rule part 2: "42" is in neither the text nor its digit sequence ("14 and 28" reads "1428")
        assert "42" not in hint and "42" not in _digits(hint), hint
