"""Synthetic tasks with checkable answers: arithmetic, countdown, sorting.

Each task is ``fn(seed, n_train, n_heldout, **options) -> TaskSplits`` and is registered in
``TASKS``. Rows are dicts with ``"prompt"`` (the user message, no chat template), ``"answer"``
(str) and extra columns (``"task"``, and task-specific ones such as ``"numbers"``).

Splits are deterministic in ``seed`` and disjoint: the held-out set is drawn first from its own
seeded stream, so it does not change when ``n_train`` changes, and training prompts that
collide with a held-out prompt are redrawn.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Callable

from grpokit.registry import Registry

TASKS = Registry("task")

ARITHMETIC_OPERATORS = ("+", "-", "*")
# Consecutive draws without a new prompt before we decide the option space is exhausted.
_MAX_STALE_DRAWS = 2000


@dataclass
class TaskSplits:
    """Training rows and held-out rows of one task; no prompt occurs in both."""

    train: list[dict]
    heldout: list[dict]


def _sample_splits(
    task: str,
    seed: int,
    n_train: int,
    n_heldout: int,
    draw: Callable[[random.Random], dict],
    enlarge: str,
) -> TaskSplits:
    """Draw unique-prompt rows: held-out from one seeded stream, then train from another."""
    if n_train < 0 or n_heldout < 0:
        raise ValueError(f"task '{task}': n_train and n_heldout must be >= 0")
    seen: set[str] = set()

    def fill(rng: random.Random, n: int) -> list[dict]:
        rows: list[dict] = []
        stale = 0
        while len(rows) < n:
            row = draw(rng)
            if row["prompt"] in seen:
                stale += 1
                if stale > _MAX_STALE_DRAWS:
                    raise ValueError(
                        f"task '{task}': found only {len(seen)} distinct prompts but "
                        f"n_train + n_heldout = {n_train + n_heldout}; enlarge option "
                        f"'{enlarge}' or lower n_train/n_heldout"
                    )
                continue
            stale = 0
            seen.add(row["prompt"])
            rows.append(row)
        return rows

    # String seeds hash deterministically (sha512), unlike tuples or hash().
    heldout = fill(random.Random(f"grpokit/{task}/heldout/{seed}"), n_heldout)
    train = fill(random.Random(f"grpokit/{task}/train/{seed}"), n_train)
    return TaskSplits(train=train, heldout=heldout)


def _digit_range(digits: int | list[int]) -> tuple[int, int]:
    """Validate the ``digits`` option and return (lo, hi) digit counts."""
    if isinstance(digits, bool):
        raise ValueError("task 'arithmetic': option 'digits' must be an int or [lo, hi]")
    if isinstance(digits, int):
        lo = hi = digits
    elif isinstance(digits, (list, tuple)) and len(digits) == 2 and all(
        isinstance(d, int) and not isinstance(d, bool) for d in digits
    ):
        lo, hi = digits
    else:
        raise ValueError(
            f"task 'arithmetic': option 'digits' must be an int or a list [lo, hi], got {digits!r}"
        )
    if not 1 <= lo <= hi:
        raise ValueError(
            f"task 'arithmetic': option 'digits' needs 1 <= lo <= hi, got {digits!r}"
        )
    return lo, hi


def _operand(rng: random.Random, n_digits: int) -> int:
    """Uniform integer with exactly ``n_digits`` digits (1 digit means 0..9)."""
    low = 0 if n_digits == 1 else 10 ** (n_digits - 1)
    return rng.randint(low, 10**n_digits - 1)


@TASKS.register("arithmetic")
def arithmetic(
    seed: int,
    n_train: int,
    n_heldout: int,
    *,
    operators: list[str] | None = None,
    digits: int | list[int] = 2,
    nonnegative: bool = True,
    template: str = "What is {a} {op} {b}?",
) -> TaskSplits:
    """Integer arithmetic ``a op b`` with op in + - *; answer is the exact integer result.

    ``digits``: n means every operand has exactly n digits (1 digit means 0..9); [lo, hi] draws
    each operand's digit count uniformly from lo..hi. ``nonnegative`` swaps the operands of
    "-" so that a >= b.
    """
    ops = list(ARITHMETIC_OPERATORS) if operators is None else list(operators)
    bad = [op for op in ops if op not in ARITHMETIC_OPERATORS]
    if not ops or bad:
        raise ValueError(
            f"task 'arithmetic': option 'operators' must be a non-empty subset of "
            f"{list(ARITHMETIC_OPERATORS)}, got {operators!r}"
        )
    lo, hi = _digit_range(digits)

    def draw(rng: random.Random) -> dict:
        op = rng.choice(ops)
        a = _operand(rng, rng.randint(lo, hi))
        b = _operand(rng, rng.randint(lo, hi))
        if op == "-" and nonnegative and a < b:
            a, b = b, a
        result = a + b if op == "+" else a - b if op == "-" else a * b
        prompt = template.format(a=a, op=op, b=b)
        # "domain" (the operator) lets domain-aware advantages such as drpo work on this task.
        return {"prompt": prompt, "answer": str(result), "task": "arithmetic", "domain": op}

    return _sample_splits("arithmetic", seed, n_train, n_heldout, draw, enlarge="digits")


def _random_expression(rng: random.Random, numbers: list[int]) -> tuple[str, int]:
    """Random binary expression tree over ``numbers`` (each used once) with + - *.

    Returns the fully parenthesised string (outer parentheses dropped) and its value.
    """
    items: list[tuple[str, int]] = [(str(n), n) for n in numbers]
    while len(items) > 1:
        i, j = sorted(rng.sample(range(len(items)), 2))
        (ls, lv), (rs, rv) = items[i], items[j]
        if rng.random() < 0.5:
            (ls, lv), (rs, rv) = (rs, rv), (ls, lv)
        op = rng.choice("+-*")
        value = lv + rv if op == "+" else lv - rv if op == "-" else lv * rv
        merged = (f"({ls} {op} {rs})", value)
        items = [x for k, x in enumerate(items) if k not in (i, j)] + [merged]
    text, value = items[0]
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return text, value


@TASKS.register("countdown")
def countdown(
    seed: int,
    n_train: int,
    n_heldout: int,
    *,
    num_count: int = 3,
    max_number: int = 9,
    template: str = (
        "Using the numbers {numbers}, each at most once, with + - * and parentheses, "
        "write an expression equal to {target}. Give the expression after 'Answer:'."
    ),
) -> TaskSplits:
    """Countdown: combine the given numbers with + - * into an expression equal to a target.

    Numbers are drawn from 1..max_number; the target is the value of a random expression that
    uses every number once, so it is reachable by construction (and kept positive). The
    ``answer`` column holds that expression; rows also carry ``numbers`` and ``target``.
    """
    if num_count < 2:
        raise ValueError(f"task 'countdown': option 'num_count' must be >= 2, got {num_count}")
    if max_number < 1:
        raise ValueError(f"task 'countdown': option 'max_number' must be >= 1, got {max_number}")

    def draw(rng: random.Random) -> dict:
        while True:
            numbers = [rng.randint(1, max_number) for _ in range(num_count)]
            expression, target = _random_expression(rng, numbers)
            if target > 0:
                break
        prompt = template.format(numbers=", ".join(map(str, numbers)), target=target)
        return {
            "prompt": prompt,
            "answer": expression,
            "numbers": numbers,
            "target": target,
            "task": "countdown",
        }

    return _sample_splits("countdown", seed, n_train, n_heldout, draw, enlarge="max_number")


@TASKS.register("sorting")
def sorting(
    seed: int,
    n_train: int,
    n_heldout: int,
    *,
    length: int = 4,
    max_number: int = 20,
    template: str = (
        "Sort these numbers in ascending order: {numbers}. "
        "Give the sorted list, comma-separated, after 'Answer:'."
    ),
) -> TaskSplits:
    """Sort a list of integers in 0..max_number ascending; answer like "2, 5, 9"."""
    if length < 1:
        raise ValueError(f"task 'sorting': option 'length' must be >= 1, got {length}")
    if max_number < 0:
        raise ValueError(f"task 'sorting': option 'max_number' must be >= 0, got {max_number}")

    def draw(rng: random.Random) -> dict:
        numbers = [rng.randint(0, max_number) for _ in range(length)]
        prompt = template.format(numbers=", ".join(map(str, numbers)))
        answer = ", ".join(map(str, sorted(numbers)))
        return {"prompt": prompt, "answer": answer, "numbers": numbers, "task": "sorting"}

    return _sample_splits("sorting", seed, n_train, n_heldout, draw, enlarge="max_number")



GUESS_TEMPLATE = "I am thinking of an integer from {lo} to {hi}. Guess it: reply with just one number. I will say higher or lower."


@TASKS.register("guess_number")
def guess_number(seed: int, n_train: int, n_heldout: int, *, min_width: int = 4, max_width: int = 16,
                 template: str = GUESS_TEMPLATE) -> TaskSplits:
    """Rows for the ``guess_number`` environment: a range ``[lo, hi]`` (in the prompt) and its secret (``answer``).

    Ranges are ``max_width - min_width + 1`` widths at up to 50 offsets; prompts differ by range.
    """
    if not 1 <= min_width <= max_width:
        raise ValueError(f"task 'guess_number': need 1 <= min_width <= max_width, got {min_width}, {max_width}")

    def draw(rng: random.Random) -> dict:
        lo = rng.randint(1, 50)
        hi = lo + rng.randint(min_width, max_width) - 1
        secret = rng.randint(lo, hi)
        return {"prompt": template.format(lo=lo, hi=hi), "answer": str(secret), "lo": lo, "hi": hi,
                "task": "guess_number", "environment": "guess_number"}

    return _sample_splits("guess_number", seed, n_train, n_heldout, draw, enlarge="max_width")


WORD_PROBLEMS = (
    ("A crate holds {a} boxes and each box holds {b} pens. How many pens are in the crate?", "*"),
    ("A farmer has {a} sheep and buys {b} more. How many sheep does the farmer have now?", "+"),
    ("A tank holds {a} litres and {b} litres are drained. How many litres are left?", "-"),
    ("A train travels {b} km every hour for {a} hours. How many km does it travel?", "*"),
    ("A library had {a} books and received {b} new ones. How many books does it have?", "+"),
)


@TASKS.register("tool_arithmetic")
def tool_arithmetic(seed: int, n_train: int, n_heldout: int, *, digits: int = 3,
                    suffix: str = " Use the calculator tool, then give just the number.") -> TaskSplits:
    """Arithmetic word problems with ``digits``-digit operands, for the ``tools`` environment's calculator.

    Three-digit products are beyond a small model's mental arithmetic, so accuracy measures tool
    use; the ``answer`` column holds the exact integer; ``expert_turns`` one calculator call in
    the environment's ``<tool_call>`` format, then the number (for imitation).
    """
    if digits < 1:
        raise ValueError(f"task 'tool_arithmetic': option 'digits' must be >= 1, got {digits}")

    def draw(rng: random.Random) -> dict:
        text, op = rng.choice(WORD_PROBLEMS)
        a, b = _operand(rng, digits), _operand(rng, max(digits - 1, 1) if op == "*" else digits)
        if op == "-" and a < b:
            a, b = b, a
        result = a * b if op == "*" else a + b if op == "+" else a - b
        call = json.dumps({"name": "calculator", "arguments": {"expression": f"{a} {op} {b}"}})
        return {"prompt": text.format(a=a, b=b) + suffix, "answer": str(result), "task": "tool_arithmetic",
                "environment": "tools", "expert_turns": [f"<tool_call>{call}</tool_call>", str(result)]}

    return _sample_splits("tool_arithmetic", seed, n_train, n_heldout, draw, enlarge="digits")


@TASKS.register("text_navigation")
def text_navigation(seed: int, n_train: int, n_heldout: int, *, rooms: int = 2, room_size: int = 4, noise: float = 0.3) -> TaskSplits:
    """Instruction-following episodes for the ``text_navigation`` environment (ActiveVLN in miniature).

    Each row is one seeded world (``world_seed``): ``prompt`` is the instruction, the action format
    and the start view; ``answer`` holds the expert's shortest action path, ``n_gt`` its primitive
    moves (the step budget's base); ``expert_turns`` / ``expert_weights`` the demonstration for
    imitation: the expert's turns with DART noise turns of weight 0 injected with probability
    ``noise`` (:func:`grpokit.envs.navigation.noisy_expert_turns`; 0 = the clean path).
    """
    from grpokit.envs.navigation import navigation_episode, navigation_prompt, noisy_expert_turns

    def draw(rng: random.Random) -> dict:
        world_seed = rng.randrange(10**9)
        ep = navigation_episode(world_seed, rooms, room_size)
        turns, weights = noisy_expert_turns(ep, world_seed, noise=noise)
        return {"prompt": navigation_prompt(ep), "answer": ", ".join(ep["expert"]), "world_seed": world_seed,
                "rooms": rooms, "room_size": room_size,
                "expert_turns": turns, "expert_weights": weights, "n_gt": len(ep["expert"]) - 1, "task": "text_navigation",
                "environment": "text_navigation"}

    return _sample_splits("text_navigation", seed, n_train, n_heldout, draw, enlarge="room_size")
