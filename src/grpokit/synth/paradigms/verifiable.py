"""Verifiable instruction–response tasks: an instruction about a source document with IFEval-style constraints.

Templates (constraint kinds as in IFEval, Zhou et al., arXiv 2311.07911; their mix per template is
[inferred]):

- ``bullets``: exactly n bullet points (n = 2 or 3), required keywords (fact values of the
  document), a forbidden word, an ending phrase and a word-count range.
- ``json``: a JSON object with given keys (relations of the document), a required keyword and a
  word-count range.
- ``sentences``: a sentence-count range, required keywords and an ending phrase.

The draft is built from the document's fact sentences so that it meets every constraint (asserted
when the plan's turns are made); the verifier is the constraint list, so a reward can check any
response (:mod:`grpokit.rewards.synth`).
"""

from __future__ import annotations

import json
import random

from grpokit.synth.constraints import bullets, count_words, describe, parse_json_object, satisfied
from grpokit.synth.context import Context
from grpokit.synth.documents import RELATIONS
from grpokit.synth.paradigms.base import ParseError, Plan, Turn, clean

END_PHRASES = ("Is there anything else I can help with?", "That is all I know.", "Hope this helps.")
FORBIDDEN = ("very", "really", "amazing", "basically", "perhaps", "certainly")
REWRITE = "Rewrite the text below in your own words. Keep its exact layout, every name and number, and its last sentence unchanged."


def _word_range(draft: str, rng: random.Random) -> dict:
    n = count_words(draft)
    return {"kind": "word_count", "min": max(1, n - rng.randint(5, 15)), "max": n + rng.randint(5, 25)}


def _turn(ctx: Context, doc, facts, constraints: list[dict], draft: str, task: str, parse) -> Turn:
    broken = [c["kind"] for c in constraints if not satisfied(c, draft)]
    assert not broken, f"draft breaks its own constraints {broken}"  # a template bug, never a writer's fault
    q = f"{task} " + " ".join(describe(c) for c in constraints)
    return Turn(q, draft, {"type": "constraints", "constraints": constraints}, [(doc, f) for f in facts], REWRITE, parse=parse)


def bullets_template(world, rng: random.Random, options: dict) -> Plan:
    doc = world.document(rng.choice(("person", "org", "city")))
    n = rng.choice((2, 3))
    relations = rng.sample(RELATIONS[doc.kind], n)
    end = rng.choice(END_PHRASES)

    def turns(ctx: Context) -> list[Turn]:
        facts = [doc.fact(r) for r in relations]
        body = "\n".join(f"- {f.sentence}" for f in facts)
        draft = f"{body}\n{end}"
        forbidden = rng.choice([w for w in FORBIDDEN if w not in draft.lower().split()])
        constraints = [{"kind": "bullet_count", "n": n}, {"kind": "include_keywords", "words": [facts[0].value]},
                       {"kind": "forbidden_words", "words": [forbidden]}, {"kind": "end_phrase", "phrase": end},
                       _word_range(draft, rng)]
        return [_turn(ctx, doc, facts, constraints, draft, f"Using the documents above, describe {doc.subject}.", parse_bullets)]

    return Plan([doc], [rng.uniform(0.05, 0.9)], turns, difficulty="medium")


def json_template(world, rng: random.Random, options: dict) -> Plan:
    doc = world.document(rng.choice(("person", "org", "city")))
    relations = rng.sample(RELATIONS[doc.kind], 2)

    def turns(ctx: Context) -> list[Turn]:
        facts = [doc.fact(r) for r in relations]
        draft = json.dumps({"name": doc.subject, **{f.relation: f.value for f in facts}})
        constraints = [{"kind": "json_keys", "keys": ["name", *relations]},
                       {"kind": "include_keywords", "words": [facts[1].value]}, _word_range(draft, rng)]
        return [_turn(ctx, doc, facts, constraints, draft, f"Using the documents above, give the facts about {doc.subject}.", parse_json)]

    return Plan([doc], [rng.uniform(0.05, 0.9)], turns, difficulty="easy")


def sentences_template(world, rng: random.Random, options: dict) -> Plan:
    doc = world.document(rng.choice(("person", "org", "city")))
    relations = rng.sample(RELATIONS[doc.kind], 2)
    end = rng.choice(END_PHRASES)

    def turns(ctx: Context) -> list[Turn]:
        facts = [doc.fact(r) for r in relations]
        draft = " ".join(f.sentence for f in facts) + f" {end}"
        constraints = [{"kind": "sentence_count", "min": 2, "max": 4},
                       {"kind": "include_keywords", "words": [doc.subject, facts[0].value]},
                       {"kind": "end_phrase", "phrase": end}]
        return [_turn(ctx, doc, facts, constraints, draft, f"Using the documents above, write about {doc.subject}.", lambda t: clean(t))]

    return Plan([doc], [rng.uniform(0.05, 0.9)], turns, difficulty="easy")


def parse_bullets(text: str) -> str:
    text = clean(text)
    if not bullets(text):
        raise ParseError("no bullet lines")
    return text


def parse_json(text: str) -> str:
    text = clean(text)
    if parse_json_object(text) is None:
        raise ParseError("not a JSON object")
    return text


TEMPLATES = {"bullets": bullets_template, "json": json_template, "sentences": sentences_template}
