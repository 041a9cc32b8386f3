"""benchmarks/vote_probe.py: how often the starting model's majority vote is the true answer (TTRL's precondition)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import efficacy  # noqa: E402
import vote_probe  # noqa: E402


def test_tally_hand_computed():
    groups = [["3", "3", "4", None], [None, None, None, None], ["7", "8", "8", "7"]]
    correct = [[True, True, False, False], [False, False, False, True], [True, False, False, True]]
    # prompt 0: majority 3, right; pseudo [1,1,0,0] agrees 4 of 4
    # prompt 1: nobody states an answer: no majority, pseudo all 0; the judge (last number) took the 4th: 3 of 4 agree
    # prompt 2: 7 and 8 tie, the first (7) wins as in majority_vote: right; pseudo [1,0,0,1] agrees 4 of 4
    out = vote_probe.tally(groups, correct, ["3", "5", "7.0"])
    assert out["prompts"] == 3
    assert out["majority_right"] == pytest.approx(2 / 3)
    assert out["no_majority"] == pytest.approx(1 / 3)
    assert out["sample_accuracy"] == pytest.approx(5 / 12)
    assert out["reward_agrees"] == pytest.approx(11 / 12)


def test_a_wrong_majority_is_counted_wrong():
    out = vote_probe.tally([["4", "4", "3"]], [[False, False, True]], ["3"])
    assert out["majority_right"] == 0.0 and out["reward_agrees"] == 0.0  # the vote rewards exactly the wrong ones


def test_dry_run_samples_every_prompt(tmp_path):
    out = vote_probe.probe_task("hard", 4, 0, True, str(tmp_path))
    assert out["prompts"] == 4 and out["group"] == efficacy.DRY.group
    assert all(0.0 <= out[k] <= 1.0 for k in ("sample_accuracy", "majority_right", "no_majority", "reward_agrees"))
