"""Run outputs: metrics and samples as JSONL, experiment trackers (``logging.report_to``), rich tables.

``metrics.jsonl``, ``samples.jsonl`` and ``eval.jsonl`` are always written. ``logging.report_to``
adds trackers as TRL's ``report_to`` does, each behind the same two calls (``log``, ``close``):

- ``tensorboard``: ``torch.utils.tensorboard.SummaryWriter`` in ``<run>/tensorboard``.
- ``trackio``: local-first; its SQLite database goes to ``<run>/trackio`` (``TRACKIO_DIR``
  unless that is set already), project ``$TRACKIO_PROJECT`` or "grpokit", run = the run folder's
  name. It talks to a server only when ``TRACKIO_SPACE_ID`` / ``TRACKIO_SERVER_URL`` say so.
- ``wandb``: ``wandb.init(dir=<run>)``, project ``$WANDB_PROJECT`` or "grpokit"; set
  ``WANDB_MODE=offline`` to keep everything on disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text  # model and environment text, never read as rich markup

from grpokit.data.chat import prompt_text

log = logging.getLogger(__name__)

REPORT_TO = ("none", "tensorboard", "trackio", "wandb")
# backend -> (module that must be importable, pip command that installs it)
BACKEND_PACKAGES = {
    "tensorboard": ("tensorboard", "pip install 'grpokit[tensorboard]'"),
    "trackio": ("trackio", "pip install 'grpokit[tracking]'"),
    "wandb": ("wandb", "pip install 'grpokit[tracking]'"),
}


class ReportToError(ValueError):
    """``logging.report_to`` names an unknown tracker or one that is not installed (one line)."""


def report_backends(report_to: list[str], tensorboard: bool = False) -> list[str]:
    """The trackers a run logs to: ``report_to`` plus ``tensorboard`` for the old alias, checked.

    Raises ReportToError for an unknown name, for "none" next to a tracker, or for a tracker whose
    package is missing (with the pip command), so the run fails before it trains.
    """
    names = list(dict.fromkeys([*report_to, *(["tensorboard"] if tensorboard else [])]))
    unknown = [n for n in names if n not in REPORT_TO]
    if unknown:
        raise ReportToError(f"logging.report_to: unknown tracker {unknown[0]!r}; choose from {', '.join(REPORT_TO)}")
    if "none" in names and len(names) > 1:
        raise ReportToError("logging.report_to: 'none' cannot be combined with a tracker; give [] or the trackers")
    names = [n for n in names if n != "none"]
    for name in names:
        module, pip = BACKEND_PACKAGES[name]
        if not _installed(module):
            raise ReportToError(
                f"logging.report_to: {name!r} needs the {module} package, which is not installed: {pip} "
                f"(or drop {name} from logging.report_to)"
            )
    return names


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@contextlib.contextmanager
def _stdout_to_log(name: str):
    """Trackers print progress lines; send them to the log so stdout keeps only grpokit's summary."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    for line in buffer.getvalue().splitlines():
        if line.strip():
            log.info("%s: %s", name, line.strip())


class TensorBoardBackend:
    """Scalars to ``<run>/tensorboard`` (TensorBoard event files)."""

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class TrackioBackend:
    """A trackio run whose SQLite database lives in ``<run>/trackio`` (see the module docstring)."""

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        wanted = str((run_dir / "trackio").resolve())
        if "trackio" not in sys.modules:  # trackio reads TRACKIO_DIR once, at import
            os.environ.setdefault("TRACKIO_DIR", wanted)
        import trackio
        from trackio.utils import TRACKIO_DIR

        if str(TRACKIO_DIR) != wanted:
            log.info("trackio logs to %s (TRACKIO_DIR, or trackio was imported before this run)", TRACKIO_DIR)
        self.trackio = trackio
        with _stdout_to_log("trackio"):
            trackio.init(
                project=os.environ.get("TRACKIO_PROJECT", "grpokit"), name=run_dir.resolve().name, config=config,
                resume="allow", embed=False, auto_log_cpu=False, auto_log_gpu=False,
            )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.trackio.log(metrics, step=step)

    def close(self) -> None:
        with _stdout_to_log("trackio"):
            self.trackio.finish()


class WandbBackend:
    """A Weights & Biases run with its files in ``<run>/wandb`` (``WANDB_MODE=offline``: no network)."""

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "grpokit"), name=run_dir.resolve().name, dir=str(run_dir), config=config,
        )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


BACKENDS = {"tensorboard": TensorBoardBackend, "trackio": TrackioBackend, "wandb": WandbBackend}


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numeric entries of ``metrics`` (NaN = "not scored this step" stays in metrics.jsonl only)."""
    return {
        k: float(v) for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


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


def rollout_entropy(batch: Any) -> dict[str, float]:
    """``rollout/entropy``: token-mean entropy of the sampling distribution over every completion token of the step.

    H = sum_it m_it H_it / sum_it m_it with ``batch.entropy [B, T]`` (the tempered distribution the
    sampler drew from) and ``batch.unit_mask [B, T]`` (the sampled tokens; an episode's observation
    tokens were not sampled). Every sampled row counts, so it exists
    on every step; the learner's ``entropy`` covers only the rows it learned (none when every
    advantage is 0). Absent when the sampler records no entropy (vLLM).
    """
    if batch.entropy is None:
        return {}
    mask = batch.unit_mask.to(batch.entropy.dtype)
    return {"rollout/entropy": float((batch.entropy * mask).sum() / mask.sum().clamp(min=1))}


def sample_records(batch: Any, scores: Any, adv: Any, n: int) -> list[dict[str, Any]]:
    """One logged completion (prompt, completion, rewards, advantage) from each of the first ``n`` groups.

    An environment episode's record also holds its whole ``conversation`` (every message with its
    role: the system message, the first observation or the row's prompt, model turns and
    observations; :mod:`grpokit.envs.episodes`), and its ``prompt`` is the conversation's first user
    message (what the policy was shown, not an environment-only run's placeholder row text).
    """
    first = [int((batch.group_ids == g).nonzero()[0]) for g in range(min(n, int(batch.group_ids.max()) + 1))]
    records = []
    for i in first:
        record = {
            "prompt": batch.prompts[i],
            "completion": batch.completions[i],
            "rewards": {k: float(v[i]) for k, v in scores.per_reward.items()},
            "advantage": float(adv[i]),
        }
        if batch.episodes:
            episode = batch.episodes[i]
            conversation = episode.get("conversation") or episode.get("messages") or []
            record["conversation"] = conversation
            record["prompt"] = next((m["content"] for m in conversation if m.get("role") == "user"), record["prompt"])
            record["turns"] = episode.get("turns")
        records.append(record)
    return records


def conversation_text(conversation: list[dict[str, Any]]) -> str:
    """A conversation as one ``role: content`` line per message, for the printed sample table."""
    return "\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in conversation)


class RunLogger:
    """Appends one JSON line per step to ``metrics.jsonl`` and sampled completions to ``samples.jsonl``.

    ``report_to`` (checked by :func:`report_backends`) also sends every step's metrics and each
    evaluation (as ``eval/<key>``) to those trackers; ``config`` is the run's config as a dict.
    """

    backends: tuple = ()  # the trackers (a subclass that skips __init__ has none)

    def __init__(
        self, run_dir: Path, report_to: tuple[str, ...] = (), console: Optional[Console] = None,
        config: Optional[dict[str, Any]] = None,
    ) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.console = console or Console(stderr=True)
        names = report_backends(list(report_to))
        self.backends = tuple(BACKENDS[name](run_dir, config or {}) for name in names)

    @classmethod
    def for_run(cls, run_dir: Path, cfg: Any) -> "RunLogger":
        """The logger of a run: ``cfg.logging.report_to`` (and the ``tensorboard`` alias), the config sent along."""
        names = report_backends(cfg.logging.report_to, cfg.logging.tensorboard)
        return cls(run_dir, report_to=tuple(names), config=dataclasses.asdict(cfg))

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
        for backend in self.backends:
            backend.log(step, _numbers(metrics))

    def logged_eval(self, label: str) -> Optional[dict[str, Any]]:
        """The newest evaluation of ``label`` in eval.jsonl (a resumed run's 'before', measured by the run it continues), or None."""
        path = self.run_dir / "eval.jsonl"
        rows = [json.loads(l) for l in path.read_text().splitlines() if l] if path.exists() else []
        found = [r for r in rows if r.get("label") == label]
        return {k: v for k, v in found[-1].items() if k not in ("step", "label", "split")} if found else None

    def log_eval(self, step: int, label: str, result: dict[str, float]) -> None:
        self._append("eval.jsonl", {"step": step, "label": label, "split": "heldout", **result})
        for backend in self.backends:
            backend.log(step, _numbers({f"eval/{k}": v for k, v in result.items()}))

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for s in samples:
            self._append("samples.jsonl", {"step": step, **s})

    def print_samples_table(self, step: int, samples: list[dict[str, Any]], reward_names: list[str]) -> None:
        episodes = bool(samples) and all("conversation" in s for s in samples)
        table = Table(title=f"step {step}: sampled {'episodes' if episodes else 'completions'}", show_lines=True)
        if episodes:  # the whole conversation of each episode, every turn with its role
            table.add_column("conversation", overflow="fold", max_width=100)
        else:
            table.add_column("prompt", overflow="fold", max_width=40)
            table.add_column("completion", overflow="fold", max_width=60)
        for name in reward_names:
            table.add_column(name, justify="right")
        table.add_column("adv", justify="right")
        for s in samples:
            rewards = [f"{s['rewards'][n]:.2f}" if s["rewards"][n] == s["rewards"][n] else "-" for n in reward_names]
            text = [Text(conversation_text(s["conversation"]))] if episodes else [prompt_text(s["prompt"]), s["completion"]]
            table.add_row(*text, *rewards, f"{s['advantage']:+.2f}")
        self.console.print(table)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
        self.backends = ()
