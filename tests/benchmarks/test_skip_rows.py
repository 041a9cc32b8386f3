"""benchmarks/skip_rows.py: the same steps with and without the loss's zero-gradient declaration."""

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import efficacy  # noqa: E402
import skip_rows  # noqa: E402


def ties_products(prompts, completions, **kw):
    """Length parity, except 0 for every completion of a product prompt: those groups are tied."""
    return [0.0 if "*" in str(p) else float(len(c) % 2) for p, c in zip(prompts, completions)]


def test_disco_arms_sample_the_same_and_only_the_declared_arm_leaves_rows_out(monkeypatch, tmp_path):
    monkeypatch.setitem(efficacy.TASKS, "hard", dataclasses.replace(efficacy.TASKS["hard"], reward=f"{__file__}:ties_products"))
    off = skip_rows.run_arm("disco", "hard", 0, 4, False, True, str(tmp_path))
    on = skip_rows.run_arm("disco", "hard", 0, 4, True, True, str(tmp_path))
    assert skip_rows.first_divergence(off, on) is None  # the skip is exact: the same samples at every step
    # tied groups (product prompts) are left out of the declared arm's learner; the reference runs every row
    assert skip_rows.summary(on)["skipped"] > 0 and skip_rows.summary(off)["skipped"] == 0
    # a tied mini-batch's gradient is exactly 0 in the reference too (its forward and backward run): size 0 in both arms
    assert [s["learn/updates"] for s in on] == [s["learn/updates"] for s in off]
