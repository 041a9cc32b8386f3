"""The progress bar's ETA: the earlier of the step-based end and the time-budget end."""

import math

from grpokit.trainer.progress import StepProgress, eta_seconds


def test_eta_without_a_budget_counts_the_steps_left():
    # 150 steps left at 2 s/step = 300 s
    assert eta_seconds(150, 2.0) == 300.0


def test_eta_is_the_budget_end_when_max_minutes_comes_first():
    # demo-like: 200 steps, 10 done at 6 s/step, budget 24 min = 1440 s, 60 s spent -> 1380 s left;
    # the budget allows ceil(1380 / 6) = 230 more steps, the step count 190: 190 * 6 = 1140 s (steps first)
    assert eta_seconds(190, 6.0, 1380.0) == 1140.0
    # at 10 s/step: ceil(1380 / 10) = 138 < 190 steps -> 138 * 10 = 1380 s (the budget first)
    assert eta_seconds(190, 10.0, 1380.0) == 1380.0
    # 11 s left at 2 s/step: steps start at 0, 2, 4, 6, 8, 10 s (all under 11) -> ceil(5.5) = 6 steps = 12 s
    assert eta_seconds(100, 2.0, 11.0) == 12.0


def test_eta_edges():
    assert eta_seconds(0, 2.0, 100.0) == 0.0  # no steps left
    assert eta_seconds(10, 2.0, 0.0) == 0.0  # budget spent: the loop starts no further step
    assert eta_seconds(10, 0.0, 50.0) == 50.0  # nothing measured yet: the budget bounds it
    assert math.isinf(eta_seconds(10, 0.0))


def test_step_progress_ends_at_the_budget(monkeypatch):
    # a fake monotonic clock: the loop starts at t = 100 s; after step 3 (of 200) it is t = 130 s,
    # 10 s/step. Budget 60 s, 0 s spent before: 30 s left -> ceil(30 / 10) = 3 steps = 30 s,
    # so the bar's end is t = 160 s, not 100 + 200 * 10 s.
    clock = iter([100.0, 100.0, 130.0])
    monkeypatch.setattr("grpokit.trainer.progress.monotonic", lambda: next(clock))
    bar = StepProgress(200, enabled=False, budget_s=60.0)
    with bar:
        bar.update(3, {"reward/mean": 0.5, "time/step_s": 10.0})
        assert bar.progress.tasks[0].fields["end_at"] == 160.0
