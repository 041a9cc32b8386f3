"""Long-context reasoning: multi-hop questions whose evidence lies in separated segments.

Templates [inferred: the paper (arXiv 2509.01185) names "long-context reasoning examples"]:

- ``bridge`` (2 hops): person P works at org O [segment a]; O is headquartered in city C
  [segment b]. "In which city is the organisation that P works for headquartered?" -> C.
- ``chain`` (3 hops): … and the mayor of C is M [segment c] -> M.
- ``compare`` (2 segments): orgs O1, O2 with distinct founding years -> the earlier one.

Evidence segments are placed in different thirds of the context and must be at least
``min_gap_tokens`` tokens apart (token_start of the later span - token_end of the earlier), checked
by the validator on the assembled context. The draft is the chain of evidence sentences with their
citations and a final ``Answer:`` line; verifier ``answer``.
"""

from __future__ import annotations

import random

from grpokit.synth.context import Context
from grpokit.synth.paradigms.base import Plan, Turn, cite, clean, require_line

REWRITE = ("Rewrite the reasoning below in your own words. Keep every name and the segment tags such as [S3], "
           "and end with the same final line 'Answer: ...'.")
INSTRUCTION = "Answer the question using the documents above. Explain which documents you used, then end with a line 'Answer: <answer>'."


def _placements(rng: random.Random, n: int) -> list[float]:
    """One fraction per evidence document, each in its own part of the context (first, middle, last…)."""
    spans = [(k / n + 0.03, (k + 1) / n - 0.1) for k in range(n)]
    return [rng.uniform(lo, max(lo, hi)) for lo, hi in spans]


def _hops(world, rng: random.Random, options: dict, hops: int) -> Plan:
    person = world.document("person")
    org = world.document("org", subject=person.fact("works_at").value)
    docs = [person, org]
    if hops == 3:
        docs.append(world.document("city", subject=org.fact("headquartered_in").value))
    final = docs[-1].fact("mayor" if hops == 3 else "headquartered_in")
    relations = ["works_at", "headquartered_in", "mayor"][:hops]
    question = (f"Who is the mayor of the city where the organisation that {person.subject} works for is headquartered?"
                if hops == 3 else f"In which city is the organisation that {person.subject} works for headquartered?")

    def turns(ctx: Context) -> list[Turn]:
        facts = [(d, d.fact(r)) for d, r in zip(docs, relations)]
        chain = " ".join(f"{f.sentence[:-1]} {cite(ctx, d)}." for d, f in facts)
        return [Turn(f"{question} {INSTRUCTION}", f"{chain}\nAnswer: {final.value}",
                     {"type": "answer", "answer": final.value}, facts, REWRITE, parse=parse)]

    order = list(range(hops))
    rng.shuffle(order)  # which evidence document comes first in the context
    placement = _placements(rng, hops)
    return Plan(docs, [placement[order[k]] for k in range(hops)], turns, difficulty="hard" if hops == 3 else "medium",
                min_gap_tokens=int(options.get("min_gap_tokens", 256)), wrong_kind="person" if hops == 3 else "city")


def bridge(world, rng: random.Random, options: dict) -> Plan:
    return _hops(world, rng, options, 2)


def chain(world, rng: random.Random, options: dict) -> Plan:
    return _hops(world, rng, options, 3)


def compare(world, rng: random.Random, options: dict) -> Plan:
    a = world.document("org")
    year_a = int(a.fact("founded_year").value)
    other = str(year_a + rng.choice([-1, 1]) * rng.randint(3, 120))
    b = world.document("org", values={"founded_year": other})
    earlier = a if year_a < int(other) else b

    def turns(ctx: Context) -> list[Turn]:
        facts = [(a, a.fact("founded_year")), (b, b.fact("founded_year"))]
        chain_text = " ".join(f"{f.sentence[:-1]} {cite(ctx, d)}." for d, f in facts)
        q = f"Which was founded earlier, {a.subject} or {b.subject}? {INSTRUCTION}"
        return [Turn(q, f"{chain_text}\nAnswer: {earlier.subject}", {"type": "answer", "answer": earlier.subject}, facts, REWRITE,
                     parse=parse)]

    placement = _placements(rng, 2)
    rng.shuffle(placement)
    plan = Plan([a, b], placement, turns, difficulty="medium", min_gap_tokens=int(options.get("min_gap_tokens", 256)), wrong_kind="org")
    plan.extra["wrong"] = [b.subject if earlier is a else a.subject]
    return plan


def parse(text: str) -> str:
    """The writer's text as a response: it must end in an ``Answer:`` line."""
    text = clean(text)
    require_line(text, "Answer")
    return text


TEMPLATES = {"bridge": bridge, "chain": chain, "compare": compare}
