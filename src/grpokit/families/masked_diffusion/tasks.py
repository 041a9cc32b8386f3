"""Procedural tasks written in the masked-diffusion LM's character vocabulary (compact prompts, short answers).

Each row has ``prompt``, ``answer`` (what the exact-match reward compares), ``task`` and
``partner``: the fixed wrong answer the noisy-prior pretraining shows instead of the answer half
the time (:mod:`grpokit.families.masked_diffusion.pretrain`). Rewards: ``answer_word`` (the completion's first
word must equal the answer exactly, so "1234" does not match "01234") for the digit tasks,
``countdown_equation`` (the expression uses the numbers once each and equals the target) for
countdown.

* ``mdm_reverse``: "rev 31415" -> "51413" (partner: the digits unreversed; no palindromes)
* ``mdm_sort``: "sort 31415" -> "11345" (partner: sorted descending; not all one digit)
* ``mdm_add``: "12+34=" -> "46" (partner: the sum plus one)
* ``mdm_countdown``: "cd 3,5,7>56" -> an expression over the numbers equal to the target, e.g.
  "(3+5)*7" (the task the ESPO paper reports first; partner: the first operator changed)
"""

from __future__ import annotations

import random

from grpokit.data.tasks import TASKS, TaskSplits, _random_expression, _sample_splits

MDM_TASKS = ("mdm_reverse", "mdm_sort", "mdm_add", "mdm_countdown")


def _digits(rng: random.Random, n: int) -> str:
    return "".join(str(rng.randint(0, 9)) for _ in range(n))


def _check(task: str, name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"task '{task}': option '{name}' must be in {lo}..{hi}, got {value}")


@TASKS.register("mdm_reverse")
def mdm_reverse(seed: int, n_train: int, n_heldout: int, *, length: int = 5) -> TaskSplits:
    """Reverse a string of ``length`` digits: "rev 31415" -> "51413" (masked-diffusion vocabulary)."""
    _check("mdm_reverse", "length", length, 2, 12)

    def draw(rng: random.Random) -> dict:
        s = _digits(rng, length)
        while s == s[::-1]:  # a palindrome's partner would be its answer
            s = _digits(rng, length)
        return {"prompt": f"rev {s}", "answer": s[::-1], "partner": s, "task": "mdm_reverse"}

    return _sample_splits("mdm_reverse", seed, n_train, n_heldout, draw, enlarge="length")


@TASKS.register("mdm_sort")
def mdm_sort(seed: int, n_train: int, n_heldout: int, *, length: int = 5) -> TaskSplits:
    """Sort ``length`` digits ascending: "sort 31415" -> "11345" (masked-diffusion vocabulary)."""
    _check("mdm_sort", "length", length, 2, 12)

    def draw(rng: random.Random) -> dict:
        s = _digits(rng, length)
        while len(set(s)) == 1:  # one repeated digit: ascending = descending
            s = _digits(rng, length)
        return {"prompt": f"sort {s}", "answer": "".join(sorted(s)), "partner": "".join(sorted(s, reverse=True)),
                "task": "mdm_sort"}

    return _sample_splits("mdm_sort", seed, n_train, n_heldout, draw, enlarge="length")


@TASKS.register("mdm_add")
def mdm_add(seed: int, n_train: int, n_heldout: int, *, digits: int = 2) -> TaskSplits:
    """Add two ``digits``-digit numbers: "12+34=" -> "46" (masked-diffusion vocabulary)."""
    _check("mdm_add", "digits", digits, 1, 4)

    def draw(rng: random.Random) -> dict:
        lo = 0 if digits == 1 else 10 ** (digits - 1)
        a, b = rng.randint(lo, 10**digits - 1), rng.randint(lo, 10**digits - 1)
        return {"prompt": f"{a}+{b}=", "answer": str(a + b), "partner": str(a + b + 1), "task": "mdm_add"}

    return _sample_splits("mdm_add", seed, n_train, n_heldout, draw, enlarge="digits")


@TASKS.register("mdm_countdown")
def mdm_countdown(seed: int, n_train: int, n_heldout: int, *, num_count: int = 3, max_number: int = 9) -> TaskSplits:
    """Countdown: "cd 3,5,7>56" -> an expression using each number once that equals 56 (masked-diffusion vocabulary)."""
    _check("mdm_countdown", "num_count", num_count, 2, 4)
    _check("mdm_countdown", "max_number", max_number, 1, 99)

    def draw(rng: random.Random) -> dict:
        while True:
            numbers = [rng.randint(1, max_number) for _ in range(num_count)]
            expression, target = _random_expression(rng, numbers)
            if target > 0:
                break
        expression = expression.replace(" ", "")
        ops = [i for i, c in enumerate(expression) if c in "+-*"]
        swap = {"+": "-", "-": "*", "*": "+"}
        partner = expression[: ops[0]] + swap[expression[ops[0]]] + expression[ops[0] + 1 :]
        return {"prompt": f"cd {','.join(map(str, numbers))}>{target}", "answer": expression, "partner": partner,
                "numbers": numbers, "target": target, "task": "mdm_countdown"}

    return _sample_splits("mdm_countdown", seed, n_train, n_heldout, draw, enlarge="max_number")
