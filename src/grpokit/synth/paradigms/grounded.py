"""Document-grounded input–output pairs whose output carries verbatim evidence spans.

Templates (the paper's task set: QA, summarisation, extraction, arXiv 2509.01185; the formats are
[inferred]):

- ``qa``: one fact question about one source document; response ``Answer: v`` plus
  ``Evidence: "<the fact sentence>"``; verifier ``grounded`` (the quote must be verbatim in the
  context and contain the answer).
- ``extraction``: three relations of one source document as ``relation: value`` lines; verifier
  ``fields``.
- ``summary``: one or two sentences about a source document naming its subject and one of its
  facts' values, at most 40 words; verifier ``constraints``.

Every item's ``evidence_spans`` are the fact sentences' offsets in the context; the validator
checks each equals ``context[start:end]`` and lies inside a source segment.
"""

from __future__ import annotations

import random

from grpokit.synth.context import Context
from grpokit.synth.documents import RELATIONS, VALUE_KINDS
from grpokit.synth.paradigms.base import QUESTIONS, ParseError, Plan, Turn, clean, require_line

KINDS = ("person", "org", "city")


def _source(world, rng: random.Random):
    return world.document(rng.choice(KINDS))


def qa(world, rng: random.Random, options: dict) -> Plan:
    doc = _source(world, rng)
    fact = doc.fact(rng.choice(RELATIONS[doc.kind]))

    def turns(ctx: Context) -> list[Turn]:
        q = (f"{QUESTIONS[fact.relation].format(s=doc.subject)} Reply with a line 'Answer: <answer>' and a line "
             "'Evidence: \"<the sentence of the documents that states it, copied exactly>\"'.")
        draft = f"Answer: {fact.value}\nEvidence: \"{fact.sentence}\""
        rewrite = "Copy the two lines below exactly, changing nothing."
        return [Turn(q, draft, {"type": "grounded", "answer": fact.value}, [(doc, fact)], rewrite, parse=parse_qa)]

    return Plan([doc], [rng.uniform(0.05, 0.9)], turns, difficulty="easy", wrong_kind=VALUE_KINDS[fact.relation])


def extraction(world, rng: random.Random, options: dict) -> Plan:
    doc = _source(world, rng)
    relations = rng.sample(RELATIONS[doc.kind], 3)

    def turns(ctx: Context) -> list[Turn]:
        facts = [doc.fact(r) for r in relations]
        q = (f"From the document about {doc.subject}, extract these fields: {', '.join(relations)}. "
             "Reply with one line 'field: value' per field and nothing else.")
        draft = "\n".join(f"{f.relation}: {f.value}" for f in facts)
        rewrite = "Copy the lines below exactly, changing nothing."
        return [Turn(q, draft, {"type": "fields", "fields": {f.relation: f.value for f in facts}}, [(doc, f) for f in facts], rewrite,
                     parse=parse_fields)]

    return Plan([doc], [rng.uniform(0.05, 0.9)], turns, difficulty="medium")


def summary(world, rng: random.Random, options: dict) -> Plan:
    doc = _source(world, rng)
    relations = rng.sample(RELATIONS[doc.kind], 2)

    def turns(ctx: Context) -> list[Turn]:
        facts = [doc.fact(r) for r in relations]
        constraints = [{"kind": "include_keywords", "words": [doc.subject, facts[0].value]},
                       {"kind": "word_count", "min": 5, "max": 40}]
        q = f"Summarise what the documents say about {doc.subject} in one or two sentences, at most 40 words, naming {facts[0].value}."
        draft = " ".join(f.sentence for f in facts)
        rewrite = "Rewrite this summary in your own words in one or two sentences; keep every name and number."
        return [Turn(q, draft, {"type": "constraints", "constraints": constraints}, [(doc, f) for f in facts], rewrite)]

    return Plan([doc], [rng.uniform(0.05, 0.9)], turns, difficulty="easy")


def parse_qa(text: str) -> str:
    """A QA response needs its ``Answer:`` and ``Evidence:`` lines."""
    text = clean(text)
    require_line(text, "Answer")
    require_line(text, "Evidence")
    return text


def parse_fields(text: str) -> str:
    """An extraction response: its ``field: value`` lines (other lines dropped); none is unparsable."""
    lines = [line.strip() for line in clean(text).splitlines() if ":" in line]
    if not lines:
        raise ParseError("no 'field: value' line")
    return "\n".join(lines)


TEMPLATES = {"qa": qa, "extraction": extraction, "summary": summary}
