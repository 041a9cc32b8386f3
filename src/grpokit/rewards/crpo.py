"""Clinical-R1 CRPO rule rewards for multiple-choice QA: five objectives, one function each.

Gu et al., "Clinical-R1: Empowering Large Language Models for Faithful and Comprehensive
Reasoning with Clinical Objective Relative Policy Optimization", arXiv 2512.00601. Responses
have the form ``<think>…</think> <answer>… \\boxed{X} …</answer>`` with ``X`` an option
letter. Total training reward (weights ``CRPO_WEIGHTS``), a fixed weighted sum followed by
GRPO's group z-score, as in the paper (preset ``crpo``: combiner ``fixed``, advantage ``grpo``):
``r = 10·r_acc + r_fmt + 0.5·r_lang + r_faith + r_comp``. Because the z-score divides by the
group's std of r, a weight acts only through how the objectives mix within a group; the
combiner ``normalize_sum`` (per-objective z-scores, then the weights) with a mean-only advantage
keeps each weight's scale — a departure from the paper, available as an option.

Accuracy, format and language follow the public Clinical-R1-3B reward code; faithfulness and
comprehensiveness are [inferred] (the code has no such terms):
- ``r_faith``: the option the reasoning asserts last (e.g. "the answer is B", "B is correct",
  "the answer is <option text>") equals the boxed letter → 1, differs → 0, unknown → 0.5;
- ``r_comp``: fraction of the options (``options`` column, else "A. …" lines of the prompt)
  mentioned inside ``<think>`` by letter ("(B)", "B)", "option B") or by their text.

Columns: ``answer`` (gold option letter), ``options`` (optional: list of option texts in
letter order, a {letter: text} dict, or text with "A. …" lines). Option ``think_prefix``:
prepend ``<think>`` because the chat template already emitted it; None (default) decides per
sample (prompt ends with ``<think>`` and the completion does not start with it).
"""

from __future__ import annotations

import re
import string
from typing import Any, Sequence

from grpokit.rewards.builtin import REWARDS, _require

# Objective -> weight in the training reward; objective "x" is registered as reward "crpo_x".
CRPO_WEIGHTS = {
    "accuracy": 10.0,
    "format": 1.0,
    "language": 0.5,
    "faithfulness": 1.0,  # [inferred]
    "comprehensiveness": 1.0,  # [inferred]
}
EOS_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
# The Clinical-R1 allow-list: ASCII letters, digits, common punctuation, space and newline.
ENGLISH_CHARS = frozenset(
    string.ascii_letters + string.digits + ".,!?;:'\"()[]{}<>-_/\\|`~@#$%^&*+= \n"
)

_BOX = re.compile(r"\\boxed\{(.*?)\}")
_FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>(.*?)</answer>$", re.DOTALL)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[.):]\s+(.+?)\s*$", re.MULTILINE)
_COPULA = r"\s*(?:is|would be|should be|must be|=|:)\s*"
# "the answer is (B)", "answer: option B", "choice is B" — an option letter asserted.
_CLAIM_AFTER = re.compile(
    r"(?i:\b(?:answer|option|choice))"
    + _COPULA
    + r"(?i:(?:option|choice)\s*)?\(?([A-Z])\)?(?![A-Za-z0-9])"
)
# "B is correct", "(B) is the best answer".
_CLAIM_BEFORE = re.compile(
    r"(?<![A-Za-z0-9])\(?([A-Z])\)?\s+is\s+(?i:(?:the\s+)?(?:correct|right|best|most likely))"
)
_ANSWER_ANCHOR = re.compile(r"(?i:\banswer)" + _COPULA)


def normalise_response(prompt: str, completion: str, think_prefix: bool | None = None) -> str:
    """Cut at the first EOS marker, strip, fix ``<\\think>``/``<\\answer>`` typos, add ``<think>``.

    The Clinical-R1 preprocessing. ``think_prefix=None`` prepends ``<think>`` when the prompt
    ends with it and the completion does not start with it.
    """
    text = completion
    for marker in EOS_MARKERS:
        text = text.split(marker)[0]
    text = text.strip().replace("<\\think>", "</think>").replace("<\\answer>", "</answer>")
    if think_prefix is None:
        think_prefix = prompt.rstrip().endswith("<think>") and not text.startswith("<think>")
    return "<think>" + text if think_prefix else text


def boxed_letter(text: str) -> str | None:
    """The letter X of the only ``\\boxed{X}`` in ``text``; None unless exactly one letter box."""
    if text.count("\\boxed") != 1:
        return None
    match = _BOX.search(text)
    content = match.group(1) if match else ""
    return content if len(content) == 1 and content in string.ascii_uppercase else None


def accuracy_score(text: str, gold: str) -> float:
    """r_acc: 1/0 for one right/wrong letter box; −0.5 other box; −1 unparsable; −k for k≠1.

    ``k`` counts ``\\boxed`` occurrences, so no box gives 0 and two boxes give −2.
    """
    k = text.count("\\boxed")
    if k != 1:
        return float(-k)
    match = _BOX.search(text)
    if match is None:
        return -1.0
    letter = boxed_letter(text)
    if letter is None:
        return -0.5
    return float(letter == str(gold).strip())


def format_score(text: str) -> float:
    """r_fmt: 1.0 for ``<think>…</think><answer>…</answer>``, +0.5 for one box plus a summary.

    Range {0, 1, 1.5}: the bonus needs exactly one ``\\boxed{…}`` in the answer part and some
    other text beside it (a summary).
    """
    match = _FORMAT.search(text)
    if match is None:
        return 0.0
    answer = match.group(1).strip()
    boxes = _BOX.findall(answer)
    has_summary = len(boxes) == 1 and _BOX.sub("", answer, count=1).strip() != ""
    return 1.5 if has_summary else 1.0


def language_score(text: str) -> float:
    """r_lang: fraction of characters in the allow-list ``ENGLISH_CHARS``; 0 if empty."""
    if not text:
        return 0.0
    return sum(ch in ENGLISH_CHARS for ch in text) / len(text)


def parse_options(value: Any, prompt: str = "") -> dict[str, str]:
    """Options as {letter: text}: from a list (A, B, … in order), a dict, text, or the prompt.

    Text (the ``options`` cell or, when it is None, the prompt) is read from lines like
    ``A. text``, ``(B) text`` or ``C: text``; letters must run A, B, C… without a gap.
    """
    if isinstance(value, dict):
        return {str(k).strip().upper(): str(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return {string.ascii_uppercase[i]: str(v) for i, v in enumerate(value[:26])}
    found: dict[str, str] = {}
    for letter, text in _OPTION_LINE.findall(value if isinstance(value, str) else prompt):
        if not found and letter != "A":
            continue  # a stray "I. …" line before the options
        if letter in found:
            continue
        if letter != string.ascii_uppercase[len(found)]:
            break
        found[letter] = text
    return found


def asserted_option(think: str, options: dict[str, str]) -> str | None:
    """The option letter the reasoning asserts last, by letter or by option text; None if none.

    [inferred] heuristic: letter claims ("answer is B", "option B is correct") and "answer is
    <option text>"; the claim that ends last wins.
    """
    claims = [(m.end(), m.group(1)) for m in _CLAIM_AFTER.finditer(think)]
    claims += [(m.end(), m.group(1)) for m in _CLAIM_BEFORE.finditer(think)]
    lowered = think.lower()
    for anchor in _ANSWER_ANCHOR.finditer(think):
        rest = lowered[anchor.end() :].lstrip(" \"'*(")
        for letter, text in options.items():
            text = text.strip().lower()
            if text and rest.startswith(text):
                claims.append((anchor.end() + len(text), letter))
    return max(claims)[1] if claims else None


def faithfulness_score(text: str, options: dict[str, str]) -> float:
    """r_faith [inferred]: 1 if the reasoning's asserted option equals the boxed letter, 0 if not.

    0.5 when either is undeterminable (no ``<think>`` block, no single letter box, no claim).
    """
    think, letter = _THINK.search(text), boxed_letter(text)
    claimed = asserted_option(think.group(1), options) if think else None
    if letter is None or claimed is None:
        return 0.5
    return float(claimed == letter)


def comprehensiveness_score(text: str, options: dict[str, str]) -> float | None:
    """r_comp [inferred]: fraction of options mentioned in ``<think>`` by letter or text.

    A letter counts as "(B)", "B)" or "option/choice B"; a text by case-insensitive substring.
    None when there are no options; 0.0 without a ``<think>`` block.
    """
    if not options:
        return None
    think = _THINK.search(text)
    if think is None:
        return 0.0
    body = think.group(1)
    lowered = body.lower()
    covered = 0
    for letter, option_text in options.items():
        mention = rf"\({letter}\)|{letter}\)|(?i:option|choice)\s+{letter}(?![A-Za-z0-9])"
        by_letter = re.search(rf"(?<![A-Za-z0-9])(?:{mention})", body)
        needle = option_text.strip().lower()
        covered += bool(by_letter or (needle and needle in lowered))
    return covered / len(options)


def _options_column(reward: str, options: Sequence | None, n: int) -> Sequence:
    """Per-sample ``options`` cells, or all None when the column is absent (parse the prompt)."""
    if options is None:
        return [None] * n
    return _require(reward, "options", options, n)


@REWARDS.register("crpo_accuracy")
def crpo_accuracy(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    think_prefix: bool | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """CRPO r_acc against the gold letter ``answer``: 1, 0, −0.5, −1 or −(number of boxes)."""
    answers = _require("crpo_accuracy", "answer", answer, len(completions))
    return [
        None if gold is None else accuracy_score(normalise_response(p, c, think_prefix), gold)
        for p, c, gold in zip(prompts, completions, answers)
    ]


@REWARDS.register("crpo_format")
def crpo_format(
    prompts: list[str], completions: list[str], think_prefix: bool | None = None, **kwargs: Any
) -> list[float | None]:
    """CRPO r_fmt in {0, 1, 1.5}: think/answer tags, +0.5 for one box plus a summary."""
    return [
        format_score(normalise_response(p, c, think_prefix)) for p, c in zip(prompts, completions)
    ]


@REWARDS.register("crpo_language")
def crpo_language(
    prompts: list[str], completions: list[str], think_prefix: bool | None = None, **kwargs: Any
) -> list[float | None]:
    """CRPO r_lang in [0, 1]: fraction of ASCII-English characters in the response."""
    return [
        language_score(normalise_response(p, c, think_prefix)) for p, c in zip(prompts, completions)
    ]


@REWARDS.register("crpo_faithfulness")
def crpo_faithfulness(
    prompts: list[str],
    completions: list[str],
    options: Sequence | None = None,
    think_prefix: bool | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """CRPO r_faith [inferred]: 1 if the boxed letter is the option the reasoning asserts."""
    cells = _options_column("crpo_faithfulness", options, len(completions))
    return [
        faithfulness_score(normalise_response(p, c, think_prefix), parse_options(cell, p))
        for p, c, cell in zip(prompts, completions, cells)
    ]


@REWARDS.register("crpo_comprehensiveness")
def crpo_comprehensiveness(
    prompts: list[str],
    completions: list[str],
    options: Sequence | None = None,
    think_prefix: bool | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """CRPO r_comp [inferred]: fraction of answer options discussed in the reasoning."""
    cells = _options_column("crpo_comprehensiveness", options, len(completions))
    return [
        comprehensiveness_score(normalise_response(p, c, think_prefix), parse_options(cell, p))
        for p, c, cell in zip(prompts, completions, cells)
    ]


def crpo_objectives(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    options: Sequence | None = None,
    think_prefix: bool | None = None,
    **kwargs: Any,
) -> list[dict[str, float | None]]:
    """All five CRPO objectives per sample, as a dict keyed by objective name.

    Keys are those of ``CRPO_WEIGHTS``; the values equal those of the rewards ``crpo_<key>``;
    None where one does not apply (no gold answer, no options).
    """
    n = len(completions)
    answers = [None] * n if answer is None else _require("crpo_objectives", "answer", answer, n)
    cells = _options_column("crpo_objectives", options, n)
    out: list[dict[str, float | None]] = []
    for prompt, completion, gold, cell in zip(prompts, completions, answers, cells):
        text = normalise_response(prompt, completion, think_prefix)
        opts = parse_options(cell, prompt)
        out.append(
            {
                "accuracy": None if gold is None else accuracy_score(text, gold),
                "format": format_score(text),
                "language": language_score(text),
                "faithfulness": faithfulness_score(text, opts),
                "comprehensiveness": comprehensiveness_score(text, opts),
            }
        )
    return out
