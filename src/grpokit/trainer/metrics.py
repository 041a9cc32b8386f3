"""Run outputs: metrics and samples as JSONL, optional TensorBoard, rich tables."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

log = logging.getLogger(__name__)


def reward_metrics(scores: Any, correct: Any) -> dict[str, float]:
    """Per-step reward statistics: the combined reward, each reward column (NaN = not scored), failures, accuracy.

    scores: a ``Scores`` (``total [B]``, ``per_reward`` name -> ``[B]``, ``failures``); correct: ``[B]`` bool.
    """
    m = {"reward/mean": float(scores.total.mean()), "reward/std": float(scores.total.std())}
    for name, values in scores.per_reward.items():
        valid = values[~values.isnan()]
        m[f"reward/{name}/mean"] = float(valid.mean()) if len(valid) else float("nan")
        m[f"reward/{name}/std"] = float(valid.std()) if len(valid) > 1 else 0.0
    for name, count in scores.failures.items():
        m[f"reward/{name}/failures"] = float(count)
    m["accuracy"] = float(correct.float().mean())
    return m


def sample_records(batch: Any, scores: Any, adv: Any, n: int) -> list[dict[str, Any]]:
    """One logged completion (prompt, completion, rewards, advantage) from each of the first ``n`` groups."""
    first = [int((batch.group_ids == g).nonzero()[0]) for g in range(min(n, int(batch.group_ids.max()) + 1))]
    return [
        {
            "prompt": batch.prompts[i],
            "completion": batch.completions[i],
            "rewards": {k: float(v[i]) for k, v in scores.per_reward.items()},
            "advantage": float(adv[i]),
        }
        for i in first
    ]


class RunLogger:
    """Appends one JSON line per step to ``metrics.jsonl`` and sampled completions to ``samples.jsonl``."""

    def __init__(self, run_dir: Path, tensorboard: bool = False, console: Optional[Console] = None) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.console = console or Console(stderr=True)
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:
                log.warning("logging.tensorboard is on but tensorboard is not installed: pip install tensorboard")

    def _append(self, name: str, record: dict[str, Any]) -> None:
        with open(self.run_dir / name, "a") as f:
            f.write(json.dumps(record) + "\n")

    def truncate_after(self, step: int) -> None:
        """Drop records of steps > ``step`` (a resumed run rewrites them; -1: a fresh run in a used folder)."""
        for name in ("metrics.jsonl", "samples.jsonl", "eval.jsonl"):
            path = self.run_dir / name
            if path.exists():
                keep = [l for l in path.read_text().splitlines() if l and json.loads(l).get("step", 0) <= step]
                path.write_text("".join(l + "\n" for l in keep))

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._append("metrics.jsonl", {"step": step, **metrics})
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)

    def log_eval(self, step: int, label: str, result: dict[str, float]) -> None:
        self._append("eval.jsonl", {"step": step, "label": label, "split": "heldout", **result})
        if self.writer is not None:
            self.writer.add_scalar("eval/accuracy", result["accuracy"], step)

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for s in samples:
            self._append("samples.jsonl", {"step": step, **s})

    def print_samples_table(self, step: int, samples: list[dict[str, Any]], reward_names: list[str]) -> None:
        table = Table(title=f"step {step}: sampled completions", show_lines=True)
        table.add_column("prompt", overflow="fold", max_width=40)
        table.add_column("completion", overflow="fold", max_width=60)
        for name in reward_names:
            table.add_column(name, justify="right")
        table.add_column("adv", justify="right")
        for s in samples:
            rewards = [f"{s['rewards'][n]:.2f}" if s["rewards"][n] == s["rewards"][n] else "-" for n in reward_names]
            table.add_row(s["prompt"], s["completion"], *rewards, f"{s['advantage']:+.2f}")
        self.console.print(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
