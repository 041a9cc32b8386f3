"""Clinical dose-calculation multiple choice: four options A–D, one correct, error-model distractors.

Task ``clinical_mcq`` for CRPO (Gu et al., "Clinical-R1: Empowering Large Language Models for
Faithful and Comprehensive Reasoning with Clinical Objective Relative Policy Optimization",
arXiv 2512.00601), whose benchmarks (MedQA, MedMCQA, MedXpertQA) are multiple choice with a
gold option letter. Those sets do not ship with grpokit; this generator stands in with the
medication-calculation questions of nursing and pharmacy exams, which are procedurally
verifiable: the correct option is computed, and each distractor is the result of one named
calculation error a student makes (a decimal slip, an inverted ratio, a dropped factor, kg read
as lb, a rate per minute instead of per hour), so every distractor is plausible and none is a
random number.

Question kinds (``kinds`` option; the row's ``domain``):

- ``weight_dose``: total dose = weight (kg) × dose (mg/kg);
- ``tablets``: tablets = ordered dose / tablet strength;
- ``liquid``: volume (mL) = ordered dose / concentration (mg per V mL) × V;
- ``infusion``: rate (mL/h) = volume (mL) / time (h).

Rows: ``prompt`` (question, the options as ``A. …`` lines and the CRPO response format),
``answer`` (the gold letter), ``options`` (the four option texts in letter order, as the CRPO
rewards read them), ``value`` (the correct option's text), ``domain`` (the kind), ``task``.
The letter of the correct option is uniform over A–D (seeded shuffle).
"""

from __future__ import annotations

import random
import string
from typing import Callable

from grpokit.data.tasks import TASKS, TaskSplits, _sample_splits

LETTERS = string.ascii_uppercase[:4]
DRUGS = (
    "amoxicillin", "ceftriaxone", "gentamicin", "vancomycin", "paracetamol", "ibuprofen", "furosemide",
    "metronidazole", "azithromycin", "cefazolin", "clindamycin", "acyclovir",
)
FLUIDS = ("normal saline", "Ringer's lactate", "5% dextrose", "half-normal saline")
FORMAT = (
    "Think step by step inside <think> </think>, discussing each option. Then, inside "
    "<answer> </answer>, write a one-sentence summary and the letter of the correct option in "
    "\\boxed{}, e.g. <answer>The dose is 5 mL, so \\boxed{B}.</answer>"
)
PROMPT = "{question}\n{options}\n{format}"
# A question kind: rng -> (question, unit, correct value, [distractor values from error models]).
Kind = Callable[[random.Random], tuple[str, str, float, list[float]]]


def _weight_dose(rng: random.Random) -> tuple[str, str, float, list[float]]:
    weight, per_kg = rng.randint(8, 95), rng.choice((2, 2.5, 4, 5, 7.5, 10, 12, 15, 20, 25))
    question = (f"A patient weighing {weight} kg is prescribed {rng.choice(DRUGS)} {per_kg:g} mg/kg "
                "as a single dose. What total dose should be given?")
    dose = weight * per_kg
    # decimal slip ×10 and ÷10, kg read as lb (÷2.2), dose added to the weight
    return question, "mg", dose, [dose * 10, dose / 10, round(weight / 2.2) * per_kg, weight + per_kg]


def _tablets(rng: random.Random) -> tuple[str, str, float, list[float]]:
    strength = rng.choice((5, 10, 20, 25, 50, 100, 125, 200, 250, 500))
    n = rng.choice((0.5, 1.5, 2, 2.5, 3, 4))
    dose = strength * n
    question = (f"The order is {rng.choice(DRUGS)} {dose:g} mg by mouth. Tablets contain {strength} mg each. "
                "How many tablets should be given?")
    # inverted ratio, one tablet short / over, a doubled dose
    return question, "tablets", n, [strength / dose, n - 1, n + 1, n * 2]


def _liquid(rng: random.Random) -> tuple[str, str, float, list[float]]:
    per_volume = rng.choice((2, 4, 5, 10))
    conc = rng.choice((20, 25, 40, 50, 100, 125, 200, 250))
    dose = conc * rng.choice((0.5, 1.5, 2, 2.5, 3, 4, 6))
    volume = dose / conc * per_volume
    question = (f"The order is {rng.choice(DRUGS)} {dose:g} mg. The vial contains {conc} mg in {per_volume} mL. "
                "How many mL should be drawn up?")
    # the per-V-mL factor dropped, the ratio inverted, the volume multiplied instead of divided, a decimal slip
    return question, "mL", volume, [dose / conc, conc / dose * per_volume, dose * per_volume / 100, volume * 10]


def _infusion(rng: random.Random) -> tuple[str, str, float, list[float]]:
    hours = rng.choice((2, 4, 6, 8, 10, 12, 24))
    rate = rng.choice((25, 40, 50, 75, 80, 100, 125, 150, 200))
    volume = rate * hours
    question = (f"{volume} mL of {rng.choice(FLUIDS)} is to be infused over {hours} hours. "
                "At what rate should the pump be set, in mL/h?")
    # per minute instead of per hour, volume × time, half / double the time
    return question, "mL/h", rate, [round(volume / (hours * 60), 1), volume * hours / 100, rate * 2, rate / 2]


KINDS: dict[str, Kind] = {"weight_dose": _weight_dose, "tablets": _tablets, "liquid": _liquid,
                          "infusion": _infusion}


def _fmt(value: float, unit: str) -> str:
    """``350 mg``, ``1.5 tablets``, ``1 tablet``, ``0.4 mL``: at most two decimals, no trailing zeros."""
    value = round(value, 2)
    return f"{value:g} {'tablet' if unit == 'tablets' and value == 1 else unit}"


def _options(rng: random.Random, unit: str, correct: float, errors: list[float]) -> tuple[list[str], int]:
    """Four distinct option texts (the correct one and three error-model distractors) and the correct index.

    Distractors equal to the correct text, non-positive or repeated are dropped; the first three
    left are kept (each kind supplies four, and ±25 % fill in should a draw leave fewer).
    """
    right = _fmt(correct, unit)
    texts: list[str] = []
    for value in errors + [correct * 1.25, correct * 0.75]:
        text = _fmt(value, unit)
        if value > 0 and text != right and text not in texts:
            texts.append(text)
    texts = texts[:3] + [right]
    rng.shuffle(texts)
    return texts, texts.index(right)


@TASKS.register("clinical_mcq")
def clinical_mcq(
    seed: int,
    n_train: int,
    n_heldout: int,
    *,
    kinds: list[str] | None = None,
    template: str = PROMPT,
    response_format: str = FORMAT,
) -> TaskSplits:
    """Medication-calculation multiple choice (A–D); ``answer`` is the gold letter, ``options`` the texts.

    ``kinds``: a subset of weight_dose, tablets, liquid, infusion (default all; module docstring).
    ``template`` formats ``{question}``, ``{options}`` (``A. …`` lines) and ``{format}``
    (``response_format``: the CRPO ``<think>``/``<answer>``/``\\boxed{}`` instruction).
    Pair with the ``crpo_*`` rewards (preset ``crpo``).
    """
    names = list(KINDS) if kinds is None else list(kinds)
    bad = [k for k in names if k not in KINDS]
    if not names or bad:
        raise ValueError(f"task 'clinical_mcq': option 'kinds' must be a non-empty subset of {list(KINDS)}, got {kinds!r}")

    def draw(rng: random.Random) -> dict:
        kind = rng.choice(names)
        question, unit, correct, errors = KINDS[kind](rng)
        texts, right = _options(rng, unit, correct, errors)
        lines = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, texts))
        return {"prompt": template.format(question=question, options=lines, format=response_format),
                "answer": LETTERS[right], "options": texts, "value": texts[right], "domain": kind,
                "task": "clinical_mcq"}

    return _sample_splits("clinical_mcq", seed, n_train, n_heldout, draw, enlarge="kinds")
