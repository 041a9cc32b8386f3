"""Curves and statistics of the efficacy study (``benchmarks/efficacy.py``): pure functions on run records.

A run record holds ``evals``: points ``{"step", "minutes", "accuracy"}`` (minutes = training wall
time, evaluation excluded; the first point is step 0, minute 0, before training) and ``steps``:
per-step diagnostics. A curve is ``(xs, ys)`` with increasing xs, linear between points.

Mean over seeds: the mean of piecewise-linear curves is piecewise linear with breakpoints at the
union of the seeds' points, so the mean curve is computed exactly there. Against minutes a seed's
curve holds its final accuracy after its last point (its run ended at the budget, within one
step; the mean curve then ends at the mean final accuracy); against steps the mean stops at the
fewest steps any seed ran (grpokit and TRL run very different step counts in one budget, and a
held value would fake a flat tail).
"""

from __future__ import annotations

import math
import statistics

TOL = 1e-9  # "reaches" an accuracy: float sums of the same numbers may differ in the last bit


def interp(xs: list[float], ys: list[float], x: float, hold: bool = True) -> float | None:
    """The curve's value at ``x``: linear between points, the last value after the end when ``hold`` (else None)."""
    if x < xs[0]:
        return None
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1] if hold or x == xs[-1] else None


def mean_curve(curves: list[tuple[list[float], list[float]]], hold: bool) -> tuple[list[float], list[float], list[float]]:
    """(xs, mean, std) over ``curves`` at the union of their points; std is the sample std (0 for one curve).

    ``hold``: up to the longest curve, each holding its last value; else up to the shortest.
    """
    end = max(c[0][-1] for c in curves) if hold else min(c[0][-1] for c in curves)
    xs = sorted({x for c in curves for x in c[0] if x <= end})
    means, stds = [], []
    for x in xs:
        values = [interp(cx, cy, x, hold=True) for cx, cy in curves]
        mean, std = mean_std([v for v in values if v is not None])
        means.append(mean)
        stds.append(std)
    return xs, means, stds


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value; nan, nan for none)."""
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def first_reach(xs: list[float], ys: list[float], target: float) -> float | None:
    """The first x at which the curve reaches ``target`` (linear interpolation inside a segment), or None."""
    if ys[0] >= target - TOL:
        return xs[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if y1 >= target - TOL:
            return x0 + (x1 - x0) * (target - y0) / (y1 - y0)
    return None


def minutes_curve(run: dict) -> tuple[list[float], list[float]]:
    return [e["minutes"] for e in run["evals"]], [e["accuracy"] for e in run["evals"]]


def steps_curve(run: dict) -> tuple[list[float], list[float]]:
    return [float(e["step"]) for e in run["evals"]], [e["accuracy"] for e in run["evals"]]


def final_accuracy(run: dict) -> float:
    return run["evals"][-1]["accuracy"]


def time_to_trl_accuracy_ratio(grpo: list[dict], trl: list[dict]) -> tuple[float, str]:
    """TRL minutes / grpokit minutes to reach TRL's final mean accuracy, and how it was found.

    Target = mean over TRL's seeds of their final held-out accuracies. Each side's minutes = the
    first training minute at which its mean-over-seeds accuracy curve (against minutes, final
    values held) reaches the target. nan, with the reason, when grpokit's curve never reaches it
    or either side has no runs, or when grpokit is at the target before training (nothing to time).
    """
    if not grpo or not trl:
        return float("nan"), f"needs GRPO and TRL runs (have {len(grpo)} GRPO, {len(trl)} TRL)"
    target = statistics.fmean(final_accuracy(r) for r in trl)
    t_trl = first_reach(*mean_curve([minutes_curve(r) for r in trl], hold=True)[:2], target)
    xs, ys, _ = mean_curve([minutes_curve(r) for r in grpo], hold=True)
    t_grpo = first_reach(xs, ys, target)
    about = f"target {target:.1%} = TRL's final mean accuracy over {len(trl)} seed(s)"
    if t_grpo is None:
        return float("nan"), f"grpokit's mean curve never reaches {about}; its highest point is {max(ys):.1%}"
    if t_grpo == 0:
        return float("nan"), f"grpokit's mean curve is at the {about} before training (nothing to time)"
    return t_trl / t_grpo, f"{about}; TRL reaches it at {t_trl:.2f} min, grpokit at {t_grpo:.2f} min ({len(grpo)} seed(s))"


def stays_above_trl(grpo: list[dict], trl: list[dict]) -> tuple[bool | None, str]:
    """Whether grpokit's mean accuracy stays >= TRL's at every evaluation after it first reaches TRL's final accuracy.

    Both sides' mean-over-seeds curves against training minutes (final values held, as in
    :func:`time_to_trl_accuracy_ratio`) are read at every evaluation minute of either side from the
    minute grpokit's curve first reaches the target (TRL's final mean accuracy) up to the later of
    the two budgets. Returns (True / False, the worst point), or (None, why) when there is nothing to check.
    """
    if not grpo or not trl:
        return None, f"needs GRPO and TRL runs (have {len(grpo)} GRPO, {len(trl)} TRL)"
    target = statistics.fmean(final_accuracy(r) for r in trl)
    g = mean_curve([minutes_curve(r) for r in grpo], hold=True)
    t = mean_curve([minutes_curve(r) for r in trl], hold=True)
    start = first_reach(g[0], g[1], target)
    if start is None:
        return None, f"grpokit's mean curve never reaches TRL's final mean accuracy {target:.1%}"
    points = sorted({x for x in g[0] + t[0] if x >= start})
    gaps = [(interp(g[0], g[1], x) - interp(t[0], t[1], x), x) for x in points]
    worst, at = min(gaps)
    below = [x for d, x in gaps if d < -TOL]
    lowest = (f"lowest margin {100 * worst:+.1f} pp at {at:.2f} min: grpokit {interp(g[0], g[1], at):.1%} vs TRL "
              f"{interp(t[0], t[1], at):.1%}")
    checked = f"{len(points)} evaluation minutes from {start:.2f} min"
    if below:
        return False, f"below TRL at {len(below)} of {checked}; {lowest}"
    return True, f"{checked}; {lowest}"


def summary(runs: list[dict]) -> dict:
    """Per-method numbers of the report table (means over seeds, std where it says so)."""
    def mean_of(steps: list[dict], key: str) -> float:
        values = [s[key] for s in steps if s.get(key) is not None]
        return statistics.fmean(values) if values else float("nan")

    per = lambda f: mean_std([f(r) for r in runs])  # noqa: E731
    return {
        "n": len(runs),
        "before": per(lambda r: r["evals"][0]["accuracy"]),
        "final": per(final_accuracy),
        "best": per(lambda r: max(e["accuracy"] for e in r["evals"])),
        "steps": per(lambda r: r["n_steps"]),
        "minutes": per(lambda r: r["train_minutes"]),
        "s_per_step": per(lambda r: 60 * r["train_minutes"] / max(r["n_steps"], 1)),
        "len_end": per(lambda r: mean_of(r["steps"][-5:], "completion_len")),
        "zero_var_late": per(lambda r: mean_of(r["steps"][len(r["steps"]) // 2:], "zero_var_frac")),
        "all_skipped": per(lambda r: sum(s.get("skipped_rows", 0.0) >= 1.0 for s in r["steps"]) / max(len(r["steps"]), 1)),
    }


WINDOW = 0.2  # the verdict reads each seed's curve averaged over the last 20% of the compared minutes


def window_mean(xs: list[float], ys: list[float], lo: float, hi: float) -> float:
    """The mean of the curve's evaluations in ``[lo, hi)`` and its value at ``hi`` (read at ``hi`` alone if none).

    One evaluation of 200 problems has a binomial standard error of about 3.5 points at 45%, as large
    as the effects compared; the mean of the evaluations in a window averages that noise out. Only
    real evaluations count: a run evaluated just before and after training reads its final value.
    """
    return statistics.fmean([interp(xs, ys, x) for x in xs if lo <= x < hi] + [interp(xs, ys, hi)])


def compare(runs: list[dict], ref: list[dict] | None, window: float = WINDOW) -> dict | None:
    """Held-out accuracy of ``runs`` minus ``ref`` at equal training minutes (None: nothing to compare).

    Equal minutes = the fewest training minutes any run of either row reached. Each seed's value is
    its curve's mean over the last ``window`` of those minutes (``window_mean``; 0 reads the single
    evaluation at the end), and ``*_end`` keep the single end-point values. ``ref`` None compares
    each run with its own accuracy before training (paired), over the last ``window`` of its own
    minutes. Returns mean values, the difference and its standard error sqrt(s_a^2/n_a + s_b^2/n_b)
    (nan with fewer than two seeds on a side).
    """
    if not runs or ref == []:
        return None
    def read(r: dict, minute: float, frac: float) -> float:
        return window_mean(*minutes_curve(r), minute * (1 - frac), minute)

    if ref is None:
        gains = [read(r, r["train_minutes"], window) - r["evals"][0]["accuracy"] for r in runs]
        mean, std = mean_std(gains)
        se = std / math.sqrt(len(runs)) if len(runs) > 1 else float("nan")
        before = statistics.fmean(r["evals"][0]["accuracy"] for r in runs)
        end = statistics.fmean(final_accuracy(r) for r in runs)
        return {"minutes": min(r["train_minutes"] for r in runs), "window": window, "a": before + mean, "b": before,
                "delta": mean, "se": se, "n_a": len(runs), "n_b": len(runs), "a_end": end, "b_end": before,
                "delta_end": end - before}
    minute = min(minutes_curve(r)[0][-1] for r in runs + ref)
    a, b = [read(r, minute, window) for r in runs], [read(r, minute, window) for r in ref]
    a_end, b_end = [read(r, minute, 0.0) for r in runs], [read(r, minute, 0.0) for r in ref]
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    se = math.sqrt(sa**2 / len(a) + sb**2 / len(b)) if len(a) > 1 and len(b) > 1 else float("nan")
    end_a, end_b = statistics.fmean(a_end), statistics.fmean(b_end)
    return {"minutes": minute, "window": window, "a": ma, "b": mb, "delta": ma - mb, "se": se, "n_a": len(a),
            "n_b": len(b), "a_end": end_a, "b_end": end_b, "delta_end": end_a - end_b}


def non_inferiority_margin(ref_gain: dict | None) -> float | None:
    """How much worse than its reference a "match" row may be and still keep the claim: half of the
    reference's own gain over the starting model, taken at its lower 2-SE bound (M2 = 0.5 * M1, the
    convention of the FDA's non-inferiority guidance, 2016, section IV: keep at least half of the
    active control's effect) [inferred rule]. ``ref_gain``: ``compare(ref_runs, None)``. None without
    two seeds of the reference (no margin, so no verdict)."""
    if ref_gain is None or math.isnan(ref_gain["se"]):
        return None
    return 0.5 * max(0.0, ref_gain["delta"] - 2 * ref_gain["se"])


def verdict(expect: str, cmp: dict, margin: float | None = None) -> str:
    """Whether the measured difference shows the claimed effect: a two-standard-error rule [inferred].

    ``expect``: better (the method beats its reference), match (it is not worse than the reference by
    more than ``margin``, see ``non_inferiority_margin``), gain (it improves on the starting model).
    A claimed gain or match that is a loss beyond 2 SE is contradicted. With fewer than two seeds on
    a side there is no verdict; a match needs its margin too: "not significantly worse" alone would
    read as shown for any row noisy enough.
    """
    delta, se = cmp["delta"], cmp["se"]
    if math.isnan(se):
        return "no verdict (fewer than 2 seeds on a side)"
    if delta < -2 * se:  # a claimed gain or match that is a loss beyond 2 SE
        return "contradicted (worse by more than 2 SE)"
    if expect == "match":
        if margin is None:
            return "no verdict (no margin: the reference row has fewer than 2 seeds)"
        low = 100 * (delta - 2 * se)
        if delta - 2 * se >= -margin:
            return f"shown (the 2-SE interval's low end, {low:+.1f} pp, is within the margin of -{100 * margin:.1f} pp)"
        return f"not shown (the 2-SE interval reaches {low:+.1f} pp, beyond the margin of -{100 * margin:.1f} pp)"
    if delta > 2 * se:
        return "shown (more than 2 SE)"
    return f"not shown (within 2 SE at {min(cmp['n_a'], cmp['n_b'])} seeds)"


def mean_steps(runs: list[dict], key: str) -> tuple[list[int], list[float]]:
    """A per-step diagnostic averaged over seeds, up to the fewest steps any seed ran (None values skipped)."""
    n = min(len(r["steps"]) for r in runs)
    xs, ys = [], []
    for i in range(n):
        values = [r["steps"][i][key] for r in runs if r["steps"][i].get(key) is not None]
        if values:
            xs.append(runs[0]["steps"][i]["step"])
            ys.append(statistics.fmean(values))
    return xs, ys
