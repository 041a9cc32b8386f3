"""benchmarks/gspo_clip_probe.py: which sequences GSPO's clip stops, and what one update moves."""

import dataclasses
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import efficacy  # noqa: E402
import gspo_clip_probe  # noqa: E402


def test_would_clip_only_on_the_side_the_advantage_pushes():
    low, high = 3e-4, 4e-4
    assert gspo_clip_probe.would_clip(math.log(1.0005), 1.0, low, high)  # past 1 + eps_high, A > 0: clipped
    assert not gspo_clip_probe.would_clip(math.log(1.0003), 1.0, low, high)  # inside the range
    assert not gspo_clip_probe.would_clip(math.log(1.0005), -1.0, low, high)  # A < 0 may still push it down
    assert gspo_clip_probe.would_clip(math.log(0.9996), -0.5, low, high)  # below 1 - eps_low, A < 0: clipped
    assert not gspo_clip_probe.would_clip(math.log(0.9996), 0.5, low, high)  # A > 0 may still pull it up
    assert not gspo_clip_probe.would_clip(0.5, 0.0, low, high)  # no advantage, nothing to clip


def odd_length(prompts, completions, **kw):
    return [float(len(c) % 2) for c in completions]


@pytest.fixture
def odd_length_reward(monkeypatch):
    """The hard task scored by completion length parity, so that a tiny random model's groups have advantages."""
    monkeypatch.setitem(efficacy.TASKS, "hard", dataclasses.replace(efficacy.TASKS["hard"], reward=f"{__file__}:odd_length"))


def test_probe_measures_one_update_on_one_group(odd_length_reward):
    moved = gspo_clip_probe.probe(seed=0, steps=2, dry_run=True)
    trained = [(ls, a) for ls, a, t in moved if t]
    others = [(ls, a) for ls, a, t in moved if not t]
    assert trained and others  # the update's group and the groups a later mini-batch would see
    assert all(a != 0 for _, a in trained + others)
    assert all(ls != 0 for ls, _ in trained)  # the update moved the rows it trained on
    assert sum(a * ls for ls, a in trained) > 0  # and raised their advantage-weighted log-likelihood (first order)
