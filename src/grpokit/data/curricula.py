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

import random
from collections import deque
from typing import Any, Callable

from grpokit.data.text_hints import hint_leaks, reword_and_distract, worked_steps_hint  # noqa: F401 (re-exported)
from grpokit.data.trace_hints import ANSWER_CUE, TraceHints, TraceSampler
from grpokit.registry import Registry

CURRICULA = Registry(
    "curriculum",
    # reads_if: {option: (switch, values)}: an option read only under another option's value (refused at load
    #   otherwise, see Registry.switched_off)
    properties={"reads_if": None},
)

SOURCE_KEY = "source_prompt"
HintBuilder = Callable[[dict, float, random.Random], "str | None"]
Perturber = Callable[[dict, float, random.Random], "dict | None"]

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

    def data_problem(self, rows: list[dict], given: set[str]) -> str | None:
        """Why options ``given`` (the keys the config set) cannot act on the training ``rows``, as one line; None if they can."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


# --- difficulty-aware augmentation (DeepVideo-R1) --------------------------------------------


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


def _hook(value: Any, name: str) -> Callable | None:
    """A hook option: a callable, or from a config 'package.module:function' / 'path/file.py:function' (resolved here)."""
    if value is None or callable(value):
        return value
    from grpokit.plugins import import_object

    fn = import_object(value, f"data.curriculum_options.{name}")
    if not callable(fn):
        raise ValueError(f"data.curriculum_options.{name} {value!r} is not a function: name a function (row, fraction, rng)")
    return fn


_TRACE_OPTIONS = {"trace_samples": ("hint", ("trace",)), "answer_cue": ("hint", ("trace",)), "hint_builder": ("hint", ("method",))}


@CURRICULA.register("difficulty_augmentation", reads_if=_TRACE_OPTIONS)
class DifficultyAugmentation(Curriculum):
    """Hint prompts harder than recent ones, perturb easier ones: ΔR(x) = mean_{B_W} R̄ − R̄(x).

    DeepVideo-R1 §3.3 (Park et al., "DeepVideo-R1: Video Reinforcement Fine-Tuning via
    Difficulty-aware Regressive GRPO", arXiv 2506.07464). ``B_W`` holds the group means of the
    last ``window`` observed samples (W = 100, a count of samples); ``R̄(x)`` is prompt x's latest
    observed group mean (or an EMA with ``prompt_ema`` = α [inferred]). When the row is drawn:

    - ΔR > margin (hard): ``prompt + "\\n" + hint``, f = clip(|ΔR|/r_range, 0, 1). ``hint="trace"``
      (the paper's): the first ⌈f·n⌉ words of the reasoning in the policy's best of
      ``trace_samples`` answer-conditioned trajectories (:mod:`grpokit.data.trace_hints`; the
      trainer binds the policy through :meth:`bind_policy`); ``hint="method"`` (grpokit's
      [inferred]): ``hint_builder(row, f, rng)``, default :func:`modality_hint` (the worked
      method's first steps, or where to look in an image / clip). A hint that :func:`hint_leaks`
      the gold answer's digits is refused (row unchanged, counted in ``hint_refused``); a row
      without one (no reasoning before the answer, no method) is counted in ``hint_unavailable``;
    - ΔR < −margin (easy): ``perturber(row, f, rng)`` (a changed copy, same "answer"; default
      :func:`modality_perturber`: reworded with distractors, or frames with Gaussian noise);
    - otherwise, or for a prompt never observed or before ``min_buffer`` samples: unchanged.

    ``margin`` (default 1e-6, absorbs float error) and ``min_buffer`` (at most ``window``) are [inferred].
    ``hint_builder`` / ``perturber``: a callable, or in a config ``'package.module:function'`` /
    ``'path/file.py:function'``; ``hint_builder`` is read with ``hint="method"`` only.
    ``measure_augmented=False`` credits only unaugmented observations to R̄(x) (the paper
    measures the original prompt each step, which draw-time augmentation cannot) [inferred].
    ``trace_samples`` (8, the paper's G [inferred]) and ``answer_cue`` ("The answer is
    {answer}." [inferred]) shape the trace hint. Metrics: ``hinted`` / ``perturbed`` count the
    rows of the current step's draw (for video rows a perturbation is frame noise),
    ``hinted_total`` / ``perturbed_total`` the whole run; ``unchanged``, ``hint_unavailable``,
    ``hint_refused`` are run totals.
    """

    def __init__(
        self,
        window: int = 100,
        r_range: float = 1.0,
        margin: float = 1e-6,
        min_buffer: int = 1,
        prompt_ema: float | None = None,
        measure_augmented: bool = True,
        hint: str = "trace",
        trace_samples: int = 8,
        answer_cue: str = ANSWER_CUE,
        hint_builder: HintBuilder | None = None,
        perturber: Perturber | None = None,
    ) -> None:
        if hint not in ("trace", "method"):
            raise ValueError(f"curriculum 'difficulty_augmentation': hint must be 'trace' or 'method', got {hint!r}")
        if hint == "trace" and hint_builder is not None:
            raise ValueError("curriculum 'difficulty_augmentation': a hint_builder builds hint='method' hints; "
                             "pass hint='method' with it (hint='trace' cuts the policy's own traces)")
        if window < 1:
            raise ValueError(f"curriculum 'difficulty_augmentation': window must be >= 1, got {window}")
        if min_buffer > window:  # the buffer holds at most `window` samples: no row would ever be augmented
            raise ValueError(f"curriculum 'difficulty_augmentation': min_buffer {min_buffer} exceeds window {window}, so no row "
                             "would ever be hinted or perturbed: set min_buffer <= window")
        if r_range <= 0:
            raise ValueError(f"curriculum 'difficulty_augmentation': r_range must be > 0, got {r_range}")
        if prompt_ema is not None and not 0 < prompt_ema <= 1:
            raise ValueError(
                f"curriculum 'difficulty_augmentation': prompt_ema must be in (0, 1] or null, got {prompt_ema}"
            )
        self.window, self.r_range, self.margin = window, r_range, margin
        self.min_buffer, self.prompt_ema = min_buffer, prompt_ema
        self.measure_augmented = measure_augmented
        self.hint = hint
        self.traces = TraceHints(trace_samples, answer_cue) if hint == "trace" else None
        self.hint_builder = _hook(hint_builder, "hint_builder") or modality_hint
        self.perturber = _hook(perturber, "perturber") or modality_perturber
        self.buffer: deque[float] = deque(maxlen=window)
        self.difficulty: dict[str, float] = {}  # prompt -> R̄(x)
        self.counts = {"hinted": 0, "perturbed": 0, "unchanged": 0, "hint_unavailable": 0, "hint_refused": 0}
        self.step_counts = {"hinted": 0, "perturbed": 0}  # rows of the current step's draw
        self._new_step = True  # the next transform starts a step's draw (observe ends one)

    def bind_policy(self, sampler: TraceSampler) -> None:
        """Give the trace hints the run's answer-conditioned sampler (the trainer calls this)."""
        if self.traces is not None:
            self.traces.bind(sampler)

    def observe(self, rows: list[dict], group_accuracy: list[float]) -> None:
        _check_lengths(rows, group_accuracy)
        self._new_step = True
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
        if self._new_step:
            self.step_counts = {"hinted": 0, "perturbed": 0}
            self._new_step = False
        deltas = [self.delta(row) for row in rows]
        hard = [i for i, d in enumerate(deltas) if d is not None and d > self.margin and rows[i].get("answer") is not None]
        traced = {}
        if self.traces is not None:  # one sampling call for the step's too-hard rows
            hints = self.traces([rows[i] for i in hard], [min(deltas[i] / self.r_range, 1.0) for i in hard])
            traced = dict(zip(hard, hints))
        return [self._augment(row, delta, rng, traced.get(i)) for i, (row, delta) in enumerate(zip(rows, deltas))]

    def _augment(self, row: dict, delta: float | None, rng: random.Random, traced: str | None) -> dict:
        if delta is None or abs(delta) <= self.margin:
            self.counts["unchanged"] += 1
            return row
        fraction = min(abs(delta) / self.r_range, 1.0)
        key = prompt_key(row)
        if delta > 0:
            hint = traced if self.traces is not None else self.hint_builder(row, fraction, rng)
            if not hint:
                self.counts["hint_unavailable"] += 1
                return row
            if hint_leaks(hint, row.get("answer"), row["prompt"]):
                self.counts["hint_refused"] += 1
                return row
            self._count("hinted")
            return {**row, "prompt": f"{row['prompt']}\n{hint}", SOURCE_KEY: key}
        harder = self.perturber(row, fraction, rng)
        if harder is None:
            self.counts["unchanged"] += 1
            return row
        self._count("perturbed")
        return {**harder, SOURCE_KEY: key}

    def _count(self, what: str) -> None:
        self.counts[what] += 1
        self.step_counts[what] += 1

    def metrics(self) -> dict[str, float]:
        mean = self.buffer_mean()
        out = {name: float(n) for name, n in self.counts.items()}
        out["hinted_total"], out["perturbed_total"] = out["hinted"], out["perturbed"]
        out.update({name: float(n) for name, n in self.step_counts.items()})  # this step's draw
        out["buffer_mean"] = float("nan") if mean is None else mean
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": list(self.buffer), "difficulty": dict(self.difficulty), "counts": dict(self.counts),
                "step_counts": dict(self.step_counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer = deque(state["buffer"], maxlen=self.window)
        self.difficulty = dict(state["difficulty"])
        self.counts = {**self.counts, **state["counts"]}
        self.step_counts = {**self.step_counts, **state.get("step_counts", {})}


# --- pass-rate filtering (INTELLECT-2) -------------------------------------------------------


@CURRICULA.register("pass_rate_filter", reads_if={"min_observations": ("online", (True,))})
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

    def data_problem(self, rows: list[dict], given: set[str]) -> str | None:
        """The offline options set when no training row has a precomputed pass rate (they would filter nothing)."""
        offline = sorted(given & {"low", "high", "keep_unknown", "pass_rates", "pass_rate_column"})
        if not offline or not rows or any(self.offline_rate(row) is not None for row in rows):
            return None
        return (f"data.curriculum_options.{offline[0]} filters by a precomputed pass rate, and none of the {len(rows)} training "
                f"rows has one (no '{self.pass_rate_column}' column, no prompt of pass_rates): add the column, fix pass_rates / "
                f"pass_rate_column, or remove {', '.join(offline)}")

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
