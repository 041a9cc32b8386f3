"""Verifiers stored with every synthetic item: score any response to its prompt, no reference needed.

A verifier is a JSON object ``{"type": ..., ...}`` kept in the item's ``verifier`` column, so a GRPO
reward (``synth_verify``, :mod:`grpokit.rewards.synth`) scores a policy's response with the checker
the generator validated the item with. Types [inferred: the paper (arXiv 2509.01185) names
verifiable tasks and evidence-grounded outputs, not the checkers]:

| type        | fields                         | passes when                                                                      |
|-------------|--------------------------------|----------------------------------------------------------------------------------|
| answer      | answer                         | the final answer (after the last ``Answer:``, else the first line) equals it     |
| contains    | answer, cite, max_words        | the answer occurs, every cited ``[Sk]`` is written, at most max_words words      |
| grounded    | answer                         | the final answer equals it and the ``Evidence:`` quote is verbatim in the context |
|             |                                | and contains the answer                                                          |
| fields      | fields {name: value}           | every ``name: value`` line is present with the value                             |
| constraints | constraints [...]              | every constraint holds (:mod:`grpokit.synth.constraints`)                        |

Answers are compared after SQuAD's normalisation (lower case, punctuation and articles removed,
whitespace collapsed; Rajpurkar et al., arXiv 1606.05250).
"""

from __future__ import annotations

import re
import string
from typing import Any, Optional

from grpokit.synth.constraints import check_constraint, count_words, satisfied

VERIFIER_TYPES = ("answer", "contains", "grounded", "fields", "constraints")
_FIELDS = {"answer": {"answer"}, "contains": {"answer", "cite", "max_words"}, "grounded": {"answer"},
           "fields": {"fields"}, "constraints": {"constraints"}}
_ANSWER = re.compile(r"answer\s*:", re.IGNORECASE)
_EVIDENCE = re.compile(r"evidence\s*:\s*(.+)", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize(text: str) -> str:
    """SQuAD answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def final_answer(response: str) -> str:
    """The text after the last ``Answer:`` up to the end of its line; else the first non-empty line."""
    tags = list(_ANSWER.finditer(response))
    if tags:
        rest = response[tags[-1].end():].strip()
        return rest.splitlines()[0] if rest else ""
    lines = [line for line in response.splitlines() if line.strip()]
    return lines[0] if lines else ""


def check_verifier(verifier: Any) -> None:
    """Raise ValueError (one line) unless ``verifier`` is a well-formed verifier object."""
    if not isinstance(verifier, dict) or verifier.get("type") not in VERIFIER_TYPES:
        kind = verifier.get("type") if isinstance(verifier, dict) else type(verifier).__name__
        raise ValueError(f"unknown verifier type {kind!r}; types: {', '.join(VERIFIER_TYPES)}")
    missing = _FIELDS[verifier["type"]] - set(verifier)
    if missing:
        raise ValueError(f"verifier '{verifier['type']}' lacks {sorted(missing)}")
    if verifier["type"] == "constraints":
        if not verifier["constraints"]:
            raise ValueError("verifier 'constraints' has no constraints")
        for c in verifier["constraints"]:
            check_constraint(c)


def _evidence_quote(response: str) -> str:
    m = _EVIDENCE.search(response)
    return m.group(1).strip().strip("\"'“”") if m else ""


def check(verifier: dict, response: str, context: Optional[str] = None) -> list[str]:
    """The reasons ``response`` fails ``verifier`` ([] = it passes). ``context``: the prompt text (for ``grounded``)."""
    check_verifier(verifier)
    kind, gold = verifier["type"], verifier.get("answer")
    if kind == "answer":
        got = final_answer(response)
        return [] if normalize(got) == normalize(gold) else [f"answer {got!r} is not {gold!r}"]
    if kind == "contains":
        problems = [] if normalize(gold) in normalize(response) else [f"{gold!r} does not occur"]
        problems += [f"no citation [{c}]" for c in verifier["cite"] if f"[{c}]" not in response]
        if count_words(response) > verifier["max_words"]:
            problems.append(f"{count_words(response)} words > {verifier['max_words']}")
        return problems
    if kind == "grounded":
        got, quote = final_answer(response), _evidence_quote(response)
        problems = [] if normalize(got) == normalize(gold) else [f"answer {got!r} is not {gold!r}"]
        if not quote or context is None or quote not in context:
            problems.append("the Evidence: quote is not verbatim in the context")
        elif normalize(gold) not in normalize(quote):
            problems.append("the Evidence: quote does not contain the answer")
        return problems
    if kind == "fields":
        lines = {}
        for line in response.splitlines():
            if ":" in line:
                key, _, value = line.partition(":")
                lines[normalize(key)] = normalize(value)
        return [f"field '{k}' is not {v!r}" for k, v in verifier["fields"].items() if lines.get(normalize(k)) != normalize(v)]
    return [f"constraint {c['kind']} fails" for c in verifier["constraints"] if not satisfied(c, response)]


def score(verifier: dict, response: str, context: Optional[str] = None, partial: bool = False) -> float:
    """1.0 if ``response`` passes ``verifier``, else 0.0; ``partial``: the fraction of constraints / fields met."""
    problems = check(verifier, response, context)
    if partial and verifier["type"] in ("constraints", "fields"):
        total = len(verifier["constraints"] if verifier["type"] == "constraints" else verifier["fields"])
        return 1.0 - len(problems) / total
    return float(not problems)
