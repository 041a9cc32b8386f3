"""End-to-end runs on the real embedded model (minutes; `make test-slow`)."""

import json

import pytest

from grpokit.cli import main

pytestmark = pytest.mark.slow


def test_demo_preset_runs_two_steps_and_evaluates(tmp_path, capsys):
    code = main([
        "train", "--preset", "demo",
        "--set", f"logging.output_dir={tmp_path}",
        "--set", "train.steps=2",
        "--set", "data.n_heldout=20",
        "--set", "logging.progress=false",
    ])
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("heldout_accuracy before=")
    metrics = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(0.0 <= m["reward/mean"] <= 1.0 for m in metrics)
    assert (tmp_path / "checkpoints" / "step-2" / "model.safetensors").is_file()


def test_lora_with_kl_on_real_model(tmp_path):
    code = main([
        "train", "--preset", "demo",
        "--set", f"logging.output_dir={tmp_path}",
        "--set", "train.steps=1",
        "--set", "model.lora.enabled=true",
        "--set", "algorithm.beta=0.04",
        "--set", "eval.before=false",
        "--set", "eval.after=false",
        "--set", "logging.progress=false",
    ])
    assert code == 0
    m = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert m["kl"] == pytest.approx(0.0, abs=1e-6)  # first step: policy == reference
