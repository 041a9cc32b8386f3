"""Prompt rewriting against a curated reference set: the setting of DPP-GRPO.

Kazimi, Dunlop, Yanardag, "Diverse Video Generation with Determinantal Point Process-Guided
Policy Optimization", arXiv 2511.20647 (the method): the policy is a language model that
rewrites a user's text-to-video prompt ``q``; each rewrite ``p`` is scored by its DPP log-det
marginal gain over a curated reference set ``R_q`` of faithful, mutually diverse variants of
``q`` plus a relevance term (reward ``dpp`` with ``reference: column``); stage 1 is an SFT
warm-up on (prompt, diverse variant) pairs. The paper's 30K prompts (3K base prompts × 10
variants written by GPT-5-nano and an architect/critic agent pipeline) do not ship with
grpokit; this generator stands in for them.

Task ``prompt_rewrites``: a query is "<subject> <action> <setting>" ("a dog chasing a ball on
a beach"). Its curated variants each add one cinematic factor of a different kind — camera
(prefix: "A slow dolly shot of ..."), light, weather, style, motion — so the pool is faithful
(the query's words all stay) and mutually diverse (no two variants share a factor kind), as
the paper's curation asks. Each row shows ``R_q`` = the first ``k`` variants ("rewrites
already written", ``k`` uniform in ``shown``) and asks for one more; its ``answer`` is the next
variant of the pool (a factor kind not yet used): the SFT demonstration (writer
``prompt_rewrite``). Everything in a row is a function of the query and the seed, so the
prompt identifies the query and the train / held-out splits share no query.

[inferred]: that the policy sees ``R_q`` in its prompt during training (the paper's inference
conditions each new prompt on the set built so far, "mirroring training"); the factor lists;
``shown`` = 0–3 (the paper's best |R_q| is 5–8; 135M-sized prompts here).

Columns: ``prompt``, ``query``, ``reference_set`` (the shown variants, a list), ``answer``
(the demonstration), ``variants`` (the whole curated pool), ``domain`` (the answer's factor
kind), ``task``.
"""

from __future__ import annotations

import random

from grpokit.data.demonstrations import DEMONSTRATIONS
from grpokit.data.tasks import TASKS, TaskSplits, _sample_splits

# subject -> actions that fit it; every setting below fits every pair.
SUBJECTS = {
    "a dog": ("chasing a ball", "digging in the sand", "running with a stick"),
    "a cat": ("stalking a butterfly", "stretching in the sun", "climbing a fence"),
    "a red fox": ("hunting for mice", "trotting along a path", "curling up to sleep"),
    "a horse": ("galloping freely", "grazing quietly", "pulling a small cart"),
    "an old fisherman": ("mending a net", "casting a line", "walking home with his catch"),
    "a little girl": ("flying a kite", "blowing soap bubbles", "jumping in puddles"),
    "a street musician": ("playing the violin", "tuning a guitar", "singing to passers-by"),
    "a chef": ("chopping vegetables", "tossing noodles in a wok", "tasting a sauce"),
    "a skateboarder": ("performing a kickflip", "rolling down a slope", "grinding a rail"),
    "a cyclist": ("racing downhill", "fixing a flat tyre", "riding past slowly"),
    "a ballerina": ("spinning on one foot", "leaping across the ground", "bowing after a dance"),
    "an astronaut": ("planting a flag", "walking in a heavy suit", "waving at the camera"),
    "an owl": ("taking off from a branch", "turning its head", "swooping down"),
    "a farmer": ("harvesting wheat", "feeding chickens", "driving a tractor"),
    "a group of children": ("playing tag", "building a sandcastle", "dancing in a circle"),
    "a robot": ("sweeping the floor", "carrying a box", "waving its metal arm"),
}
SETTINGS = ("on a beach", "in a forest", "in a busy city street", "in the snow", "on a mountain trail",
            "by a quiet lake", "in a desert", "in a park", "at a crowded market", "on an old stone bridge")
# factor kind -> phrases; "camera" phrases go in front ("<phrase> <query>"), the others after it.
FACTORS = {
    "camera": ("A slow dolly shot of", "An aerial drone view of", "A close-up shot of", "A wide establishing shot of",
               "A handheld tracking shot of", "A low-angle shot of"),
    "light": ("at sunrise", "at golden hour", "at night under street lamps", "under a full moon", "in harsh midday sun"),
    "weather": ("in pouring rain", "in thick fog", "during a light snowfall", "on a windy day", "under a stormy sky"),
    "style": ("in the style of a watercolor painting", "as a black-and-white silent film", "as a stop-motion animation",
              "shot on grainy 16mm film", "as a pixel-art video game scene"),
    "motion": ("in slow motion", "as a fast time-lapse", "with the camera slowly circling around", "in one continuous take"),
}
TEMPLATE = ("Rewrite this video prompt so that it keeps its meaning but adds one new visual idea "
            "(camera, light, weather, style or motion).\nPrompt: {query}\nRewrites already written:\n{existing}\n"
            "Write one new rewrite that differs from those. Reply with the rewrite only.")


def rewrite_prompt(query: str, existing: list[str], template: str = TEMPLATE) -> str:
    """The policy's prompt for one more rewrite of ``query`` given the ones ``existing`` ("- " lines, or "none")."""
    lines = "\n".join(f"- {text}" for text in existing) if existing else "none"
    return template.format(query=query, existing=lines)


def _variant(query: str, kind: str, phrase: str) -> str:
    """``query`` with one factor phrase: camera phrases in front, the others after it; a capital first letter."""
    text = f"{phrase} {query}" if kind == "camera" else f"{query} {phrase}"
    return text[0].upper() + text[1:]


def curated_variants(query: str, seed: int) -> list[tuple[str, str]]:
    """The query's curated pool ``[(kind, variant)]``: one variant per factor kind, kinds in a seeded order."""
    rng = random.Random(f"grpokit/prompt_rewrites/variants/{seed}/{query}")
    kinds = list(FACTORS)
    rng.shuffle(kinds)
    return [(kind, _variant(query, kind, rng.choice(FACTORS[kind]))) for kind in kinds]


@TASKS.register("prompt_rewrites")
def prompt_rewrites(
    seed: int,
    n_train: int,
    n_heldout: int,
    *,
    shown: list[int] | None = None,
    template: str = TEMPLATE,
) -> TaskSplits:
    """Rewrite a video prompt so that it differs from the rewrites shown (DPP-GRPO's setting, arXiv 2511.20647).

    ``shown`` = [lo, hi]: how many curated variants a row shows as its reference set ``R_q``
    (uniform, per query; default [0, 3]; at most 4, so a fifth factor kind is left for the
    ``answer``). ``template`` formats ``{query}`` and ``{existing}``. 480 distinct queries.
    Pair with reward ``dpp`` (``reference: column``, ``embed: minilm``); preset ``dpp_rewrite``.
    """
    lo, hi = shown if shown is not None else (0, 3)
    if not 0 <= lo <= hi <= len(FACTORS) - 1:
        raise ValueError(f"task 'prompt_rewrites': option 'shown' must be [lo, hi] with 0 <= lo <= hi <= {len(FACTORS) - 1}, got {shown!r}")
    pairs = [(s, a) for s, actions in SUBJECTS.items() for a in actions]
    if n_train + n_heldout > len(pairs) * len(SETTINGS):
        raise ValueError(f"task 'prompt_rewrites' has {len(pairs) * len(SETTINGS)} distinct queries; "
                         f"n_train + n_heldout = {n_train + n_heldout}: lower data.n_train or data.n_heldout")

    def draw(rng: random.Random) -> dict:
        subject, action = rng.choice(pairs)
        query = f"{subject} {action} {rng.choice(SETTINGS)}"
        pool = curated_variants(query, seed)
        k = random.Random(f"grpokit/prompt_rewrites/shown/{seed}/{query}").randint(lo, hi)
        reference = [text for _, text in pool[:k]]
        return {"prompt": rewrite_prompt(query, reference, template), "query": query, "reference_set": reference,
                "answer": pool[k][1], "variants": [text for _, text in pool], "domain": pool[k][0],
                "task": "prompt_rewrites"}

    return _sample_splits("prompt_rewrites", seed, n_train, n_heldout, draw, enlarge="template")


@DEMONSTRATIONS.register("prompt_rewrite")
def prompt_rewrite(row: dict) -> str:
    """The SFT target of a ``prompt_rewrites`` row: the next curated variant, whose factor kind none shown has.

    DPP-GRPO's stage 1 (arXiv 2511.20647) fine-tunes on (prompt, diverse variant) pairs before
    GRPO; this is that pair for the generated task.
    """
    try:
        return str(row["answer"])
    except KeyError:
        raise ValueError("it has no 'answer' column (rows of task prompt_rewrites have one)") from None
