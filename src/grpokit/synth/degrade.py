"""Degradations that turn a passing response into the DPO ``rejected`` one.

arXiv 2509.01185 produces DPO pairs from a chosen response and a degraded one (ungrounded,
constraint-violating or incomplete); grpokit degrades procedurally [inferred], by the verifier's
type, and the record validator confirms that the chosen response passes and the rejected fails:

- ``answer`` / ``grounded``: ``wrong_answer`` — the final ``Answer:`` line (and the value inside the
  evidence quote) names a wrong entity or value that the context states about a distractor;
- ``contains``: ``wrong_answer`` — every occurrence of the value replaced by a wrong one;
- ``fields``: ``incomplete`` — one ``field: value`` line dropped;
- ``constraints``: ``constraint_violation`` — one constraint broken (ending phrase removed, a
  required keyword replaced, a forbidden word inserted, a bullet dropped, a JSON key removed).
"""

from __future__ import annotations

import json
import random
import re

from grpokit.synth.constraints import parse_json_object


def _replace(text: str, old: str, new: str) -> str:
    return re.sub(re.escape(old), new.replace("\\", "\\\\"), text, flags=re.IGNORECASE)


def wrong_answer(response: str, gold: str, wrong: str) -> str:
    lines = response.splitlines()
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].strip().lower().startswith("answer"):
            lines[k] = f"Answer: {wrong}"
            break
    return _replace("\n".join(lines), gold, wrong)


def _break(constraint: dict, text: str) -> str:
    kind = constraint["kind"]
    if kind == "end_phrase":
        stripped = text.rstrip()
        return stripped[: len(stripped) - len(constraint["phrase"])].rstrip()
    if kind == "include_keywords":
        return _replace(text, constraint["words"][0], "it")
    if kind == "forbidden_words":
        head, _, tail = text.partition(" ")
        return f"{head} {constraint['words'][0]} {tail}"
    if kind == "bullet_count":
        lines = text.splitlines()
        last = max(k for k, line in enumerate(lines) if line.strip().startswith(("- ", "* ")))
        return "\n".join(lines[:last] + lines[last + 1:])
    if kind == "json_keys":
        obj = parse_json_object(text) or {}
        obj.pop(constraint["keys"][-1], None)
        return json.dumps(obj)
    raise KeyError(kind)


BREAKABLE = ("end_phrase", "include_keywords", "forbidden_words", "bullet_count", "json_keys")


def degrade(response: str, verifier: dict, wrong: list[str], rng: random.Random) -> tuple[str, str]:
    """(rejected response, degradation kind) for a passing ``response``; ``wrong``: wrong values of the answer's kind."""
    kind = verifier["type"]
    if kind in ("answer", "grounded", "contains"):
        if not wrong:
            return response.rsplit("\n", 1)[0] if "\n" in response else "", "incomplete"
        return wrong_answer(response, verifier["answer"], rng.choice(wrong)), "wrong_answer"
    if kind == "fields":
        lines = response.splitlines()
        drop = rng.randrange(len(lines))
        return "\n".join(lines[:drop] + lines[drop + 1:]), "incomplete"
    options = [c for c in verifier["constraints"] if c["kind"] in BREAKABLE]
    if not options:
        return " ".join(response.split()[:3]), "incomplete"
    return _break(rng.choice(options), response), "constraint_violation"
