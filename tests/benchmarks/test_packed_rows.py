"""benchmarks/packed_rows.py: the same steps with padded and packed completion rows."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import packed_rows  # noqa: E402

import grpokit.model.logprobs as lp  # noqa: E402


def test_arms_sample_the_same_and_only_the_packed_arm_packs(monkeypatch, tmp_path):
    calls = []
    real = lp.packed_completion_hidden
    monkeypatch.setattr(lp, "packed_completion_hidden", lambda *a, **k: calls.append(1) or real(*a, **k))
    padded = packed_rows.run_arm("grpo", "demo", 0, 3, False, True, str(tmp_path))
    assert calls == []  # train.pack_completions=false reaches the policy: padded rows only
    packed = packed_rows.run_arm("grpo", "demo", 0, 3, True, True, str(tmp_path))
    assert calls  # packed micro-batches ran (a step whose rows all have advantage 0 runs none)
    assert packed_rows.first_divergence(padded, packed) is None  # exact: the same samples at every step
    for a, b in zip(padded, packed):
        assert abs(a["loss"] - b["loss"]) < 1e-5
