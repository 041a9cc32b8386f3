"""Machine-checkable response constraints (IFEval-style) and their checkers.

The verifiable instruction–response paradigm of "Modular Techniques for Synthetic Long-Context
Data Generation" (arXiv 2509.01185) pairs an instruction with constraints a program can check; the
constraint kinds follow IFEval ("Instruction-Following Evaluation for Large Language Models",
Zhou et al., arXiv 2311.07911, Table 1), each checked as its strict variant, with these
definitions [inferred where IFEval uses nltk]:

| kind             | parameters      | holds when                                                                 |
|------------------|-----------------|----------------------------------------------------------------------------|
| word_count       | min, max        | min <= number of words (``\\w+`` runs, apostrophes kept) <= max            |
| sentence_count   | min, max        | min <= number of sentences (runs ending in . ! ? or the end) <= max       |
| include_keywords | words           | every word occurs (case-insensitive, whole word)                           |
| forbidden_words  | words           | no word occurs (case-insensitive, whole word)                              |
| json_keys        | keys            | the response (``` fences stripped) is a JSON object with every key         |
| bullet_count     | n               | exactly n lines start with ``- `` or ``* `` (IFEval's markdown bullets)   |
| end_phrase       | phrase          | the stripped response ends with the phrase (case-insensitive, as IFEval)  |

A constraint is a JSON object ``{"kind": ..., **parameters}``; a malformed one is refused by
:func:`check_constraint` with a one-line ValueError.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

_WORD = re.compile(r"\b[\w']+\b")
_SENTENCE = re.compile(r"[^.!?]*[^.!?\s][^.!?]*(?:[.!?]+|$)")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


def count_sentences(text: str) -> int:
    return sum(1 for m in _SENTENCE.finditer(text) if _WORD.search(m.group()))


def _has_word(text: str, word: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(word) + r"(?!\w)", text, re.IGNORECASE) is not None


def parse_json_object(text: str) -> dict | None:
    """The JSON object of ``text`` (optionally in a ``` fence), else None."""
    stripped = text.strip()
    m = _FENCE.match(stripped)
    try:
        value = json.loads(m.group(1) if m else stripped)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def bullets(text: str) -> list[str]:
    return [line.strip()[2:] for line in text.splitlines() if line.strip().startswith(("- ", "* "))]


def _word_count(text: str, min: int, max: int) -> bool:
    return min <= count_words(text) <= max


def _sentence_count(text: str, min: int, max: int) -> bool:
    return min <= count_sentences(text) <= max


def _include(text: str, words: list[str]) -> bool:
    return all(_has_word(text, w) for w in words)


def _forbidden(text: str, words: list[str]) -> bool:
    return not any(_has_word(text, w) for w in words)


def _json_keys(text: str, keys: list[str]) -> bool:
    obj = parse_json_object(text)
    return obj is not None and all(k in obj for k in keys)


def _bullet_count(text: str, n: int) -> bool:
    return len(bullets(text)) == n


def _end_phrase(text: str, phrase: str) -> bool:
    return text.strip().lower().endswith(phrase.strip().lower())


# kind -> (checker, {parameter: type}, instruction sentence)
CONSTRAINTS: dict[str, tuple[Callable[..., bool], dict[str, type], str]] = {
    "word_count": (_word_count, {"min": int, "max": int}, "Use between {min} and {max} words."),
    "sentence_count": (_sentence_count, {"min": int, "max": int}, "Write between {min} and {max} sentences."),
    "include_keywords": (_include, {"words": list}, "Include the words {words}."),
    "forbidden_words": (_forbidden, {"words": list}, "Do not use the words {words}."),
    "json_keys": (_json_keys, {"keys": list}, "Reply with a JSON object with the keys {keys} and nothing else."),
    "bullet_count": (_bullet_count, {"n": int}, "Answer with exactly {n} bullet points, each line starting with '- '."),
    "end_phrase": (_end_phrase, {"phrase": str}, "End your response with the exact phrase '{phrase}'."),
}


def check_constraint(constraint: Any) -> None:
    """Raise ValueError (one line) unless ``constraint`` is a well-formed ``{"kind", **parameters}`` object."""
    if not isinstance(constraint, dict) or constraint.get("kind") not in CONSTRAINTS:
        kind = constraint.get("kind") if isinstance(constraint, dict) else constraint
        raise ValueError(f"unknown constraint {kind!r}; kinds: {', '.join(CONSTRAINTS)}")
    _, params, _ = CONSTRAINTS[constraint["kind"]]
    given = set(constraint) - {"kind"}
    if given != set(params):
        raise ValueError(f"constraint '{constraint['kind']}' takes parameters {sorted(params)}, got {sorted(given)}")
    for name, typ in params.items():
        if not isinstance(constraint[name], typ) or isinstance(constraint[name], bool):
            raise ValueError(f"constraint '{constraint['kind']}': parameter '{name}' must be {typ.__name__}, got {constraint[name]!r}")


def satisfied(constraint: dict, response: str) -> bool:
    """Whether ``response`` meets ``constraint`` (checked for well-formedness first)."""
    check_constraint(constraint)
    fn, params, _ = CONSTRAINTS[constraint["kind"]]
    return bool(fn(response, **{k: constraint[k] for k in params}))


def describe(constraint: dict) -> str:
    """The instruction sentence that asks for ``constraint``."""
    check_constraint(constraint)
    _, params, template = CONSTRAINTS[constraint["kind"]]
    shown = {k: ", ".join(f"'{w}'" for w in v) if isinstance(v, list) else v for k, v in constraint.items() if k in params}
    return template.format(**shown)
