"""Stateful prompt-selection rules (curricula): hint hard prompts, perturb easy ones, filter.

Every rule is a class registered in ``CURRICULA`` with one small interface:

- ``observe(rows, group_accuracy)``: after a step, each drawn row with its group's mean
  correctness ``R̄ ∈ [0, 1]``;
- ``transform(rows, rng) -> rows``: when rows are drawn; may return changed copies (a changed
  row keeps its original prompt in ``row["source_prompt"]``, so later observations are credited
  to the original prompt);
- ``keep(row) -> bool``: whether a row may be drawn at all (filtering);
- ``metrics() -> dict[str, float]``: cumulative counts for logging;
- ``state_dict()`` / ``load_state_dict(state)``: JSON-serialisable state for resuming.

Rows are identified by their original "prompt" text (``prompt_key``).
"""

from __future__ import annotations

import math
import random
import re
from collections import deque
from typing import Any, Callable

from grpokit.registry import Registry

CURRICULA = Registry("curriculum")

SOURCE_KEY = "source_prompt"
HintBuilder = Callable[[dict, float, random.Random], "str | None"]
Perturber = Callable[[dict, float, random.Random], "dict | None"]

_INTEGER = re.compile(r"^\s*(-?)(\d+)\s*$")
_ARITHMETIC = re.compile(r"^What is (-?\d+) ([+\-*]) (-?\d+)\?$")
_REWORDINGS = {
    "+": ("Add {b} to {a}. What number do you get?", "Compute the sum of {a} and {b}."),
    "-": ("Subtract {b} from {a}. What number do you get?", "Compute {a} minus {b}."),
    "*": ("Multiply {a} by {b}. What number do you get?", "Compute the product of {a} and {b}."),
}


def prompt_key(row: dict) -> str:
    """The original prompt of ``row`` (before any curriculum changed it), with its ``id`` when it has one.

    The id matters for rows whose question text repeats over different images or clips (the
    ``vision_qa`` / ``video_qa`` tasks): each row is its own prompt.
    """
    if SOURCE_KEY in row:
        return row[SOURCE_KEY]
    return f"{row['prompt']}#{row['id']}" if "id" in row else row["prompt"]


def _check_lengths(rows: list[dict], group_accuracy: list[float]) -> None:
    if len(rows) != len(group_accuracy):
        raise ValueError(
            f"curriculum observe: got {len(rows)} rows but {len(group_accuracy)} group "
            f"accuracies; pass one group mean per drawn row"
        )


class Curriculum:
    """Base rule: draws every row unchanged; subclasses override what they need."""

    def observe(self, rows: list[dict], group_accuracy: list[float]) -> None:
        _check_lengths(rows, group_accuracy)

    def transform(self, rows: list[dict], rng: random.Random) -> list[dict]:
        return rows

    def keep(self, row: dict) -> bool:
        return True

    def select(self, rows: list[dict]) -> list[dict]:
        """The rows that ``keep`` admits (e.g. to filter a whole training set up front)."""
        return [row for row in rows if self.keep(row)]

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


# --- difficulty-aware augmentation (DeepVideo-R1) --------------------------------------------


_DIGIT_RUN = re.compile(r"\d+")
_ARITHMETIC_ANYWHERE = re.compile(r"(?<![\d.])(-?\d+) ([+\-*]) (-?\d+)(?![\d.])")
_METHOD_STEPS = {  # worked method of each operator: words and the question's operands, never a computed number
    ("+", 1): ("Start at {a}.", "Count up {b} more, one at a time."),
    ("-", 1): ("Start at {a}.", "Count down {b}, one at a time."),
    ("*", 1): ("{a} * {b} means {b} copies of {a} added together.", "Add the copies one at a time, keeping a running total."),
    ("+", 2): ("Add the ones digits of {a} and {b} first.",
               "If that sum is ten or more, keep its ones digit and carry one to the tens.",
               "Then add the tens digits of {a} and {b}, plus any carry."),
    ("-", 2): ("Subtract the ones digit of {b} from the ones digit of {a} first.",
               "If it does not fit, borrow one ten from {a}.",
               "Then subtract the tens digits, minus any borrowed ten."),
    ("*", 2): ("Split {b} into its tens and its ones.", "Multiply {a} by each part.", "Add the two products."),
}
_TASK_STEPS = {
    "sorting": ("Find the smallest of the numbers first.", "Write it down, cross it out, and repeat with the rest.",
                "Separate the sorted numbers with commas."),
    "countdown": ("Look for two of the numbers whose sum, difference or product gets close to the target.",
                  "Then combine that result with the numbers that are left.",
                  "Use every number at most once and check the value of the whole expression."),
}


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


def hint_leaks(hint: str, answer: Any, question: str) -> bool:
    """True when ``hint`` reveals anything of the gold ``answer``'s digits beyond the question itself.

    The rule (both parts must hold for a safe hint): (1) every number written in the hint is a
    number of the question (no intermediate results, no leading digits, no digit counts);
    (2) the answer's digit string D (sign and separators dropped, e.g. "42" for 42, "123" for
    "1, 2, 3") is not a substring of the hint's digit sequence (all its digits in order, other
    characters removed), so D cannot appear even across adjacent operands ("14 + 28" reads
    "1428", which holds "42"). A hint is not checked against an answer without digits.
    """
    allowed = set(_DIGIT_RUN.findall(question))
    if any(run not in allowed for run in _DIGIT_RUN.findall(hint)):
        return True
    gold = _digits(str(answer)) if answer is not None else ""
    return bool(gold) and gold in _digits(hint)


def worked_steps_hint(row: dict, fraction: float, rng: random.Random) -> str | None:
    """A hint: the first ``k = clip(ceil(fraction·n), 1, n)`` steps of the task's worked method.

    Stand-in for the paper's hint (DeepVideo-R1 §3.3: a prefix of the best reasoning trace the
    model writes with the gold answer in view) [inferred]: a fixed n-step method per task —
    arithmetic "a op b" (single-digit operands: counting; larger ones: column steps), sorting
    and countdown — that grows with |ΔR| and never states a computed number, so by
    construction it passes :func:`hint_leaks`. When the question's operands would spell the
    answer's digits (``14 + 28`` = 42), the operands are named in words instead. None for a row
    of another task (the curriculum counts it as ``hint_unavailable``).
    """
    prompt = row["prompt"]
    match = _ARITHMETIC_ANYWHERE.search(prompt)
    steps: tuple[str, ...] | None = None
    operands: tuple[str, str] = ("", "")
    if match and row.get("task", "arithmetic") == "arithmetic":
        a, op, b = match.groups()
        width = 1 if max(len(a.lstrip("-")), len(b.lstrip("-"))) == 1 else 2
        steps, operands = _METHOD_STEPS[(op, width)], (a, b)
    elif row.get("task") in _TASK_STEPS:
        steps = _TASK_STEPS[row["task"]]
    if steps is None:
        return None
    k = min(max(math.ceil(fraction * len(steps)), 1), len(steps))
    for a, b in (operands, ("the first number", "the second number")):
        hint = "Hint: " + " ".join(step.format(a=a, b=b) for step in steps[:k])
        if not hint_leaks(hint, row.get("answer"), prompt):
            return hint
    return None


def reword_and_distract(
    row: dict, strength: float, rng: random.Random, max_distractors: int = 3
) -> dict | None:
    """A harder copy of ``row``: same answer, reworded question plus irrelevant numbers.

    A prompt of the arithmetic task's default form "What is a op b?" is reworded (same operands,
    so "answer" stays valid); every prompt gets ``ceil(strength·max_distractors)`` irrelevant
    numbers appended — the text analogue of the paper's noise whose scale grows with |ΔR|
    [inferred]. Never changes "answer".
    """
    prompt = row["prompt"]
    match = _ARITHMETIC.match(prompt.strip())
    if match:
        a, op, b = match.groups()
        prompt = rng.choice(_REWORDINGS[op]).format(a=a, b=b)
    n = math.ceil(min(max(strength, 0.0), 1.0) * max_distractors)
    if n > 0:
        noise = ", ".join(str(rng.randint(1, 99)) for _ in range(n))
        prompt = f"{prompt} (Ignore these unrelated numbers: {noise}.)"
    return {**row, "prompt": prompt}


def modality_hint(row: dict, fraction: float, rng: random.Random) -> str | None:
    """Rows with images or video: a where-to-look hint (``grpokit.families.vision_lm.tasks.visual_hint``); text rows: :func:`worked_steps_hint`."""
    from grpokit.data.chat import is_visual
    from grpokit.families.vision_lm.tasks import visual_hint

    return visual_hint(row, fraction, rng) if is_visual(row) else worked_steps_hint(row, fraction, rng)


def modality_perturber(row: dict, strength: float, rng: random.Random) -> dict | None:
    """Rows with images or video: Gaussian frame noise (``noisy_frames_copy``); text rows: :func:`reword_and_distract`."""
    from grpokit.data.chat import is_visual
    from grpokit.families.vision_lm.tasks import noisy_frames_copy

    return noisy_frames_copy(row, strength, rng) if is_visual(row) else reword_and_distract(row, strength, rng)


@CURRICULA.register("difficulty_augmentation")
class DifficultyAugmentation(Curriculum):
    """Hint prompts harder than recent ones, perturb easier ones: ΔR(x) = mean_{B_W} R̄ − R̄(x).

    DeepVideo-R1 §3.3 (Park et al., "DeepVideo-R1: Video Reinforcement Fine-Tuning via
    Difficulty-aware Regressive GRPO", arXiv 2506.07464). ``B_W`` holds the group means of the
    last ``window`` observed samples (W = 100, a count of samples); ``R̄(x)`` is prompt x's latest
    observed group mean (or an EMA with ``prompt_ema`` = α [inferred]). When the row is drawn:

    - ΔR > margin (hard): ``prompt + "\\n" + hint_builder(row, f, rng)``, f = clip(|ΔR|/r_range, 0, 1)
      (default :func:`modality_hint`: the worked method's first steps, or where to look in an
      image / clip); a hint that :func:`hint_leaks` the gold answer's digits, from any builder,
      is refused (row unchanged, counted in ``hint_refused``);
    - ΔR < −margin (easy): ``perturber(row, f, rng)`` (a changed copy, same "answer"; default
      :func:`modality_perturber`: reworded with distractors, or frames with Gaussian noise);
    - otherwise, or for a prompt never observed or before ``min_buffer`` samples: unchanged.

    ``margin`` (default 1e-6, absorbs float error) and ``min_buffer`` are [inferred].
    ``measure_augmented=False`` credits only unaugmented observations to R̄(x) (the paper
    measures the original prompt each step, which draw-time augmentation cannot) [inferred].
    """

    def __init__(
        self,
        window: int = 100,
        r_range: float = 1.0,
        margin: float = 1e-6,
        min_buffer: int = 1,
        prompt_ema: float | None = None,
        measure_augmented: bool = True,
        hint_builder: HintBuilder | None = None,
        perturber: Perturber | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"curriculum 'difficulty_augmentation': window must be >= 1, got {window}")
        if r_range <= 0:
            raise ValueError(f"curriculum 'difficulty_augmentation': r_range must be > 0, got {r_range}")
        if prompt_ema is not None and not 0 < prompt_ema <= 1:
            raise ValueError(
                f"curriculum 'difficulty_augmentation': prompt_ema must be in (0, 1] or null, got {prompt_ema}"
            )
        self.window, self.r_range, self.margin = window, r_range, margin
        self.min_buffer, self.prompt_ema = min_buffer, prompt_ema
        self.measure_augmented = measure_augmented
        self.hint_builder = hint_builder or modality_hint
        self.perturber = perturber or modality_perturber
        self.buffer: deque[float] = deque(maxlen=window)
        self.difficulty: dict[str, float] = {}  # prompt -> R̄(x)
        self.counts = {"hinted": 0, "perturbed": 0, "unchanged": 0, "hint_unavailable": 0, "hint_refused": 0}

    def observe(self, rows: list[dict], group_accuracy: list[float]) -> None:
        _check_lengths(rows, group_accuracy)
        for row, acc in zip(rows, group_accuracy):
            acc = float(acc)
            self.buffer.append(acc)
            if SOURCE_KEY in row and not self.measure_augmented:
                continue
            key = prompt_key(row)
            prev = self.difficulty.get(key)
            alpha = self.prompt_ema
            self.difficulty[key] = acc if prev is None or alpha is None else alpha * acc + (1 - alpha) * prev

    def buffer_mean(self) -> float | None:
        return sum(self.buffer) / len(self.buffer) if self.buffer else None

    def delta(self, row: dict) -> float | None:
        """ΔR(x) for ``row``; None while it cannot be computed (unseen prompt or short buffer)."""
        own = self.difficulty.get(prompt_key(row))
        if own is None or len(self.buffer) < self.min_buffer:
            return None
        return self.buffer_mean() - own

    def transform(self, rows: list[dict], rng: random.Random) -> list[dict]:
        return [self._augment(row, rng) for row in rows]

    def _augment(self, row: dict, rng: random.Random) -> dict:
        delta = self.delta(row)
        if delta is None or abs(delta) <= self.margin:
            self.counts["unchanged"] += 1
            return row
        fraction = min(abs(delta) / self.r_range, 1.0)
        key = prompt_key(row)
        if delta > 0:
            hint = self.hint_builder(row, fraction, rng)
            if not hint:
                self.counts["hint_unavailable"] += 1
                return row
            if hint_leaks(hint, row.get("answer"), row["prompt"]):
                self.counts["hint_refused"] += 1
                return row
            self.counts["hinted"] += 1
            return {**row, "prompt": f"{row['prompt']}\n{hint}", SOURCE_KEY: key}
        harder = self.perturber(row, fraction, rng)
        if harder is None:
            self.counts["unchanged"] += 1
            return row
        self.counts["perturbed"] += 1
        return {**harder, SOURCE_KEY: key}

    def metrics(self) -> dict[str, float]:
        mean = self.buffer_mean()
        out = {name: float(n) for name, n in self.counts.items()}
        out["buffer_mean"] = float("nan") if mean is None else mean
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": list(self.buffer), "difficulty": dict(self.difficulty), "counts": dict(self.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer = deque(state["buffer"], maxlen=self.window)
        self.difficulty = dict(state["difficulty"])
        self.counts = {**self.counts, **state["counts"]}


# --- pass-rate filtering (INTELLECT-2) -------------------------------------------------------


@CURRICULA.register("pass_rate_filter")
class PassRateFilter(Curriculum):
    """Keep prompts whose pass rate p is in [low, high] (offline) and not stuck at 0 or 1 (online).

    INTELLECT-2 (Prime Intellect, "INTELLECT-2: A Reasoning Model Trained Through Globally
    Decentralized Reinforcement Learning", arXiv 2505.07291): offline, prompts whose
    precomputed solve rate lies outside [0.1, 0.8] are dropped. The precomputed rate comes from
    ``pass_rates`` (prompt -> p) or the row's ``pass_rate_column``; rows with no known rate are
    kept unless ``keep_unknown=False``. Online, a prompt whose observed group means are all 0
    (hard) or all 1 (easy) after ``min_observations`` observations is dropped from later draws —
    a per-prompt persistent form of INTELLECT-2's zero-advantage filter [inferred]
    (``min_observations`` = 2 [inferred]; ``online=False`` turns it off).
    Metrics count distinct prompts: ``dropped_easy``/``dropped_hard`` (offline + online) and
    ``dropped_offline``/``dropped_online``.
    """

    def __init__(
        self,
        low: float = 0.1,
        high: float = 0.8,
        pass_rates: dict[str, float] | None = None,
        pass_rate_column: str | None = "pass_rate",
        keep_unknown: bool = True,
        online: bool = True,
        min_observations: int = 2,
    ) -> None:
        if not 0 <= low <= high <= 1:
            raise ValueError(f"curriculum 'pass_rate_filter': need 0 <= low <= high <= 1, got low={low}, high={high}")
        if min_observations < 1:
            raise ValueError(
                f"curriculum 'pass_rate_filter': min_observations must be >= 1, got {min_observations}"
            )
        self.low, self.high = low, high
        self.pass_rates = dict(pass_rates or {})
        self.pass_rate_column = pass_rate_column
        self.keep_unknown, self.online, self.min_observations = keep_unknown, online, min_observations
        self.observed: dict[str, list[float]] = {}  # prompt -> [n observations, sum of group means]
        self.dropped: dict[str, dict[str, str]] = {"offline": {}, "online": {}}  # prompt -> easy|hard

    def offline_rate(self, row: dict) -> float | None:
        key = prompt_key(row)
        if key in self.pass_rates:
            return float(self.pass_rates[key])
        column = self.pass_rate_column
        if column and row.get(column) is not None:
            return float(row[column])
        return None

    def observe(self, rows: list[dict], group_accuracy: list[float]) -> None:
        _check_lengths(rows, group_accuracy)
        for row, acc in zip(rows, group_accuracy):
            seen = self.observed.setdefault(prompt_key(row), [0, 0.0])
            seen[0] += 1
            seen[1] += float(acc)

    def online_rate(self, row: dict) -> float | None:
        """Mean observed group accuracy of the prompt; None before any observation."""
        seen = self.observed.get(prompt_key(row))
        return None if not seen else seen[1] / seen[0]

    def keep(self, row: dict) -> bool:
        key = prompt_key(row)
        rate = self.offline_rate(row)
        if rate is None and not self.keep_unknown:
            return False
        if rate is not None and not self.low <= rate <= self.high:
            self.dropped["offline"][key] = "easy" if rate > self.high else "hard"
            return False
        seen = self.observed.get(key)
        if self.online and seen and seen[0] >= self.min_observations:
            mean = seen[1] / seen[0]
            if mean <= 1e-9 or mean >= 1 - 1e-9:
                self.dropped["online"][key] = "easy" if mean > 0.5 else "hard"
                return False
        return True

    def metrics(self) -> dict[str, float]:
        both = {**self.dropped["offline"], **self.dropped["online"]}
        return {
            "dropped_easy": float(sum(v == "easy" for v in both.values())),
            "dropped_hard": float(sum(v == "hard" for v in both.values())),
            "dropped_offline": float(len(self.dropped["offline"])),
            "dropped_online": float(len(self.dropped["online"])),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "observed": {k: list(v) for k, v in self.observed.items()},
            "dropped": {k: dict(v) for k, v in self.dropped.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.observed = {k: [int(v[0]), float(v[1])] for k, v in state["observed"].items()}
        self.dropped = {k: dict(v) for k, v in state["dropped"].items()}
