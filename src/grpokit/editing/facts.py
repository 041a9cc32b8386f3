"""Procedural counterfactual facts for knowledge editing: fictional subjects, paraphrased questions, neighbours.

One :class:`Edit` follows the CounterFact layout (Meng et al., "Locating and Editing Factual
Associations in GPT", arXiv 2202.05262, Sec. 3): a subject, a relation, the edit question, its
paraphrases (generalisation), the new object the edit writes, the pre-edit object it replaces,
and neighbour questions about other subjects whose answers must not change (locality). Nothing
comes from a hub: subjects are invented from syllables (e.g. "Vorelin Quastby"), so the model
has no prior knowledge of them, and objects are common words the tokenizer knows ("sculptor",
"Lima", "cello"). [inferred] The pre-edit object of a fictional subject is itself fictional: it
is the old fact the consolidation reward's consistency term looks for (EtCon's
``original_knowledge``); locality is measured against the pre-edit model's own answers, not
against it.

``make_facts(n, seed)`` is deterministic; ``validate_edits`` refuses duplicate and
contradictory edits with one line naming both; jsonl in/out with :func:`write_jsonl` /
:func:`read_jsonl`.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpokit.data.files import DataError


@dataclass(frozen=True)
class Relation:
    """A relation: question templates (``{s}`` = subject; the first is the edit prompt), a statement, objects."""

    name: str
    templates: tuple[str, ...]
    statement: str  # "{s} works as a {o}": the old fact written out (consistency reward)
    objects: tuple[str, ...]


RELATIONS: tuple[Relation, ...] = (
    Relation("profession", ("What is the profession of {s}?", "What does {s} do for a living?", "Which job does {s} have?"),
             "{s} works as a {o}", ("baker", "sculptor", "pilot", "surgeon", "farmer", "lawyer", "painter", "chemist",
                                   "teacher", "architect", "journalist", "carpenter")),
    Relation("home_city", ("In which city does {s} live?", "Where does {s} live?", "Which city is home to {s}?"),
             "{s} lives in {o}", ("Paris", "Tokyo", "Cairo", "Lima", "Oslo", "Madrid", "Toronto", "Sydney", "Nairobi",
                                 "Berlin", "Dublin", "Seoul")),
    Relation("language", ("What is the native language of {s}?", "Which language did {s} grow up speaking?",
                          "What is the mother tongue of {s}?"),
             "the native language of {s} is {o}", ("French", "Japanese", "Swahili", "Portuguese", "Finnish", "Greek",
                                                   "Hindi", "Dutch", "Polish", "Turkish", "Korean", "Arabic")),
    Relation("instrument", ("Which instrument does {s} play?", "What musical instrument does {s} play?",
                            "{s} is a musician who plays which instrument?"),
             "{s} plays the {o}", ("violin", "piano", "flute", "cello", "trumpet", "guitar", "harp", "drums",
                                  "saxophone", "clarinet", "banjo", "accordion")),
    Relation("sport", ("Which sport does {s} play?", "What sport is {s} known for?", "In which sport does {s} compete?"),
             "{s} plays {o}", ("tennis", "rugby", "cricket", "hockey", "golf", "volleyball", "baseball", "soccer",
                              "basketball", "badminton", "fencing", "rowing")),
    Relation("pet", ("What kind of pet does {s} own?", "Which animal does {s} keep as a pet?", "What is the pet of {s}?"),
             "{s} owns a {o}", ("cat", "dog", "parrot", "rabbit", "hamster", "turtle", "goldfish", "horse", "ferret",
                               "lizard", "canary", "pony")),
)
RELATIONS_BY_NAME = {r.name: r for r in RELATIONS}
# The authors' consolidation instruction (KE-Con examples/format_prompt/KE_format_cot.jinja), after the question.
COT_SUFFIX = "Please reason step by step. The final answer within <answer> \\boxed{...} </answer>."
STYLES = ("direct", "cot")

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gl", "kr", "qu", "th", "st")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "th", "nd", "x", "m")


@dataclass
class Edit:
    """One counterfactual edit with its evaluation questions.

    prompt:      the edit question (the training prompt of SFT / TPSFT)
    paraphrases: other questions with the same answer (generalisation)
    target_new:  the object the edit writes (what reliability and generalisation look for)
    target_old:  the pre-edit object it replaces (the consolidation reward's old fact)
    neighbours:  questions about other, unedited subjects (locality: their answers must not change)
    """

    case_id: int
    subject: str
    relation: str
    prompt: str
    paraphrases: list[str]
    target_new: str
    target_old: str
    neighbours: list[str] = field(default_factory=list)

    @property
    def old_fact(self) -> str:
        """The pre-edit fact as a sentence, e.g. "Vorelin Quastby works as a baker"."""
        rel = RELATIONS_BY_NAME.get(self.relation)
        template = rel.statement if rel else "{s} " + self.relation.replace("_", " ") + " {o}"
        return template.format(s=self.subject, o=self.target_old)


def _name(rng: random.Random) -> str:
    def word(syllables: int) -> str:
        text = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)) + rng.choice(_CODAS)
        return text.capitalize()

    return f"{word(rng.randint(2, 3))} {word(rng.randint(2, 3))}"


def _subjects(rng: random.Random, n: int) -> list[str]:
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < n:
        name = _name(rng)
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def make_facts(n: int, seed: int = 0, n_paraphrases: int = 2, n_neighbours: int = 1) -> list[Edit]:
    """``n`` counterfactual edits over fictional subjects, deterministic in ``seed``; relations cycle.

    Each edit's neighbours ask the same relation about subjects that no edit touches (the
    CounterFact neighbourhood: same relation, other subject), so an edit that leaks into its
    relation changes them.
    """
    if n < 1:
        raise ValueError(f"make_facts: n={n}; need at least one edit")
    if not 0 <= n_paraphrases <= 2:
        raise ValueError(f"make_facts: n_paraphrases={n_paraphrases}; each relation has 2 paraphrase templates")
    rng = random.Random(seed)
    names = _subjects(rng, n * (1 + n_neighbours))
    subjects, others = names[:n], names[n:]
    edits: list[Edit] = []
    for i, subject in enumerate(subjects):
        rel = RELATIONS[i % len(RELATIONS)]
        old, new = rng.sample(rel.objects, 2)
        questions = [t.format(s=subject) for t in rel.templates]
        neighbours = [rel.templates[0].format(s=o) for o in others[i * n_neighbours : (i + 1) * n_neighbours]]
        edits.append(Edit(i, subject, rel.name, questions[0], questions[1 : 1 + n_paraphrases], new, old, neighbours))
    validate_edits(edits)
    return edits


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def validate_edits(edits: list[Edit], where: str = "edits") -> None:
    """Raise :class:`DataError` (one line, naming both cases) on a duplicate or contradictory edit.

    Duplicate: two edits of one (subject, relation) to the same object. Contradictory: to
    different objects, or a question that is one edit's prompt or paraphrase and another edit's
    (or its own) neighbour, whose answer would have to change and stay the same at once. An edit
    whose new object equals its old one edits nothing.
    """
    seen: dict[tuple[str, str], Edit] = {}
    asked: dict[str, Edit] = {}
    for e in edits:
        if not e.prompt.strip() or not e.target_new.strip():
            raise DataError(f"{where}: case {e.case_id} has an empty prompt or target_new; give both")
        if _key(e.target_new) == _key(e.target_old):
            raise DataError(f"{where}: case {e.case_id} has target_new == target_old ({e.target_new!r}); it edits nothing")
        key = (_key(e.subject), e.relation)
        if key in seen:
            first = seen[key]
            kind = "duplicate" if _key(first.target_new) == _key(e.target_new) else "contradictory"
            raise DataError(f"{where}: {kind} edits: cases {first.case_id} and {e.case_id} both set {e.relation} of "
                            f"{e.subject!r} (to {first.target_new!r} and {e.target_new!r}); keep one")
        seen[key] = e
        for q in [e.prompt, *e.paraphrases]:
            other = asked.get(_key(q))
            if other is not None and other is not e:
                raise DataError(f"{where}: cases {other.case_id} and {e.case_id} ask the same question {q!r}; keep one")
            asked[_key(q)] = e
    for e in edits:
        for q in e.neighbours:
            owner = asked.get(_key(q))
            if owner is not None:
                raise DataError(f"{where}: contradictory edits: neighbour {q!r} of case {e.case_id} is an edited question "
                                f"of case {owner.case_id}; its answer cannot both change and stay")


def styled(question: str, style: str) -> str:
    """The user message of ``question`` in ``style``: ``direct`` (as is) or ``cot`` (followed by :data:`COT_SUFFIX`)."""
    if style not in STYLES:
        raise ValueError(f"style={style!r}; choose one of {', '.join(STYLES)}")
    return question if style == "direct" else f"{question} {COT_SUFFIX}"


def consolidation_rows(edits: list[Edit], paraphrases: bool = False) -> list[dict]:
    """GRPO rows: the CoT-styled edit prompts (or paraphrases), ``answer`` = new object, ``original_knowledge`` = old fact."""
    return [{"prompt": styled(q, "cot"), "answer": e.target_new, "original_knowledge": e.old_fact}
            for e in edits for q in (e.paraphrases if paraphrases else [e.prompt])]


def format_demonstrations(edits: list[Edit], n: int, seed: int = 1) -> list[dict]:
    """``n`` SFT rows that teach the consolidation format on facts no evaluation asks about.

    Each row: a CoT-styled question about a fresh fictional subject (not a subject of ``edits`` nor
    of their paraphrases or neighbours) and the completion ``"<fact>. <answer> \\boxed{object} </answer>"``.
    For a small model that never writes EtCon's answer format, whose format gate would zero every
    GRPO reward [inferred: the paper consolidates 7-8B instruct models that already follow it].
    """
    if n < 1:
        raise ValueError(f"format_demonstrations: n={n}; need at least one row")
    taken = {_key(q) for e in edits for q in [e.prompt, *e.paraphrases, *e.neighbours]} | {_key(e.subject) for e in edits}
    rows: list[dict] = []
    for attempt in range(8):
        for fact in make_facts(n, seed=seed + 7919 * attempt, n_paraphrases=0, n_neighbours=0):
            if any(_key(fact.subject) in q for q in taken):  # an edit's subject, or inside a question a metric asks
                continue
            taken.add(_key(fact.subject))
            rows.append({"prompt": styled(fact.prompt, "cot"),
                         "completion": f"{fact.old_fact[:1].upper()}{fact.old_fact[1:]}. <answer> \\boxed{{{fact.target_old}}} </answer>"})
            if len(rows) == n:
                return rows
    raise ValueError(f"format_demonstrations: could not invent {n} subjects apart from the edits'")


def write_jsonl(edits: list[Edit], path: str | Path) -> Path:
    """Write one JSON object per edit (atomically: a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(asdict(e)) + "\n" for e in edits), encoding="utf-8")
    tmp.replace(path)
    return path


_FIELDS = ("subject", "relation", "prompt", "target_new", "target_old")


def read_jsonl(path: str | Path) -> list[Edit]:
    """Edits from a jsonl file (fields of :class:`Edit`; ``case_id`` defaults to the line index), validated."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"facts file {path} does not exist; write one with `grpokit edit --write-facts`")
    edits = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: line {i + 1} is not valid JSON ({exc.msg})") from None
        missing = [k for k in _FIELDS if not isinstance(row.get(k), str)]
        if missing:
            raise DataError(f"{path}: line {i + 1} lacks the string field(s) {', '.join(missing)}")
        unknown = sorted(set(row) - {"case_id", "paraphrases", "neighbours", *_FIELDS})
        if unknown:
            raise DataError(f"{path}: line {i + 1} has unknown field(s) {', '.join(unknown)}")
        edits.append(Edit(int(row.get("case_id", len(edits))), row["subject"], row["relation"], row["prompt"],
                          list(row.get("paraphrases", [])), row["target_new"], row["target_old"], list(row.get("neighbours", []))))
    if not edits:
        raise DataError(f"{path}: no edits in the file")
    validate_edits(edits, where=str(path))
    return edits
