"""Built-in reward functions, registered in ``REWARDS``.

A reward is a plain callable ``fn(prompts, completions, **columns) -> list[float | None]``:
one score per completion, None where the reward does not apply. ``columns`` are per-sample
lists from the data (e.g. ``answer=[...]``); options from the config are bound with
``functools.partial``. Every built-in ignores columns it does not use.
"""

from __future__ import annotations

import ast
import logging
import re
import threading
from collections import Counter
from fractions import Fraction
from typing import Any, Optional, Sequence

from grpokit.data.answers import extract_answer_number, numbers_equal
from grpokit.registry import Registry

logger = logging.getLogger(__name__)

# forwards_options_to: {option: built-ins} of a reward that hands its other scalar options to the
# callable that option names (a built-in name, a callable or 'module:function'); those options are
# then checked against that callable's signature (rewards.loading.check_reward_options)
REWARDS = Registry("reward", properties={"forwards_options_to": None})

_INT = re.compile(r"-?\d+")
_INT_LIST = re.compile(r"-?\d+(?:\s*,\s*-?\d+)*")
_ANSWER_TAG = re.compile(r"answer\s*:", re.IGNORECASE)
_EXPRESSION_CHARS = re.compile(r"[\d+\-*/()\s]+")


def _require(reward: str, name: str, column: Sequence | None, n: int) -> Sequence:
    """Return the per-sample ``column`` or raise naming the reward and the missing column."""
    if column is None:
        raise ValueError(
            f"reward '{reward}' needs a '{name}' column in the data; add it or drop the reward"
        )
    if len(column) != n:
        raise ValueError(f"reward '{reward}': column '{name}' has {len(column)} rows, expected {n}")
    return column


def _after_answer_tag(text: str) -> str:
    """Text after the last "Answer:" (case-insensitive), else the last non-empty line."""
    tags = list(_ANSWER_TAG.finditer(text))
    if tags:
        return text[tags[-1].end() :]
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@REWARDS.register("answer_match")
def answer_match(
    prompts: list[str], completions: list[str], answer: Sequence | None = None, missing_ok: bool = False,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 if the number extracted from the completion equals the ``answer`` column, else 0.0.

    Extraction: ``grpokit.data.answers.extract_answer_number`` (number after the first "=" or
    "is", else the last number); comparison within 1e-6. None where the answer is None.
    ``missing_ok=True``: data without an ``answer`` column scores None everywhere instead of
    raising — for a logged-only accuracy judge (weight 0) of a label-free method (TTRL, SPINE)
    that must also run on unlabelled rows.
    """
    if answer is None and missing_ok:
        return [None] * len(completions)
    answers = _require("answer_match", "answer", answer, len(completions))
    return [None if g is None else float(g == "correct") for g in _grades(completions, answers)]


def _grades(completions: list[str], answers: Sequence) -> list[Optional[str]]:
    """Per completion: 'correct', 'incorrect' (a number that differs), 'invalid' (no number), None (no answer)."""
    grades: list[Optional[str]] = []
    for completion, gold in zip(completions, answers):
        predicted = None if gold is None else extract_answer_number(completion)
        if gold is None:
            grades.append(None)
        elif predicted is None:
            grades.append("invalid")
        else:
            grades.append("correct" if numbers_equal(predicted, str(gold)) else "incorrect")
    return grades


@REWARDS.register("answer_tiers")
def answer_tiers(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    correct: float = 1.0,
    incorrect: float = -1.0,
    invalid: float = -1.5,
    **kwargs: Any,
) -> list[float | None]:
    """Tiered solution reward: ``correct`` (+1) right answer, ``incorrect`` (−1) wrong one, ``invalid`` (−1.5) none.

    GRPO-Verif's solution reward (Wang et al., "From Solving to Verifying: A Unified Objective
    for Robust Reasoning in LLMs", arXiv 2511.15137): "no valid answer" = no number can be
    extracted (``extract_answer_number``); otherwise compared as in ``answer_match``. The value
    is >= 1 exactly when correct, so it also serves as the accuracy judge. None where the
    answer is None.
    """
    answers = _require("answer_tiers", "answer", answer, len(completions))
    value = {"correct": float(correct), "incorrect": float(incorrect), "invalid": float(invalid), None: None}
    return [value[g] for g in _grades(completions, answers)]


@REWARDS.register("math_verify")
def math_verify(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    timeout_seconds: int = 5,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 if math-verify finds the completion's answer equal to the gold ``answer``, else 0.0.

    Gold answers without "$" or "\\boxed" are wrapped as ``$gold$`` so plain numbers and LaTeX
    parse. Parsing and comparison each time out after ``timeout_seconds`` (math-verify's
    signal-based timeout, which only works in the main thread; elsewhere it runs without one
    and a warning is logged).
    """
    from math_verify import parse, verify

    answers = _require("math_verify", "answer", answer, len(completions))
    timeout: int | None = timeout_seconds
    if threading.current_thread() is not threading.main_thread():
        logger.warning("math_verify reward called off the main thread; running without timeout")
        timeout = None
    scores: list[float | None] = []
    for completion, gold in zip(completions, answers):
        if gold is None:
            scores.append(None)
            continue
        gold_text = str(gold)
        if "$" not in gold_text and "\\boxed" not in gold_text:
            gold_text = f"${gold_text}$"
        gold_parsed = parse(gold_text, parsing_timeout=timeout)
        predicted = parse(completion, parsing_timeout=timeout)
        if not gold_parsed or not predicted:
            scores.append(0.0)
            continue
        scores.append(float(verify(gold_parsed, predicted, timeout_seconds=timeout)))
    return scores


@REWARDS.register("answer_word")
def answer_word(prompts: list[str], completions: list[str], answer: Sequence | None = None, **kwargs: Any) -> list[float | None]:
    """1.0 if the completion's first word (lower-cased, punctuation stripped) is the ``answer`` column's word, else 0.0.

    For one-word answers (the ``vision_qa`` / ``video_qa`` tasks); None where the answer is None.
    """
    answers = _require("answer_word", "answer", answer, len(completions))
    out: list[float | None] = []
    for text, gold in zip(completions, answers):
        words = text.split()
        first = words[0].strip(".,!?:;'\"").lower() if words else ""
        out.append(None if gold is None else float(first == str(gold).strip().lower()))
    return out


@REWARDS.register("format_regex")
def format_regex(
    prompts: list[str], completions: list[str], pattern: str = r"^\s*\S.*", **kwargs: Any
) -> list[float | None]:
    """1.0 if ``re.search(pattern, completion, re.DOTALL)`` matches, else 0.0."""
    compiled = re.compile(pattern, re.DOTALL)
    return [float(compiled.search(c) is not None) for c in completions]


def _as_int_list(value: Any) -> list[int]:
    """Integers of a ``numbers`` cell: a list, or text like "[3, 5, 7]" (e.g. from CSV)."""
    if isinstance(value, str):
        return [int(x) for x in _INT.findall(value)]
    return [int(x) for x in value]


def _eval_expression(node: ast.AST) -> Fraction:
    """Exact value of an expression tree of integer literals, + - * / and unary minus."""
    if isinstance(node, ast.Expression):
        return _eval_expression(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_expression(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        left, right = _eval_expression(node.left), _eval_expression(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return left / right  # ZeroDivisionError is handled by the caller
    raise ValueError(f"disallowed syntax: {type(node).__name__}")


def _countdown_score(completion: str, numbers: list[int], target: int) -> float:
    """1.0 if the completion's final expression uses only ``numbers`` and equals ``target``."""
    expression = _after_answer_tag(completion).strip().strip("*`$ .")
    expression = expression.split("=")[0].strip()
    if not expression or not _EXPRESSION_CHARS.fullmatch(expression):
        return 0.0
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return 0.0
    used = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    if Counter(used) - Counter(numbers):
        return 0.0  # a number not given, or used more often than given
    try:
        value = _eval_expression(tree)
    except (ValueError, ZeroDivisionError):
        return 0.0
    return float(value == target)


@REWARDS.register("countdown_equation")
def countdown_equation(
    prompts: list[str],
    completions: list[str],
    numbers: Sequence | None = None,
    target: Sequence | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 if the final expression uses only the given numbers (each once) and equals target.

    The expression is the text after the last "Answer:" (else the last line); columns
    ``numbers`` and ``target`` give the numbers and goal. Only digits, + - * / ( ) and spaces
    are allowed; the expression is parsed with ``ast`` and evaluated exactly with fractions,
    never ``eval``. Text after an "=" is ignored ("(3 + 4) * 2 = 14" checks "(3 + 4) * 2").
    """
    n = len(completions)
    numbers = _require("countdown_equation", "numbers", numbers, n)
    target = _require("countdown_equation", "target", target, n)
    scores: list[float | None] = []
    for completion, nums, goal in zip(completions, numbers, target):
        if nums is None or goal is None:
            scores.append(None)
            continue
        scores.append(_countdown_score(completion, _as_int_list(nums), int(goal)))
    return scores


def _last_int_list(text: str) -> list[int] | None:
    """Integers of the first comma-separated run after the last "Answer:", else of the last run."""
    tags = list(_ANSWER_TAG.finditer(text))
    if tags:
        runs = _INT_LIST.findall(text[tags[-1].end() :])
        if runs:
            return [int(x) for x in _INT.findall(runs[0])]
    runs = _INT_LIST.findall(text)
    return [int(x) for x in _INT.findall(runs[-1])] if runs else None


@REWARDS.register("sorted_list")
def sorted_list(
    prompts: list[str], completions: list[str], answer: Sequence | None = None, **kwargs: Any
) -> list[float | None]:
    """1.0 if the completion's final comma-separated integer list equals ``answer``, else 0.0.

    The list right after the last "Answer:" is used when there is one; otherwise the last run
    of comma-separated integers anywhere in the completion.
    """
    answers = _require("sorted_list", "answer", answer, len(completions))
    scores: list[float | None] = []
    for completion, gold in zip(completions, answers):
        if gold is None:
            scores.append(None)
            continue
        expected = _as_int_list(gold)
        scores.append(float(_last_int_list(completion) == expected))
    return scores


@REWARDS.register("env_return")
def env_return(prompts: list[str], completions: list[str], env_return: Sequence | None = None, **kwargs: Any) -> list[float]:
    """An environment episode's return: the sum of its step rewards (``grpokit.envs``; needs ``environment.name``)."""
    return [float(r) for r in _require("env_return", "env_return", env_return, len(completions))]


@REWARDS.register("env_info")
def env_info(prompts: list[str], completions: list[str], *, key: str = "solved", **columns: Any) -> list[float | None]:
    """The last value an environment reported as ``info[key]`` in an episode (e.g. ``solved``), None where it never did.

    Reads the episodes' ``env_info`` column (``grpokit.envs.info``): a number or bool (True = 1.0,
    numpy scalars too) is the score; a key that no episode of the batch reported, while some were
    ended by the environment itself (``env_done``) and reported others, is refused naming those
    (a typo would otherwise score every episode None).
    """
    from grpokit.envs.info import info_number

    infos = _require("env_info", "env_info", columns.get("env_info"), len(completions))
    reported = sorted({k for info in infos if info for k in info})
    ended = any(columns.get("env_done") or ())
    if ended and reported and not any(info and key in info for info in infos):
        raise ValueError(f"reward 'env_info': no episode reported info['{key}'] (they reported {', '.join(reported)}): set the reward's kwargs.key to one of them")
    scores: list[float | None] = []
    for info in infos:
        value = (info or {}).get(key)
        score = info_number(value)
        if value is not None and score is None:
            raise ValueError(f"reward 'env_info': info['{key}'] is a {type(value).__name__}, not a number or bool: "
                             f"score it with a reward function reading the env_info column")
        scores.append(score)
    return scores
