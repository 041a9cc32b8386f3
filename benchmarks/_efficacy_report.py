"""``docs/efficacy.md`` and its PNGs from the efficacy study's cached runs (``benchmarks/efficacy.py``).

Per task: a table of every method (held-out greedy accuracy before -> final, mean ± sample std
over seeds, best point, steps, training minutes, the per-step diagnostics of the "why"
question), GRPO against TRL at equal steps and at equal minutes with
``time_to_trl_accuracy_ratio``, and one sentence per paper: its claim, the measured difference
against its reference row at equal training minutes, and the verdict of
``_efficacy_stats.verdict``. Plots use matplotlib's Agg canvas through the object API, as
``grpokit.trainer.report`` does (no pyplot, the caller's backend untouched).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import _efficacy_stats as st

GRPO, TRL = "grpo", "trl"
# (grpokit row, TRL row, what both add to the study's GRPO, file suffix): the time-to-accuracy comparisons
TRL_PAIRS = ((GRPO, TRL, "", ""),
             ("grpo_overlong", "trl_overlong", "with overlong filtering (truncated completions masked) on both sides", "_overlong"))


def pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.{digits}f}%"


def pm(pair: tuple[float, float], scale: float = 100.0, unit: str = "%", digits: int = 1) -> str:
    mean, std = pair
    if math.isnan(mean):
        return "n/a"
    return f"{scale * mean:.{digits}f}{unit} ± {scale * std:.{digits}f}"


def table(runs_by_method: dict[str, list[dict]], methods: list) -> list[str]:
    cols = ["method", "seeds", "before", "final (mean ± std)", "best", "steps", "training min", "s/step",
            "completion len (last 5 steps)", "zero-variance groups (2nd half)", "steps with every row skipped"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for m in methods:
        runs = runs_by_method.get(m.name)
        if not runs:
            continue
        s = st.summary(runs)
        out.append("| " + " | ".join([
            m.label, str(s["n"]), pm(s["before"]), pm(s["final"]), pm(s["best"]), pm(s["steps"], 1, "", 0),
            pm(s["minutes"], 1, "", 2), pm(s["s_per_step"], 1, "", 1), pm(s["len_end"], 1, "", 1),
            pm(s["zero_var_late"], 100, "%", 0), pm(s["all_skipped"], 100, "%", 0),
        ]) + " |")
    return out


def grpo_vs_trl(runs_by_method: dict[str, list[dict]], grpo_name: str = GRPO, trl_name: str = TRL) -> list[str]:
    """GRPO and TRL mean accuracy at equal steps and at equal training minutes, and the time ratio."""
    grpo, trl = runs_by_method.get(grpo_name, []), runs_by_method.get(trl_name, [])
    ratio, why = st.time_to_trl_accuracy_ratio(grpo, trl)
    holds, where = st.stays_above_trl(grpo, trl)
    stays = {True: "**yes**", False: "**no**", None: "not checked"}[holds]
    out = [f"`time_to_trl_accuracy_ratio={ratio:.3f}`" if math.isfinite(ratio) else "`time_to_trl_accuracy_ratio=nan`",
           f"({why}).", "",
           f"grpokit's mean accuracy stays at or above TRL's after first reaching TRL's final accuracy: {stays} ({where}).", ""]
    if not grpo or not trl:
        return out
    rows = ["| at | GRPO (grpokit) | TRL GRPOTrainer |", "|---|---|---|"]
    for axis, curve, hold, digits in (("step", st.steps_curve, False, 0), ("training minute", st.minutes_curve, True, 2)):
        g = st.mean_curve([curve(r) for r in grpo], hold)
        t = st.mean_curve([curve(r) for r in trl], hold)
        for x in grid(min(g[0][-1], t[0][-1]), axis == "step"):
            rows.append(f"| {axis} {x:.{digits}f} | {pct(st.interp(g[0], g[1], x))} | {pct(st.interp(t[0], t[1], x))} |")
    return out + rows + [""]


def pair_of(stem: str, task: str) -> str | None:
    """The ``TRL_PAIRS`` suffix of a figure named ``<task>_grpo_vs_trl<suffix>[_<version>]``, or None for another figure."""
    head = f"{task}_grpo_vs_trl"
    if not stem.startswith(head):
        return None
    rest = stem[len(head):]
    return max((s for *_, s in TRL_PAIRS if rest.startswith(s)), key=len)


def grid(end: float, integer: bool, n: int = 8) -> list[float]:
    """``n`` evenly spaced points in (0, end] (whole numbers for steps, without repeats)."""
    xs = [end * k / n for k in range(1, n + 1)]
    return sorted({round(x) for x in xs if round(x) > 0}) if integer else xs


def claim_sentence(m: Any, runs_by_method: dict[str, list[dict]], labels: dict[str, str]) -> str:
    """One sentence: what the paper claims, the number measured here, the verdict."""
    runs = runs_by_method.get(m.name, [])
    ref = None if m.ref == "before" else runs_by_method.get(m.ref, [])
    ref_label = "its accuracy before training" if m.ref == "before" else labels.get(m.ref, m.ref)
    head = f"- **{m.label}** ({m.paper}): claims {m.claim}"
    cmp = st.compare(runs, ref)
    if cmp is None:
        missing = m.label if not runs else ref_label
        return f"{head} Here: not measured yet (no runs of {missing} in the cache)."
    se = "" if math.isnan(cmp["se"]) else f", 2 SE = {200 * cmp['se']:.1f} pp"
    last = f"the last {100 * cmp['window']:.0f}% of the minutes"
    if m.ref == "before":
        what = (f"{100 * cmp['delta']:+.1f} pp from before training to {last}: {pct(cmp['b'])} -> {pct(cmp['a'])} "
                f"({cmp['n_a']} seeds{se}; at the end {pct(cmp['a_end'])}, {100 * cmp['delta_end']:+.1f} pp)")
    else:
        lo = cmp["minutes"] * (1 - cmp["window"])
        what = (f"{100 * cmp['delta']:+.1f} pp vs {ref_label} at equal training minutes, averaged over minutes "
                f"{lo:.2f}-{cmp['minutes']:.2f}: {pct(cmp['a'])} vs {pct(cmp['b'])} ({cmp['n_a']} vs {cmp['n_b']} "
                f"seeds{se}; at {cmp['minutes']:.2f} min alone {pct(cmp['a_end'])} vs {pct(cmp['b_end'])}, "
                f"{100 * cmp['delta_end']:+.1f} pp)")
    note = f" {m.note}" if m.note else ""
    margin = st.non_inferiority_margin(st.compare(ref, None)) if m.expect == "match" and ref else None
    return f"{head} Here: {what}: {st.verdict(m.expect, cmp, margin)}.{note}"


def task_section(task: Any, runs_by_method: dict[str, list[dict]], methods: list, figures: list[str]) -> list[str]:
    labels = {m.name: m.label for m in methods}
    out = [f"## Task `{task.name}`: {task.about}", ""]
    if not runs_by_method:
        return out + ["No runs cached for this task at this code version and budget (a study at another one may be in a section below).", ""]
    rows = [m for m in methods if m.seeds > 1]
    diagnoses = [m for m in methods if m.seeds == 1 and runs_by_method.get(m.name)]
    out += table(runs_by_method, rows) + [""]
    if diagnoses:  # one seed each by design: read beside their claim row, never a verdict of their own
        out += ["Diagnosis runs (one seed each, by design: each tests one cause of a row's shortfall and is read in "
                "that row's note; no claim, no verdict):", ""] + table(runs_by_method, diagnoses) + [""]
    for grpo, trl, what, suffix in TRL_PAIRS:
        if grpo != GRPO and not (runs_by_method.get(grpo) or runs_by_method.get(trl)):
            continue
        out += [f"### GRPO (grpokit) and TRL's GRPOTrainer, same task and budget{', ' + what if what else ''}", ""]
        out += grpo_vs_trl(runs_by_method, grpo, trl)
        out += [f"![{Path(f).stem}](efficacy/{Path(f).name})" for f in figures if pair_of(Path(f).stem, task.name) == suffix]
        out += [""]
    out += [f"![{Path(f).stem}](efficacy/{Path(f).name})" for f in figures if "_grpo_vs_trl" not in Path(f).stem]
    out += ["", "### Each paper's claim", ""]
    out += [claim_sentence(m, runs_by_method, labels) for m in methods if m.claim]
    return out + [""]


KEPT_RE = re.compile(r"<!-- kept:start:(?P<name>[\w-]+) -->\n.*?<!-- kept:end:(?P=name) -->\n?", re.DOTALL)


def kept_markers(name: str) -> tuple[str, str]:
    """The markers around the section ``name`` that another benchmark writes (vision.py, flow_image.py)."""
    return f"<!-- kept:start:{name} -->", f"<!-- kept:end:{name} -->"


def kept_block(text: str) -> list[str]:
    """Every kept section of an existing report (markers included), in order, or []."""
    lines: list[str] = []
    for match in KEPT_RE.finditer(text):
        lines += match.group(0).rstrip("\n").splitlines() + [""]
    return lines


def write_kept(path: Path, name: str, block: list[str]) -> None:
    """Put ``block`` (its lines, without markers) into ``path`` as the kept section ``name``: replaced
    in place if the report has one, else appended; the generated sections and other kept ones stay."""
    start, end = kept_markers(name)
    section = "\n".join([start, *block, end]) + "\n"
    text = path.read_text() if path.exists() else ""
    found = [m for m in KEPT_RE.finditer(text) if m.group("name") == name]
    if found:
        text = text[: found[0].start()] + section + text[found[0].end():]
    else:
        text = text.rstrip("\n") + ("\n\n" if text.strip() else "") + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_markdown(path: Path, header: list[str], sections: list[list[str]], unavailable: dict[str, str]) -> None:
    lines = list(header)
    for section in sections:
        lines += section
    if unavailable:
        lines += ["## Rows not run at this code version", ""]
        lines += [f"- `{name}`: {why}" for name, why in sorted(unavailable.items())] + [""]
    lines += kept_block(path.read_text()) if path.exists() else []  # e.g. the vision study's section
    path.write_text("\n".join(lines))


# ----------------------------------------------------------------------------------- plots
def _figure(panels: int) -> tuple[Any, list[Any]]:
    """A figure on matplotlib's Agg canvas (object API, no pyplot) with ``panels`` side-by-side axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6 * panels, 4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    return fig, list(axes)


def _band(ax: Any, curves: list, hold: bool, label: str, **style: Any) -> None:
    xs, mean, std = st.mean_curve(curves, hold)
    ys = [100 * y for y in mean]
    (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=f"{label} ({len(curves)} seeds)", **style)
    lo = [100 * (m - s) for m, s in zip(mean, std)]
    hi = [100 * (m + s) for m, s in zip(mean, std)]
    ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)


def _finish(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def plot_grpo_vs_trl(runs_by_method: dict[str, list[dict]], labels: dict[str, str], path: Path,
                     pair: tuple[str, str] = (GRPO, TRL)) -> bool:
    sides = [(n, runs_by_method[n]) for n in pair if runs_by_method.get(n)]
    if not sides:
        return False
    fig, (ax_min, ax_step) = _figure(2)
    for name, runs in sides:
        _band(ax_min, [st.minutes_curve(r) for r in runs], True, labels[name])
        _band(ax_step, [st.steps_curve(r) for r in runs], False, labels[name])
    _finish(ax_min, "training wall minutes (evaluation excluded)", "held-out greedy accuracy (%)", "per minute: mean ± std over seeds")
    _finish(ax_step, "optimizer step", "held-out greedy accuracy (%)", "per step: mean ± std (up to the shortest seed)")
    fig.savefig(path, dpi=100)
    return True


def plot_methods(runs_by_method: dict[str, list[dict]], methods: list, path: Path) -> bool:
    present = [m for m in methods if runs_by_method.get(m.name)]
    if not present:
        return False
    fig, (ax,) = _figure(1)
    for m in present:
        xs, mean, _ = st.mean_curve([st.minutes_curve(r) for r in runs_by_method[m.name]], hold=True)
        style = {"linewidth": 2.4, "color": "black"} if m.name == GRPO else {"linestyle": "--"} if m.name == TRL else {"linewidth": 1}
        ax.plot(xs, [100 * y for y in mean], label=m.label, **style)
    _finish(ax, "training wall minutes (evaluation excluded)", "held-out greedy accuracy (%)", "every method: mean over seeds")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="x-small")
    fig.savefig(path, dpi=100)
    return True


def plot_diagnostics(runs_by_method: dict[str, list[dict]], labels: dict[str, str], path: Path) -> bool:
    """GRPO and TRL per step: mean completion length and the fraction of zero-variance groups (mean over seeds)."""
    from grpokit.trainer.report import moving_average, moving_average_window

    sides = [(n, runs_by_method[n]) for n in (GRPO, TRL) if runs_by_method.get(n)]
    if not sides:
        return False
    fig, axes = _figure(3)
    keys = (("completion_len", "mean completion length (tokens)"), ("zero_var_frac", "zero-variance groups"),
            ("train_accuracy", "training accuracy (judge)"))
    for ax, (key, title) in zip(axes, keys):
        for name, runs in sides:
            xs, ys = st.mean_steps(runs, key)
            if xs:
                ax.plot(xs, moving_average(ys, moving_average_window(len(ys))), label=labels[name])
        _finish(ax, "optimizer step", title, f"{title}, moving average")
    fig.savefig(path, dpi=100)
    return True


def plot_task(task: str, runs_by_method: dict[str, list[dict]], methods: list, folder: Path, suffix: str = "") -> list[str]:
    """Every PNG of one task under ``folder`` (``<task>_<kind><suffix>.png``); the paths written."""
    labels = {m.name: m.label for m in methods}
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    pairs = [(f"grpo_vs_trl{suffix}", lambda p, pair=(g, t): plot_grpo_vs_trl(runs_by_method, labels, p, pair))
             for g, t, _, suffix in TRL_PAIRS]
    for kind, draw in (*pairs, ("methods", lambda p: plot_methods(runs_by_method, methods, p)),
                       ("diagnostics", lambda p: plot_diagnostics(runs_by_method, labels, p))):
        path = folder / f"{task}_{kind}{suffix}.png"
        if draw(path):
            written.append(str(path))
    return written
