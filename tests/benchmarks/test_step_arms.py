"""benchmarks/step_arms.py: the same steps under two settings of a speed knob."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import step_arms  # noqa: E402
from skip_rows import first_divergence  # noqa: E402

import grpokit.model.logprobs as lp  # noqa: E402
from grpokit.trainer import memory  # noqa: E402


def test_pack_arms_sample_the_same_and_only_the_packed_arm_packs(monkeypatch, tmp_path):
    calls = []
    real = lp.packed_completion_hidden
    monkeypatch.setattr(lp, "packed_completion_hidden", lambda *a, **k: calls.append(1) or real(*a, **k))
    padded = step_arms.run_arm("grpo", "demo", 0, 3, "train.pack_completions=false", True, str(tmp_path))
    assert calls == []  # train.pack_completions=false reaches the policy: padded rows only
    packed = step_arms.run_arm("grpo", "demo", 0, 3, "train.pack_completions=true", True, str(tmp_path))
    assert calls  # packed micro-batches ran (a step whose rows all have advantage 0 runs none)
    assert first_divergence(padded, packed) is None  # exact: the same samples at every step
    for a, b in zip(padded, packed):
        assert abs(a["loss"] - b["loss"]) < 1e-5
    assert all(s["minor_faults"] >= 0 and s["peak_rss_gb"] > 0 for s in packed)


def test_cpu_memory_setting_reaches_the_allocator(monkeypatch, tmp_path):
    seen = []
    real = memory.configure_cpu_memory
    monkeypatch.setattr("grpokit.trainer.loop.configure_cpu_memory", lambda mode, **k: seen.append(mode) or real(mode, **k))
    try:
        step_arms.run_arm("grpo", "demo", 0, 1, "train.cpu_memory=release", True, str(tmp_path))
        assert seen == ["release"] and memory._RELEASE
        step_arms.run_arm("grpo", "demo", 0, 1, "train.cpu_memory=reuse", True, str(tmp_path))
        assert seen == ["release", "reuse"] and not memory._RELEASE
    finally:
        memory.configure_cpu_memory("release")
