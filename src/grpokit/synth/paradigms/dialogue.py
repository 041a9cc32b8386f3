"""Multi-turn dialogues grounded in a long context; every assistant turn cites the segment it relies on.

Templates [inferred: the paper (arXiv 2509.01185) names multi-turn conversational dialogues]:

- ``fact_chat``: ``n_turns`` (option, default 3) questions, each about a different source document
  (so the evidence is spread over the context).
- ``entity_chat``: ``n_turns`` questions about one entity (different relations of one document).

Each assistant turn is the writer's rewrite of the fact sentence, with the segment citation
``[Sk]`` appended by the generator (the citation is gold, known from the assembly); each turn's
verifier is ``contains`` (the value occurs, the citation is written, at most 60 words).
"""

from __future__ import annotations

import random

from grpokit.synth.context import Context
from grpokit.synth.documents import RELATIONS
from grpokit.synth.paradigms.base import QUESTIONS, ParseError, Plan, Turn, cite, clean

REWRITE = "Rewrite this answer as one friendly sentence. Keep every name and number exactly."
INSTRUCTION = "Answer in one sentence and cite the document you used by its tag, like [S3]."


def _turns(docs_relations, ctx: Context) -> list[Turn]:
    out = []
    for k, (doc, relation) in enumerate(docs_relations):
        fact = doc.fact(relation)
        q = QUESTIONS[relation].format(s=doc.subject) + (f" {INSTRUCTION}" if k == 0 else "")
        tag = cite(ctx, doc)
        verifier = {"type": "contains", "answer": fact.value, "cite": [tag[1:-1]], "max_words": 60}
        out.append(Turn(q, fact.sentence, verifier, [(doc, fact)], REWRITE, suffix=f" {tag}", parse=parse))
    return out


def _n_turns(options: dict) -> int:
    n = int(options.get("n_turns", 3))
    if not 1 <= n <= 4:
        raise ValueError(f"dialogue option n_turns={n}: use 1 to 4 turns")
    return n


def fact_chat(world, rng: random.Random, options: dict) -> Plan:
    n = _n_turns(options)
    docs = [world.document(rng.choice(("person", "org", "city"))) for _ in range(n)]
    pairs = [(d, rng.choice(RELATIONS[d.kind])) for d in docs]
    return Plan(docs, sorted(rng.uniform(0.05, 0.9) for _ in docs), lambda ctx: _turns(pairs, ctx), difficulty="medium")


def entity_chat(world, rng: random.Random, options: dict) -> Plan:
    n = _n_turns(options)
    doc = world.document(rng.choice(("person", "org", "city")))
    pairs = [(doc, r) for r in rng.sample(RELATIONS[doc.kind], n)]
    return Plan([doc], [rng.uniform(0.05, 0.9)], lambda ctx: _turns(pairs, ctx), difficulty="easy")


def parse(text: str) -> str:
    """One assistant turn: the first paragraph of the writer's text, without citation tags it invented."""
    import re

    text = re.sub(r"\[S\d+\]", "", clean(text).split("\n\n")[0]).strip()
    if not any(ch.isalnum() for ch in text):
        raise ParseError("no words")
    return text


TEMPLATES = {"fact_chat": fact_chat, "entity_chat": entity_chat}
