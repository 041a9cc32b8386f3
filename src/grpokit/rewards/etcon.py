"""EtCon's consolidation reward: format gate, correctness, cleanliness and consistency of a CoT answer.

Li et al., "EtCon: Edit-then-Consolidate for Reliable Knowledge Editing", arXiv 2512.04753,
the consolidation stage (GRPO); the definitions follow the authors' released reward
(github.com/RlinL/EtCon, ``KE-Con/examples/reward_function/KE_multi_v2_rewards.py``). A
response should end ``<answer> \\boxed{new object} </answer>``:

    format f       1 - 0.5 [not exactly one <answer> and one </answer>]
                     - 0.5 [number of "\\boxed{" != 1, else the box is not inside the tags]
                     - 0.1 [a double-backslash box], floored at 0
    correctness c  on the first box's content (extracted only when f > 0), both sides
                   normalised (lower-case, delete . , ! ? " ' `, collapse whitespace):
                   1 exact; 0.75 gold words a subset of the predicted words and no extra
                   "no" / "not"; else round(0.4 + 0.2 (sim - 0.85) / 0.15, 2) in [0.4, 0.6] when
                   the MiniLM cosine sim of the raw texts is >= 0.85; else 0 (empty box: 0)
    cleanliness cl 1 - min(0.8, 0.2 (k - 1)) for k > 1 answer tags; - 0.6 for non-space text
                   after the only </answer>; - 0.4 for a response over 2000 characters; floor 0
    consistency cs without the pre-edit fact: 1. With it: 0 without a "Re-evaluate Knowledge
                   Network ..." section (up to Synthesize / Formulate / <answer>); if the
                   normalised old fact appears there, the 15 words either side decide:
                   invalidation words (incorrect, invalid, superseded, no longer, outdated) 1,
                   affirmation words (correct, valid, remains) 0; otherwise 0.5
    overall        0 if f == 0 (the gate), else round(0.05 f + 0.7 c + 0.15 cl + 0.1 cs, 4);
                   an empty or whitespace-only response scores 0.

Columns: ``answer`` (the new object, required) and ``original_knowledge`` (the pre-edit fact as
a sentence; optional). The released launcher passes only the ground truth, so consistency is
1 there; the paper describes it with the old fact, which ``use_context=True`` (default) reads
from the column when present. The semantic tier embeds with the embedded all-MiniLM-L6-v2
(:func:`grpokit.rewards.embedders.minilm_embed`, the authors' sentence-transformers model);
``semantic=False`` turns it off.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence

from grpokit.rewards.builtin import REWARDS, _require

ETCON_WEIGHTS = {"format": 0.05, "correctness": 0.7, "cleanliness": 0.15, "consistency": 0.1}
SEMANTIC_THRESHOLD = 0.85
INVALIDATING = ("incorrect", "invalid", "superseded", "no longer", "outdated")
AFFIRMING = ("correct", "valid", "remains")

_DELETED = re.compile(r"[.,!?\"'`]")
_BOX = re.compile(r"\\boxed\{([^}]+)\}")
_BOX_IN_TAGS = re.compile(r"<answer>.*\\boxed\{.*\}.*</answer>", re.DOTALL)
_REEVAL = re.compile(r"Re-evaluate Knowledge Network.*?(?:Synthesize|Formulate|<answer>)", re.IGNORECASE | re.DOTALL)

Similarity = Callable[[list[str], list[str]], list[float]]


def normalize(text: str) -> str:
    """Lower-case, delete the characters . , ! ? " ' ` and collapse whitespace: "The  Cat's." -> "the cats"."""
    return " ".join(_DELETED.sub("", str(text).lower()).split())


def format_score(text: str) -> float:
    """The format term f in [0, 1] (see the module docstring)."""
    score = 1.0
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        score -= 0.5
    if text.count("\\boxed{") != 1:
        score -= 0.5
    elif not _BOX_IN_TAGS.search(text):
        score -= 0.5
    if "\\\\boxed" in text:
        score -= 0.1
    return max(0.0, round(score, 10))


def boxed_answer(text: str) -> str:
    """The stripped content of the first ``\\boxed{...}`` (no nested braces), '' when the format term is 0 or there is none."""
    if format_score(text) == 0:
        return ""
    match = _BOX.search(text)
    return match.group(1).strip() if match else ""


def lexical_correctness(pred: str, gold: str) -> Optional[float]:
    """1.0 exact, 0.75 word-subset match, 0.0 for an empty prediction, None when only the semantic tier can decide."""
    if not pred:
        return 0.0
    p, g = normalize(pred), normalize(gold)
    if p == g:
        return 1.0
    pw, gw = set(p.split()), set(g.split())
    if gw and gw <= pw and not {"no", "not"} & (pw - gw):
        return 0.75
    return None


def semantic_score(sim: float, threshold: float = SEMANTIC_THRESHOLD) -> float:
    """round(0.4 + 0.2 (sim - t) / (1 - t), 2) clipped to [0.4, 0.6] when sim >= t, else 0."""
    if sim < threshold:
        return 0.0
    return min(0.6, max(0.4, round(0.4 + (sim - threshold) / (1.0 - threshold) * 0.2, 2)))


def minilm_similarity(a: list[str], b: list[str]) -> list[float]:
    """Cosine similarities of all-MiniLM-L6-v2 sentence embeddings, pair by pair."""
    from grpokit.rewards.embedders import minilm_embed

    ea, eb = minilm_embed(a), minilm_embed(b)  # [n, 384] unit rows
    return (ea * eb).sum(-1).tolist()


def correctness_scores(preds: Sequence[str], golds: Sequence[str], similarity: Optional[Similarity] = minilm_similarity,
                       threshold: float = SEMANTIC_THRESHOLD) -> list[float]:
    """The correctness term c per (boxed prediction, gold); the semantic tier embeds only the undecided pairs, in one batch."""
    scores = [lexical_correctness(p, g) for p, g in zip(preds, golds)]
    open_ = [i for i, s in enumerate(scores) if s is None]
    sims = similarity([preds[i] for i in open_], [golds[i] for i in open_]) if open_ and similarity else [0.0] * len(open_)
    for i, sim in zip(open_, sims):
        scores[i] = semantic_score(sim, threshold)
    return [float(s) for s in scores]


def cleanliness_score(text: str) -> float:
    """The cleanliness term cl in [0, 1] (see the module docstring)."""
    score, tags = 1.0, text.count("<answer>")
    if tags > 1:
        score -= min(0.8, 0.2 * (tags - 1))
    if tags == 1:
        tail = text.split("</answer>", 1)[1] if "</answer>" in text else ""
        if tail.strip():
            score -= 0.6
    if len(text) > 2000:
        score -= 0.4
    return max(0.0, round(score, 10))


def consistency_score(text: str, old_fact: Optional[str]) -> float:
    """The consistency term in {0, 0.5, 1} against the pre-edit fact (1 without one)."""
    if not old_fact:
        return 1.0
    section = _REEVAL.search(text)
    if not section:
        return 0.0
    fact, body = normalize(old_fact), normalize(section.group(0))
    if fact and fact in body:
        window = re.search(r"(?:\b\w+\b\s*){0,15}" + re.escape(fact) + r"(?:\s*\b\w+\b){0,15}", body)
        if window:
            around = window.group(0)
            if any(w in around for w in INVALIDATING):  # first: "incorrect" contains "correct"
                return 1.0
            if any(w in around for w in AFFIRMING):
                return 0.0
    return 0.5


def components(completions: Sequence[str], answers: Sequence[str], old_facts: Sequence[Optional[str]],
               similarity: Optional[Similarity] = minilm_similarity) -> dict[str, list[float]]:
    """Per completion: format, correctness, cleanliness, consistency and the gated overall score."""
    texts = [c if isinstance(c, str) else "" for c in completions]
    fmt = [format_score(t) for t in texts]
    corr = correctness_scores([boxed_answer(t) for t in texts], [str(a) for a in answers], similarity)
    clean = [cleanliness_score(t) for t in texts]
    cons = [consistency_score(t, o) for t, o in zip(texts, old_facts)]
    w = ETCON_WEIGHTS
    overall = [
        0.0 if f == 0 or not t.strip() else round(w["format"] * f + w["correctness"] * c + w["cleanliness"] * cl + w["consistency"] * cs, 4)
        for t, f, c, cl, cs in zip(texts, fmt, corr, clean, cons)
    ]
    return {"format": fmt, "correctness": corr, "cleanliness": clean, "consistency": cons, "overall": overall}


def _columns(name: str, completions: Sequence[str], answer: Sequence | None, original_knowledge: Sequence | None,
             use_context: bool, semantic: bool) -> dict[str, list[float]]:
    answers = _require(name, "answer", answer, len(completions))
    olds = list(original_knowledge) if (use_context and original_knowledge is not None) else [None] * len(completions)
    if len(olds) != len(completions):
        raise ValueError(f"reward '{name}': column 'original_knowledge' has {len(olds)} rows, expected {len(completions)}")
    return components(completions, answers, olds, minilm_similarity if semantic else None)


def _register(key: str, doc: str) -> None:
    name = "etcon" if key == "overall" else f"etcon_{key}"

    def reward(prompts: list[str], completions: list[str], answer: Sequence | None = None,
               original_knowledge: Sequence | None = None, use_context: bool = True, semantic: bool = True,
               **kwargs: Any) -> list[float | None]:
        return _columns(name, completions, answer, original_knowledge, use_context, semantic)[key]

    reward.__name__ = reward.__qualname__ = name
    reward.__doc__ = doc
    REWARDS.register(name)(reward)


_register("overall", "EtCon consolidation reward (arXiv 2512.04753): 0.05 format + 0.7 correctness + 0.15 cleanliness + 0.1 consistency, 0 when format is 0.")
_register("format", "EtCon format term: one <answer>...</answer> holding one \\boxed{} (1 / 0.5 / 0, -0.1 for a double backslash).")
_register("correctness", "EtCon correctness term: boxed answer vs the new object, 1 exact / 0.75 word subset / 0.4-0.6 MiniLM cosine >= 0.85 / 0.")
_register("cleanliness", "EtCon cleanliness term: penalties for repeated answer tags, text after </answer>, over 2000 characters.")
_register("consistency", "EtCon consistency term: the re-evaluation section invalidates the pre-edit fact (original_knowledge column) 1 / 0.5 / 0.")
