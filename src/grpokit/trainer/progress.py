"""A rich progress bar for training steps (step, reward, accuracy, KL, seconds/step) and its ETA."""

from __future__ import annotations

import math
from time import monotonic

from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text


def eta_seconds(steps_left: int, step_s: float, budget_left_s: float = math.inf) -> float:
    """Seconds until the run ends: the earlier of its last step and its time budget (``train.max_minutes``).

        eta = step_s * min(steps_left, ceil(budget_left_s / step_s))

    ``step_s``: mean wall seconds per step so far (mid-run evaluations and checkpoints included,
    as the budget counts them). The loop starts a step while its clock is under the budget and
    always finishes it, so the budget allows ``ceil(budget_left / step_s)`` more steps; a spent
    budget (``budget_left_s <= 0``) allows none. ``budget_left_s = inf``: no budget. Before any
    step is measured (``step_s <= 0``) the budget alone bounds it (inf: unknown).
    """
    if steps_left <= 0 or budget_left_s <= 0:
        return 0.0
    if step_s <= 0:  # no step measured yet: only the budget bounds the end
        return budget_left_s
    by_budget = math.ceil(budget_left_s / step_s) if math.isfinite(budget_left_s) else steps_left
    return step_s * min(steps_left, by_budget)


class _EtaColumn(ProgressColumn):
    """Time left until the run's end as :func:`eta_seconds` puts it (task field ``end_at``, a monotonic time)."""

    def render(self, task) -> Text:
        end_at = task.fields.get("end_at")
        if end_at is None or not math.isfinite(end_at):
            return Text("-:--:--", style="progress.remaining")
        left = int(max(end_at - monotonic(), 0.0))
        return Text(f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}", style="progress.remaining")


class StepProgress:
    """Context manager around rich.Progress; a no-op when disabled.

    ``budget_s``: the run's time budget in seconds (``train.max_minutes * 60``; inf = none) and
    ``elapsed_s`` the part of it already spent (a resumed run's), so the ETA is the earlier of the
    step-based and the budget end (:func:`eta_seconds`), not ``train.steps`` alone.
    """

    def __init__(self, total: int, enabled: bool = True, start: int = 0, budget_s: float = math.inf,
                 elapsed_s: float = 0.0) -> None:
        self.enabled = enabled
        self.total, self.start, self.budget_s, self.elapsed_s = total, start, budget_s, elapsed_s
        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            _EtaColumn(),
            disable=not enabled,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, stats="", end_at=None)
        self.t0 = monotonic()

    def __enter__(self) -> "StepProgress":
        self.t0 = monotonic()  # the loop's budget clock starts with the loop
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def update(self, step: int, m: dict[str, float]) -> None:
        if "reward/mean" in m or "loss" not in m:
            stats = f"reward {m.get('reward/mean', 0):.3f} acc {m.get('accuracy', 0):.2f}"
        else:  # an offline stage: its loss and, for preferences, the implicit-reward margin
            stats = f"loss {m['loss']:.4f}" + (f" margin {m['rewards/margins']:.3f}" if "rewards/margins" in m else "")
        if "kl" in m:
            stats += f" kl {m['kl']:.4f}"
        stats += f" {m.get('time/step_s', 0):.1f}s/step"
        now = monotonic()
        spent = now - self.t0
        step_s = spent / (step - self.start) if step > self.start else 0.0
        eta = eta_seconds(self.total - step, step_s, self.budget_s - self.elapsed_s - spent)
        self.progress.update(self.task, completed=step, stats=stats, end_at=now + eta)


class ItemProgress:
    """A rich bar for a count of items (synth records, edits): ``update(n)``, ``note(text)``, ``close()``.

    A no-op when disabled; the library's one progress style (STYLE: rich for progress).
    """

    def __init__(self, total: int, desc: str, *, initial: int = 0, enabled: bool = True) -> None:
        self.progress = Progress(TextColumn(f"[bold]{desc}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
                                 TimeElapsedColumn(), TimeRemainingColumn(), disable=not enabled)
        self.task = self.progress.add_task(desc, total=total, completed=initial, note="")
        self.progress.start()

    def update(self, n: int = 1) -> None:
        self.progress.advance(self.task, n)

    def note(self, text: str) -> None:
        self.progress.update(self.task, note=text)

    def close(self) -> None:
        self.progress.stop()
