"""Text-row hints and perturbations of the difficulty-aware curriculum, and its leak check.

grpokit's own stand-ins for text rows (``curriculum_options.hint: method``): the first steps of a
task's worked method as the hint, a reworded question with distractor numbers as the
perturbation, and :func:`hint_leaks`, the rule every hint must pass (DeepVideo-R1, arXiv
2506.07464, §3.3, hints toward the answer and never states it).
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

_ARITHMETIC = re.compile(r"^What is (-?\d+) ([+\-*]) (-?\d+)\?$")
_REWORDINGS = {
    "+": ("Add {b} to {a}. What number do you get?", "Compute the sum of {a} and {b}."),
    "-": ("Subtract {b} from {a}. What number do you get?", "Compute {a} minus {b}."),
    "*": ("Multiply {a} by {b}. What number do you get?", "Compute the product of {a} and {b}."),
}

_DIGIT_RUN = re.compile(r"\d+")
_ARITHMETIC_ANYWHERE = re.compile(r"(?<![\d.])(-?\d+) ([+\-*]) (-?\d+)(?![\d.])")
_METHOD_STEPS = {  # worked method of each operator: words and the question's operands, never a computed number
    ("+", 1): ("Start at {a}.", "Count up {b} more, one at a time."),
    ("-", 1): ("Start at {a}.", "Count down {b}, one at a time."),
    ("*", 1): ("{a} * {b} means {b} copies of {a} added together.", "Add the copies one at a time, keeping a running total."),
    ("+", 2): ("Add the ones digits of {a} and {b} first.",
               "If that sum is ten or more, keep its ones digit and carry one to the tens.",
               "Then add the tens digits of {a} and {b}, plus any carry."),
    ("-", 2): ("Subtract the ones digit of {b} from the ones digit of {a} first.",
               "If it does not fit, borrow one ten from {a}.",
               "Then subtract the tens digits, minus any borrowed ten."),
    ("*", 2): ("Split {b} into its tens and its ones.", "Multiply {a} by each part.", "Add the two products."),
}
_TASK_STEPS = {
    "sorting": ("Find the smallest of the numbers first.", "Write it down, cross it out, and repeat with the rest.",
                "Separate the sorted numbers with commas."),
    "countdown": ("Look for two of the numbers whose sum, difference or product gets close to the target.",
                  "Then combine that result with the numbers that are left.",
                  "Use every number at most once and check the value of the whole expression."),
}


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


def hint_leaks(hint: str, answer: Any, question: str) -> bool:
    """True when ``hint`` reveals anything of the gold ``answer``'s digits beyond the question itself.

    The rule (both parts must hold for a safe hint): (1) every number written in the hint is a
    number of the question (no intermediate results, no leading digits, no digit counts);
    (2) the answer's digit string D (sign and separators dropped, e.g. "42" for 42, "123" for
    "1, 2, 3") is not a substring of the hint's digit sequence (all its digits in order, other
    characters removed), so D cannot appear even across adjacent operands ("14 + 28" reads
    "1428", which holds "42"). A hint is not checked against an answer without digits.
    """
    allowed = set(_DIGIT_RUN.findall(question))
    if any(run not in allowed for run in _DIGIT_RUN.findall(hint)):
        return True
    gold = _digits(str(answer)) if answer is not None else ""
    return bool(gold) and gold in _digits(hint)


def worked_steps_hint(row: dict, fraction: float, rng: random.Random) -> str | None:
    """A hint: the first ``k = clip(ceil(fraction·n), 1, n)`` steps of the task's worked method.

    Stand-in for the paper's hint (DeepVideo-R1 §3.3: a prefix of the best reasoning trace the
    model writes with the gold answer in view) [inferred]: a fixed n-step method per task —
    arithmetic "a op b" (single-digit operands: counting; larger ones: column steps), sorting
    and countdown — that grows with |ΔR| and never states a computed number, so by
    construction it passes :func:`hint_leaks`. When the question's operands would spell the
    answer's digits (``14 + 28`` = 42), the operands are named in words instead. None for a row
    of another task (the curriculum counts it as ``hint_unavailable``).
    """
    prompt = row["prompt"]
    match = _ARITHMETIC_ANYWHERE.search(prompt)
    steps: tuple[str, ...] | None = None
    operands: tuple[str, str] = ("", "")
    if match and row.get("task", "arithmetic") == "arithmetic":
        a, op, b = match.groups()
        width = 1 if max(len(a.lstrip("-")), len(b.lstrip("-"))) == 1 else 2
        steps, operands = _METHOD_STEPS[(op, width)], (a, b)
    elif row.get("task") in _TASK_STEPS:
        steps = _TASK_STEPS[row["task"]]
    if steps is None:
        return None
    k = min(max(math.ceil(fraction * len(steps)), 1), len(steps))
    for a, b in (operands, ("the first number", "the second number")):
        hint = "Hint: " + " ".join(step.format(a=a, b=b) for step in steps[:k])
        if not hint_leaks(hint, row.get("answer"), prompt):
            return hint
    return None


def reword_and_distract(
    row: dict, strength: float, rng: random.Random, max_distractors: int = 3
) -> dict | None:
    """A harder copy of ``row``: same answer, reworded question plus irrelevant numbers.

    A prompt of the arithmetic task's default form "What is a op b?" is reworded (same operands,
    so "answer" stays valid); every prompt gets ``ceil(strength·max_distractors)`` irrelevant
    numbers appended — the text analogue of the paper's noise whose scale grows with |ΔR|
    [inferred]. Never changes "answer".
    """
    prompt = row["prompt"]
    match = _ARITHMETIC.match(prompt.strip())
    if match:
        a, op, b = match.groups()
        prompt = rng.choice(_REWORDINGS[op]).format(a=a, b=b)
    n = math.ceil(min(max(strength, 0.0), 1.0) * max_distractors)
    if n > 0:
        noise = ", ".join(str(rng.randint(1, 99)) for _ in range(n))
        prompt = f"{prompt} (Ignore these unrelated numbers: {noise}.)"
    return {**row, "prompt": prompt}
