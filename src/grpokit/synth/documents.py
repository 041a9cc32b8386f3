"""Procedural source documents for synthetic long contexts: a small fictional world per item.

"Modular Techniques for Synthetic Long-Context Data Generation in Language Model Training and
Evaluation" (arXiv 2509.01185) builds long contexts from source documents plus distractors; the
paper's corpora are not public, so grpokit draws its documents procedurally [inferred]: every item
gets a fresh world of invented people, organisations and cities (names made of random syllables, so
no fact can be answered from pre-training), and each document is a profile of one entity — fact
sentences (one fixed template per relation, so every fact is a verbatim, locatable sentence) mixed
with filler sentences that state nothing checkable.

Relations (subject kind -> value kind): person ``works_at`` org, ``born_in`` city, ``born_year``
year, ``hobby`` word; org ``headquartered_in`` city, ``founded_year`` year, ``founder`` person,
``product`` word; city ``country`` country, ``river`` name, ``mayor`` person, ``population``
number. Every name in a world is distinct, so a fact about an entity occurs only in its own
document.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

SYLLABLES = (
    "ka", "lo", "mir", "ta", "ven", "sol", "dra", "qui", "bel", "nor", "fa", "zen", "ri", "mo", "tal",
    "gar", "el", "vin", "pa", "sku", "tor", "am", "ne", "lys", "cor", "bra", "ju", "hes", "wo", "dan",
    "ix", "mel", "rav", "ost", "pe", "tir", "ul", "vas", "kre", "sen",
)
ORG_KINDS = ("Institute", "Labs", "Foundry", "Guild", "Company", "Collective", "Works", "Trust")
CITY_SUFFIXES = ("ford", "ton", "mere", "holm", "burg", "stad", "port", "vale")
COUNTRY_SUFFIXES = ("ia", "land", "stan", "ora")
WORDS = (
    "pottery", "chess", "astronomy", "rowing", "origami", "beekeeping", "archery", "calligraphy", "sailing",
    "fencing", "lanterns", "compasses", "telescopes", "bicycles", "looms", "violins", "kettles", "maps",
    "clocks", "lenses", "ropes", "barometers",
)

# relation -> sentence template over {s} (subject) and {v} (value); one per relation, so a fact is one exact string
FACT_TEMPLATES = {
    "works_at": "{s} works at {v}.",
    "born_in": "{s} was born in {v}.",
    "born_year": "{s} was born in the year {v}.",
    "hobby": "In spare hours {s} practises {v}.",
    "headquartered_in": "{s} is headquartered in {v}.",
    "founded_year": "{s} was founded in {v}.",
    "founder": "{s} was founded by {v}.",
    "product": "{s} is best known for its {v}.",
    "country": "{s} lies in the country of {v}.",
    "river": "The river {v} flows through {s}.",
    "mayor": "The mayor of {s} is {v}.",
    "population": "{s} has a population of {v}.",
}
RELATIONS = {
    "person": ("works_at", "born_in", "born_year", "hobby"),
    "org": ("headquartered_in", "founded_year", "founder", "product"),
    "city": ("country", "river", "mayor", "population"),
}
# relation -> kind of its value (entity kinds get names from the world; the rest are literals)
VALUE_KINDS = {
    "works_at": "org", "born_in": "city", "born_year": "year", "hobby": "word", "headquartered_in": "city",
    "founded_year": "year", "founder": "person", "product": "word", "country": "country", "river": "river",
    "mayor": "person", "population": "number",
}
FILLER = (
    "Records about {s} are kept in several regional archives.",
    "Visitors often ask about {s} and its long history.",
    "Older accounts of {s} differ in many small details.",
    "A recent newsletter mentioned {s} only in passing.",
    "Little else is written about {s} in the public record.",
    "Some travellers describe {s} as quiet in the winter months.",
    "Several letters from the last decade refer to {s}.",
    "Local guides sometimes include {s} in their walking tours.",
    "The name {s} appears in a number of old almanacs.",
    "Accounts of {s} were collected by a volunteer society.",
)


@dataclass(frozen=True)
class Fact:
    """One checkable statement: ``relation(subject) = value``, written as ``sentence`` (verbatim in its document)."""

    relation: str
    subject: str
    value: str
    sentence: str


@dataclass
class Document:
    """A profile of one entity: a title and sentences (fact and filler, in a seeded order)."""

    kind: str  # person | org | city
    subject: str
    facts: list[Fact]
    sentences: list[str] = field(default_factory=list)

    def text(self, n_sentences: int | None = None) -> str:
        """``Title. sentence sentence …`` with the first ``n_sentences`` sentences (all by default)."""
        body = self.sentences if n_sentences is None else self.sentences[:n_sentences]
        return f"About {self.subject}: " + " ".join(body)

    def fact(self, relation: str) -> Fact:
        return next(f for f in self.facts if f.relation == relation)


class World:
    """Distinct invented names and entity profiles, all drawn from one seeded ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def _word(self, n_min: int = 2, n_max: int = 3) -> str:
        return "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(n_min, n_max))).capitalize()

    def name(self, kind: str) -> str:
        """A name of ``kind`` (person, org, city, country, river) not used before in this world."""
        for _ in range(1000):
            if kind == "person":
                name = f"{self._word()} {self._word()}"
            elif kind == "org":
                name = f"{self._word()} {self.rng.choice(ORG_KINDS)}"
            elif kind == "city":
                name = self._word(1, 2) + self.rng.choice(CITY_SUFFIXES)
            elif kind == "country":
                name = self._word(1, 2) + self.rng.choice(COUNTRY_SUFFIXES)
            elif kind == "river":
                name = self._word(2, 2)
            else:
                raise ValueError(f"unknown entity kind '{kind}'")
            if name not in self.used and not any(name in u or u in name for u in self.used):
                self.used.add(name)  # no name contains another: a value never matches inside a longer name
                return name
        raise RuntimeError("the name space is exhausted")  # pragma: no cover  (40 syllables: ~10^9 names)

    def value(self, relation: str, exclude: set[str] = frozenset()) -> str:
        kind = VALUE_KINDS[relation]
        if kind in ("person", "org", "city", "country", "river"):
            return self.name(kind)
        while True:
            if kind == "year":
                v = str(self.rng.randint(1700, 2015))
            elif kind == "number":
                v = f"{self.rng.randint(2, 900) * 1000:,}"
            else:
                v = self.rng.choice(WORDS)
            if v not in exclude:
                return v

    def document(self, kind: str, subject: str | None = None, values: dict[str, str] | None = None,
                 n_filler: int = 4) -> Document:
        """A profile of a new (or the given) ``subject``: every relation of its kind, ``values`` fixing some of them."""
        subject = subject or self.name(kind)
        values = dict(values or {})
        facts = []
        for relation in RELATIONS[kind]:
            v = values.get(relation) or self.value(relation)
            facts.append(Fact(relation, subject, v, FACT_TEMPLATES[relation].format(s=subject, v=v)))
        filler = [t.format(s=subject) for t in self.rng.sample(FILLER, n_filler)]
        sentences = [f.sentence for f in facts] + filler
        self.rng.shuffle(sentences)
        return Document(kind, subject, facts, sentences)

    def distractors(self, n_filler: int = 4):
        """An endless stream of profiles of new entities (kinds in a seeded order): the context's distractors."""
        while True:
            yield self.document(self.rng.choice(("person", "org", "city")), n_filler=n_filler)
