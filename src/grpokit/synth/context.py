"""Assemble a long context from source documents and distractors, measured with the policy's tokenizer.

A context is segments ``[S0] …``, ``[S1] …`` joined by a blank line. Source documents (the ones
that hold the evidence) sit at seeded fractions of the context's length; distractor documents fill
the rest until the context is at least ``target_tokens`` long, and the last distractor is cut back
sentence by sentence to the shortest text that still reaches the target, so
``target_tokens <= context_tokens < target_tokens + one sentence`` [inferred: the paper states that
contexts are assembled up to a target length, not how it is reached].

Every length is the tokenizer's count of the whole context text (``add_special_tokens=False``),
never a sum of per-segment counts (token boundaries are not additive). Segment offsets are kept in
characters and in tokens: the token span of a character range comes from the fast tokenizer's
offset mapping (a slow tokenizer: the length of the tokenized prefix).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from grpokit.synth.documents import Document, Fact

SEPARATOR = "\n\n"


@dataclass
class Segment:
    """One document in the context: ``[char_start, char_end)`` and ``[token_start, token_end)``."""

    id: str  # "S0", "S1", … in order of appearance
    role: str  # source | distractor
    document: Document
    n_sentences: int
    char_start: int = 0
    char_end: int = 0
    token_start: int = 0
    token_end: int = 0

    def text(self) -> str:
        return f"[{self.id}] " + self.document.text(self.n_sentences)

    def offsets(self) -> dict:
        return {"id": self.id, "role": self.role, "kind": self.document.kind, "subject": self.document.subject,
                "char_start": self.char_start, "char_end": self.char_end,
                "token_start": self.token_start, "token_end": self.token_end}


class TokenIndex:
    """Token count of a text and the token span of any character range in it."""

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.tokenizer, self.text = tokenizer, text
        if getattr(tokenizer, "is_fast", False):
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            self.n = len(enc["input_ids"])
            self._ends = [end for _, end in enc["offset_mapping"]]  # nondecreasing character ends
        else:
            self.n = count_tokens(tokenizer, text)
            self._ends = None

    def token_of(self, char: int) -> int:
        """Index of the first token that ends after ``char`` (``n`` at the end of the text)."""
        if self._ends is None:
            return count_tokens(self.tokenizer, self.text[:char])
        return bisect.bisect_right(self._ends, char)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """``[token_start, token_end)`` of the tokens that overlap the characters ``[start, end)``."""
        return self.token_of(start), self.token_of(max(end - 1, start)) + (1 if end > start else 0)


def count_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])  # no "longer than the model" warning: the caller checks


@dataclass
class Context:
    """The assembled text, its segments (offsets filled in) and its token count."""

    text: str
    segments: list[Segment]
    n_tokens: int
    index: TokenIndex

    def segment_of(self, document: Document) -> Segment:
        return next(s for s in self.segments if s.document is document)

    def evidence(self, document: Document, fact: Fact) -> dict:
        """The evidence span of ``fact`` (a sentence of ``document``): offsets and the verbatim text."""
        seg = self.segment_of(document)
        start = self.text.index(fact.sentence, seg.char_start, seg.char_end)
        end = start + len(fact.sentence)
        t0, t1 = self.index.span(start, end)
        return {"segment": seg.id, "start": start, "end": end, "token_start": t0, "token_end": t1, "text": fact.sentence}


def _render(segments: list[Segment]) -> str:
    for k, seg in enumerate(segments):
        seg.id = f"S{k}"
    return SEPARATOR.join(s.text() for s in segments)


def assemble(
    sources: Sequence[Document], placement: Sequence[float], distractors: Iterator[Document], tokenizer: Any,
    target_tokens: int,
) -> Context:
    """The context of ``sources`` (source k at fraction ``placement[k]`` of the distractors) filled to ``target_tokens``.

    Sources are never cut; the context always ends with a distractor, which is the one cut back, so a
    target below the sources' own length gives the sources and one distractor.
    """
    if len(placement) != len(sources):
        raise ValueError(f"{len(sources)} sources need as many placements, got {len(placement)}")
    pool: list[Document] = []

    def build() -> list[Segment]:
        segs = [Segment("", "distractor", d, len(d.sentences)) for d in pool]
        for k in sorted(range(len(sources)), key=lambda k: placement[k], reverse=True):
            at = min(int(placement[k] * len(pool)), max(len(pool) - 1, 0))  # strictly before the last distractor
            segs.insert(at, Segment("", "source", sources[k], len(sources[k].sentences)))
        return segs

    # grow with whole distractors, estimating ~1 token per 4 characters, then measure exactly
    chars = sum(len(d.text()) for d in sources)
    while chars < 4 * target_tokens or not pool:
        pool.append(next(distractors))
        chars += len(pool[-1].text()) + len(SEPARATOR) + 6
    segments = build()
    n = count_tokens(tokenizer, _render(segments))
    while n < target_tokens:
        pool.append(next(distractors))
        segments = build()
        n = count_tokens(tokenizer, _render(segments))
    while len(pool) > 1:  # drop whole trailing distractors the target does not need
        last = pool.pop()
        shorter = build()
        m = count_tokens(tokenizer, _render(shorter))
        if m < target_tokens:
            pool.append(last)
            break
        segments, n = shorter, m
    segments = build()
    last = segments[-1]
    while last.n_sentences > 1:  # then the last distractor's trailing sentences
        last.n_sentences -= 1
        if count_tokens(tokenizer, _render(segments)) < target_tokens:
            last.n_sentences += 1
            break
    text = _render(segments)
    index = TokenIndex(tokenizer, text)
    pos = 0
    for seg in segments:
        seg.char_start, seg.char_end = pos, pos + len(seg.text())
        seg.token_start, seg.token_end = index.span(seg.char_start, seg.char_end)
        pos = seg.char_end + len(SEPARATOR)
    return Context(text, segments, index.n, index)
