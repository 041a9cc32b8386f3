"""A rich progress bar for training steps (step, reward, accuracy, KL, seconds/step)."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class StepProgress:
    """Context manager around rich.Progress; a no-op when disabled."""

    def __init__(self, total: int, enabled: bool = True, start: int = 0) -> None:
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            disable=not enabled,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, stats="")

    def __enter__(self) -> "StepProgress":
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
        self.progress.update(self.task, completed=step, stats=stats)


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
