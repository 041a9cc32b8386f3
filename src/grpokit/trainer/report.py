"""End-of-run report: ``report.md`` plus PNG plots, written from a run directory's JSONL logs.

Inputs, all inside ``run_dir``:

- ``metrics.jsonl``: one object per training step with ``step`` and ``reward/mean``; optional
  ``reward/<name>/mean``, ``kl``, ``completion_len/mean``, ``time/step_s``, ``time/elapsed_s``.
- ``eval.jsonl`` (optional): objects with ``step``, ``accuracy`` (a fraction in [0, 1]), ``n``,
  ``split`` (e.g. ``"heldout"``) and optionally ``label`` (``"before"`` / ``"during"`` /
  ``"after"``; ``"during"`` = the mid-run evaluations of ``eval.every``).
- ``config.yaml`` (optional): copied into the report verbatim.

Outputs: ``report.md``, ``plots/reward.png`` and, when there are evaluations,
``plots/accuracy.png``. Plots use matplotlib's Agg canvas through the object API (no pyplot), so
writing a report never changes the caller's matplotlib backend.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

Record = dict[str, Any]
HELDOUT = "heldout"
SUMMARY_STEPS = 5  # "first/last N steps" averages in the summary


class ReportError(ValueError):
    """A run directory that cannot be reported on; the message names the file and the fix."""


def write_report(run_dir: str | Path) -> Path:
    """Write ``run_dir/report.md`` and ``run_dir/plots/*.png``; returns the path of the report."""
    run_dir = Path(run_dir)
    metrics_file = run_dir / "metrics.jsonl"
    if not metrics_file.is_file():
        raise ReportError(
            f"{metrics_file} not found; pass the run directory the trainer wrote its metrics to"
        )
    metrics = sorted(read_jsonl(metrics_file), key=lambda r: r.get("step", 0))
    evals = read_jsonl(run_dir / "eval.jsonl") if (run_dir / "eval.jsonl").is_file() else []
    evals = [e for e in evals if _number(e.get("accuracy")) is not None]

    plots = run_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    images: list[tuple[str, str]] = []
    if any(_number(r.get("reward/mean")) is not None for r in metrics):
        plot_reward(metrics, plots / "reward.png")
        images.append(("Training reward", "plots/reward.png"))
    if evals:
        plot_accuracy(evals, plots / "accuracy.png")
        images.append(("Accuracy", "plots/accuracy.png"))

    config_file = run_dir / "config.yaml"
    config = config_file.read_text() if config_file.is_file() else None
    text = render_markdown(run_dir.name, metrics, evals, config, images)
    report = run_dir / "report.md"
    report.write_text(text)
    logger.info("wrote %s", report)
    return report


def read_jsonl(path: Path) -> list[Record]:
    """Objects of a JSONL file; skips blank and unparsable lines (e.g. a crash mid-write)."""
    records: list[Record] = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            logger.warning("%s:%d is not valid JSON; skipping it", path, lineno)
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


# --- markdown --------------------------------------------------------------------------------


def render_markdown(
    name: str,
    metrics: list[Record],
    evals: list[Record],
    config: str | None,
    images: list[tuple[str, str]],
) -> str:
    """The report text: title, accuracy table, training summary, plots, config."""
    lines = [f"# GRPO run report: {name}", ""]
    if evals:
        lines += ["## Accuracy before and after training", "", *accuracy_table(evals), ""]
        if any(e.get("label") == "during" for e in evals):
            lines += ["### Every evaluation", "", *evaluation_table(evals), ""]
    lines += ["## Training", "", *training_summary(metrics), ""]
    if images:
        lines += ["## Plots", ""]
        lines += [f"![{title}]({path})" for title, path in images]
        lines.append("")
    if config is not None:
        lines += ["## Config", "", "```yaml", config.rstrip("\n"), "```", ""]
    return "\n".join(lines)


def accuracy_table(evals: list[Record]) -> list[str]:
    """One row per split (held-out first): accuracy before, after, and the change in points.

    A side that was not evaluated (``eval.before: false``, ``eval.after: false``, or a single
    unlabelled evaluation) is "—", with no change, and a line under the table says so.
    """
    rows = [
        "| split | before | after | change |",
        "|---|---|---|---|",
    ]
    missing = False
    for split in _splits(evals):
        before, after = before_after([e for e in evals if e.get("split", HELDOUT) == split])
        change = f"{100 * (after['accuracy'] - before['accuracy']):+.1f} pp" if before and after else ""
        cells = [_accuracy_cell(e) if e else "—" for e in (before, after)]
        missing = missing or before is None or after is None
        rows.append(f"| {split} | {cells[0]} | {cells[1]} | {change} |")
    if missing:
        rows += ["", "— : no evaluation on that side of training (`eval.before` / `eval.after` false, or only one evaluation logged)."]
    return rows


def evaluation_table(evals: list[Record]) -> list[str]:
    """One row per evaluation point of each split (before, the mid-run ones, after), by step."""
    rows = ["| split | step | label | accuracy | n |", "|---|---|---|---|---|"]
    for split in _splits(evals):
        for e in accuracy_curve(evals, split):
            n = e.get("n")
            rows.append(
                f"| {split} | {e.get('step', 0)} | {e.get('label', '')} | {100 * e['accuracy']:.1f}% | {'' if n is None else n} |"
            )
    return rows


def accuracy_curve(evals: list[Record], split: str) -> list[Record]:
    """The evaluations of ``split`` ordered by step, one per step (the one logged last wins).

    A run stopped by its time budget right after a mid-run evaluation evaluates the same weights
    again as "after"; the curve keeps that "after" point only.
    """
    by_step: dict[Any, Record] = {}
    for e in evals:
        if str(e.get("split", HELDOUT)) == split:
            by_step.pop(e.get("step", 0), None)
            by_step[e.get("step", 0)] = e
    return sorted(by_step.values(), key=lambda e: e.get("step", 0))


def before_after(evals: list[Record]) -> tuple[Record | None, Record | None]:
    """The evaluations labelled "before" and "after"; None for a side that was not evaluated.

    Logs whose records carry no label (older runs) fall back to the earliest and the latest by
    step (the latest only when there are two or more). Labelled logs never borrow: with
    ``eval.before: false`` the "after" evaluation is not also the "before" one.
    """
    by_step = sorted(evals, key=lambda e: e.get("step", 0))
    labelled = {e.get("label"): e for e in by_step if e.get("label")}
    if not labelled:
        return by_step[0], (by_step[-1] if len(by_step) > 1 else None)
    return labelled.get("before"), labelled.get("after")


def training_summary(metrics: list[Record]) -> list[str]:
    """Bullet lines: steps, wall time, seconds per step, reward, KL, completion length."""
    if not metrics:
        return ["- no training steps were logged"]
    last = metrics[-1]
    lines = [f"- steps: {last.get('step', len(metrics))}"]
    elapsed = _number(last.get("time/elapsed_s"))
    if elapsed is not None:
        lines.append(f"- total training time: {elapsed / 60:.1f} min")
    step_s = _mean(_column(metrics, "time/step_s"))
    if step_s is not None:
        lines.append(f"- mean time per step: {step_s:.1f} s")
    keys = ["reward/mean"] + _named_reward_keys(metrics)
    keys += ["kl", "completion_len/mean"]
    n = min(SUMMARY_STEPS, len(metrics))
    for key in keys:
        values = _column(metrics, key)
        if not values:
            continue
        first, final = _mean(_column(metrics[:n], key)), _mean(_column(metrics[-n:], key))
        lines.append(f"- `{key}`: first {n} steps {_fmt(first)}, last {n} steps {_fmt(final)}")
    return lines


def _accuracy_cell(record: Record) -> str:
    cell = f"{100 * record['accuracy']:.1f}% (step {record.get('step', '?')}"
    if record.get("n") is not None:
        cell += f", n={record['n']}"
    return cell + ")"


def _named_reward_keys(metrics: list[Record]) -> list[str]:
    """``reward/<name>/mean`` keys present in any step, sorted."""
    keys = {k for r in metrics for k in r}
    named = (k for k in keys if k.startswith("reward/") and k.endswith("/mean"))
    return sorted(k for k in named if k != "reward/mean")


def _splits(evals: list[Record]) -> list[str]:
    names = list(dict.fromkeys(str(e.get("split", HELDOUT)) for e in evals))
    return sorted(names, key=lambda s: (s != HELDOUT, names.index(s)))


# --- plots -----------------------------------------------------------------------------------


def plot_reward(metrics: list[Record], path: Path) -> None:
    """Training reward per step (thin line), its moving average (thick), and named rewards."""
    steps, rewards = _series(metrics, "reward/mean")
    window = moving_average_window(len(rewards))
    fig, ax = _figure()
    ax.plot(steps, rewards, color="tab:blue", alpha=0.35, linewidth=1, label="reward/mean")
    ax.plot(
        steps,
        moving_average(rewards, window),
        color="tab:blue",
        linewidth=2.2,
        label=f"moving average ({window} steps)",
    )
    for key in _named_reward_keys(metrics):
        xs, ys = _series(metrics, key)
        ax.plot(xs, moving_average(ys, window), linewidth=1, linestyle="--", label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title("Training reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.savefig(path, dpi=100)


def plot_accuracy(evals: list[Record], path: Path) -> dict[str, list[Record]]:
    """Accuracy (%) vs step, one line per split through every evaluation; returns the plotted points.

    Mid-run ("during") evaluations are points on the curve like before and after; before and
    after are drawn larger, and each held-out point is annotated with its value.
    """
    fig, ax = _figure()
    plotted: dict[str, list[Record]] = {}
    for split in _splits(evals):
        rows = plotted[split] = accuracy_curve(evals, split)
        xs = [e.get("step", 0) for e in rows]
        ys = [100 * e["accuracy"] for e in rows]
        (line,) = ax.plot(xs, ys, marker="o", linewidth=2 if split == HELDOUT else 1, label=split)
        ends = [(x, y) for x, y, e in zip(xs, ys, rows) if e.get("label") in ("before", "after")]
        if ends:
            ax.plot(*zip(*ends), linestyle="none", marker="s", markersize=9, color=line.get_color())
        if split == HELDOUT:
            for x, y in zip(xs, ys):
                ax.annotate(f"{y:.0f}%", (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize="x-small")
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Held-out accuracy (squares: before / after training; dots: during)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.savefig(path, dpi=100)
    return plotted


def moving_average_window(n: int) -> int:
    """About a tenth of the run, between 1 and 20 steps."""
    return max(1, min(20, n // 10))


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (shorter at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _figure() -> Any:
    """A figure on matplotlib's Agg canvas, imported lazily and without touching pyplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


# --- small helpers ---------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _column(records: list[Record], key: str) -> list[float]:
    return [v for v in (_number(r.get(key)) for r in records) if v is not None]


def _series(records: list[Record], key: str) -> tuple[list[float], list[float]]:
    pairs = [(r.get("step", i), _number(r.get(key))) for i, r in enumerate(records)]
    kept = [(s, v) for s, v in pairs if v is not None]
    return [s for s, _ in kept], [v for _, v in kept]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"
