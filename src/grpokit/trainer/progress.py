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
