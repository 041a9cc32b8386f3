"""What a template produces: a plan (source documents and where they go) and, once the context is built, turns.

A template is ``fn(world, rng, options) -> Plan``. After the context is assembled around
``plan.sources``, ``plan.turns(context)`` gives the conversation's turns: each a user question,
a procedural draft of the response (the gold: derived from the world, never from a model), the
verifier that checks any response, the evidence spans, and the segment ids the response cites.
The writer LM only rewrites a draft's surface text (:mod:`grpokit.synth.writer`); the paradigm's
parser turns the writer's text back into a response, and the record validator rejects a rewrite
that lost the gold [inferred: the paper (arXiv 2509.01185) prompts an LLM with templates; with a
135M writer the gold has to come from the procedure].
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable

from grpokit.synth.context import Context
from grpokit.synth.documents import VALUE_KINDS, Document, Fact

QUESTIONS = {
    "works_at": "Where does {s} work?",
    "born_in": "In which city was {s} born?",
    "born_year": "In which year was {s} born?",
    "hobby": "What does {s} practise in spare hours?",
    "headquartered_in": "In which city is {s} headquartered?",
    "founded_year": "In which year was {s} founded?",
    "founder": "Who founded {s}?",
    "product": "What is {s} best known for?",
    "country": "In which country does {s} lie?",
    "river": "Which river flows through {s}?",
    "mayor": "Who is the mayor of {s}?",
    "population": "What is the population of {s}?",
}


class ParseError(ValueError):
    """The writer's text cannot be read as a response of the paradigm (counted as unparsable, the run goes on)."""


@dataclass
class Turn:
    """One user question and the response the item teaches.

    question: the user message (the first turn's is put after the context)
    draft: the procedural response, gold by construction (the writer rewrites it)
    verifier: the checker of any response (:mod:`grpokit.synth.verify`)
    evidence: (document, fact) pairs whose sentences support the response
    rewrite: what the writer is asked to do with the draft
    suffix: text appended after the writer's rewrite (procedural citations ``[Sk]``)
    parse: the writer's text -> the response; raises ParseError when it cannot be read
    """

    question: str
    draft: str
    verifier: dict
    evidence: list[tuple[Document, Fact]]
    rewrite: str
    suffix: str = ""
    parse: Callable[[str], str] = lambda text: clean(text)


@dataclass
class Plan:
    """Sources, their placement (fractions of the context) and the turns built from the assembled context."""

    sources: list[Document]
    placement: list[float]
    turns: Callable[[Context], list[Turn]]
    difficulty: str = "medium"
    min_gap_tokens: int = 0  # evidence segments this many tokens apart at least (multi-hop)
    wrong_kind: str = ""  # value kind of a wrong answer for the DPO degradation
    extra: dict = field(default_factory=dict)


Template = Callable[[object, random.Random, dict], Plan]


def cite(context: Context, document: Document) -> str:
    return f"[{context.segment_of(document).id}]"


def distractor_values(context: Context, kind: str, exclude: set[str]) -> list[str]:
    """Values of kind ``kind`` stated by distractor sentences present in the context (wrong answers in context)."""
    out = []
    for seg in context.segments:
        if seg.role != "distractor":
            continue
        included = set(seg.document.sentences[: seg.n_sentences])
        for f in seg.document.facts:
            if f.sentence in included and VALUE_KINDS[f.relation] == kind and f.value not in exclude:
                out.append(f.value)
        if kind in ("person", "org", "city") and seg.document.kind == kind and seg.document.subject not in exclude:
            out.append(seg.document.subject)
    return sorted(set(out))


_SPECIAL = re.compile(r"<\|[^|>]*\|>")


def clean(text: str) -> str:
    """The writer's text without chat special tokens, a leading ``Text:`` echo, or wrapping quotes."""
    text = _SPECIAL.sub("", text).strip()
    text = re.sub(r"^(rewritten\s+)?text\s*:\s*", "", text, flags=re.IGNORECASE).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    if not text:
        raise ParseError("empty output")
    return text


def require_line(text: str, label: str) -> None:
    if not re.search(rf"^\s*{label}\s*:", text, re.IGNORECASE | re.MULTILINE):
        raise ParseError(f"no '{label}:' line")
