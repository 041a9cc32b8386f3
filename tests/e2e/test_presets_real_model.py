"""`grpokit train --preset X` on the real embedded model, one step each (slow)."""

import json

import pytest

from grpokit.cli import main
from grpokit.config import preset_names

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("preset", [p for p in preset_names() if p != "demo"])
def test_preset_runs_on_real_model(preset, tmp_path):
    code = main([
        "train", "--preset", preset,
        "--set", f"logging.output_dir={tmp_path}",
        "--set", "train.steps=1",
        "--set", "rollout.prompts_per_step=2",
        "--set", "rollout.max_new_tokens=16",
        "--set", "eval.before=false", "--set", "eval.after=false",
        "--set", "logging.progress=false",
    ])
    assert code == 0
    m = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert m["loss"] == m["loss"]  # not NaN
