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
rewards read them), ``value`` (the correct option's text), ``working`` (its calculation), ``why``
(per option: "matches the calculation" or the error behind it), ``domain`` (the kind), ``task``.
Demonstration writer ``clinical_mcq_trace`` (preset ``crpo_sft``) turns a row into a worked answer.
The letter of the correct option is uniform over A–D (seeded shuffle).
"""

from __future__ import annotations

import random
import string
from typing import Callable

from grpokit.data.demonstrations import DEMONSTRATIONS
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
# A question kind: rng -> (question, unit, correct value, its working, [(distractor value, the error behind it)]).
Drawn = tuple[str, str, float, str, list[tuple[float, str]]]
Kind = Callable[[random.Random], Drawn]


def _weight_dose(rng: random.Random) -> Drawn:
    weight, per_kg = rng.randint(8, 95), rng.choice((2, 2.5, 4, 5, 7.5, 10, 12, 15, 20, 25))
    question = (f"A patient weighing {weight} kg is prescribed {rng.choice(DRUGS)} {per_kg:g} mg/kg "
                "as a single dose. What total dose should be given?")
    dose = weight * per_kg
    working = f"The dose is {weight} kg x {per_kg:g} mg/kg = {dose:g} mg."
    return question, "mg", dose, working, [(dose * 10, "is ten times too much (a decimal slip)"),
                                           (dose / 10, "is ten times too little (a decimal slip)"),
                                           (round(weight / 2.2) * per_kg, "reads the weight as pounds"),
                                           (weight + per_kg, "adds the dose to the weight instead of multiplying")]


def _tablets(rng: random.Random) -> Drawn:
    strength = rng.choice((5, 10, 20, 25, 50, 100, 125, 200, 250, 500))
    n = rng.choice((0.5, 1.5, 2, 2.5, 3, 4))
    dose = strength * n
    question = (f"The order is {rng.choice(DRUGS)} {dose:g} mg by mouth. Tablets contain {strength} mg each. "
                "How many tablets should be given?")
    working = f"The tablets are {dose:g} mg / {strength} mg = {n:g}."
    return question, "tablets", n, working, [(strength / dose, "divides the tablet strength by the dose (inverted)"),
                                             (n - 1, "is one tablet short"), (n + 1, "is one tablet too many"),
                                             (n * 2, "doubles the dose")]


def _liquid(rng: random.Random) -> Drawn:
    per_volume = rng.choice((2, 4, 5, 10))
    conc = rng.choice((20, 25, 40, 50, 100, 125, 200, 250))
    dose = conc * rng.choice((0.5, 1.5, 2, 2.5, 3, 4, 6))
    volume = dose / conc * per_volume
    question = (f"The order is {rng.choice(DRUGS)} {dose:g} mg. The vial contains {conc} mg in {per_volume} mL. "
                "How many mL should be drawn up?")
    working = f"The volume is {dose:g} mg / {conc} mg x {per_volume} mL = {round(volume, 2):g} mL."
    return question, "mL", volume, working, [(dose / conc, f"forgets the {per_volume} mL per vial"),
                                             (conc / dose * per_volume, "inverts the ratio"),
                                             (dose * per_volume / 100, "multiplies by the volume and drops the strength"),
                                             (volume * 10, "is ten times too much (a decimal slip)")]


def _infusion(rng: random.Random) -> Drawn:
    hours = rng.choice((2, 4, 6, 8, 10, 12, 24))
    rate = rng.choice((25, 40, 50, 75, 80, 100, 125, 150, 200))
    volume = rate * hours
    question = (f"{volume} mL of {rng.choice(FLUIDS)} is to be infused over {hours} hours. "
                "At what rate should the pump be set, in mL/h?")
    working = f"The rate is {volume} mL / {hours} h = {rate} mL/h."
    return question, "mL/h", rate, working, [(round(volume / (hours * 60), 1), "is a rate per minute, not per hour"),
                                             (volume * hours / 100, "multiplies the volume by the time"),
                                             (rate * 2, "halves the time"), (rate / 2, "doubles the time")]


KINDS: dict[str, Kind] = {"weight_dose": _weight_dose, "tablets": _tablets, "liquid": _liquid,
                          "infusion": _infusion}


def _fmt(value: float, unit: str) -> str:
    """``350 mg``, ``1.5 tablets``, ``1 tablet``, ``0.4 mL``: at most two decimals, no trailing zeros."""
    value = round(value, 2)
    return f"{value:g} {'tablet' if unit == 'tablets' and value == 1 else unit}"


def _options(rng: random.Random, unit: str, correct: float,
             errors: list[tuple[float, str]]) -> tuple[list[str], list[str], int]:
    """Four distinct option texts (the correct one and three error-model distractors), why each is right or wrong,
    and the correct index.

    Distractors equal to the correct text, non-positive or repeated are dropped; the first three
    left are kept (each kind supplies four, and ±25 % fill in should a draw leave fewer).
    """
    right = _fmt(correct, unit)
    why = {right: "matches the calculation"}
    for value, reason in errors + [(correct * 1.25, "is 25 % too much"), (correct * 0.75, "is 25 % too little")]:
        text = _fmt(value, unit)
        if value > 0 and text not in why and len(why) < 4:
            why[text] = reason
    texts = list(why)
    rng.shuffle(texts)
    return texts, [why[t] for t in texts], texts.index(right)


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
        question, unit, correct, working, errors = KINDS[kind](rng)
        texts, why, right = _options(rng, unit, correct, errors)
        lines = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, texts))
        return {"prompt": template.format(question=question, options=lines, format=response_format),
                "answer": LETTERS[right], "options": texts, "value": texts[right], "working": working,
                "why": why, "domain": kind, "task": "clinical_mcq"}

    return _sample_splits("clinical_mcq", seed, n_train, n_heldout, draw, enlarge="kinds")


@DEMONSTRATIONS.register("clinical_mcq_trace")
def clinical_mcq_trace(row: dict) -> str:
    """The worked answer of a ``clinical_mcq`` row: the calculation, why each option is right or wrong, the boxed letter.

    ``<think>`` holds the row's ``working`` and one sentence per option (its ``why``: the error
    behind a distractor), then "So the answer is X."; ``<answer>`` a summary and ``\\boxed{X}``.
    It scores the CRPO maximum (accuracy 1, format 1.5, faithfulness 1, every option discussed):
    the stand-in for the paper's distillation SFT before CRPO (Clinical-R1 starts from traces of
    a stronger model; here they are written from the generator's own arithmetic).
    """
    try:
        gold, options, why, working = row["answer"], row["options"], row["why"], row["working"]
    except KeyError as exc:
        raise ValueError(f"it has no {exc} column (rows of task clinical_mcq have one)") from None
    checks = " ".join(f"Option {letter} ({text}) {reason}." for letter, text, reason in zip(LETTERS, options, why))
    value = options[LETTERS.index(gold)]
    return (f"<think>{working} {checks} So the answer is {gold}.</think>\n"
            f"<answer>The answer is {value}, so \\boxed{{{gold}}}.</answer>")
