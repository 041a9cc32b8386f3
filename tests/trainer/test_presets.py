"""Every packaged preset trains the tiny model for 3 steps with finite metrics."""

import json
import math

import pytest

from grpokit.config import load_config, preset_names
from grpokit.testing import save_tiny_model
from grpokit.trainer.loop import Trainer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


TINY = [
    "logging.progress=false", "logging.log_samples_every=0", "data.n_train=16", "data.n_heldout=4",
    "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=8",
    "train.micro_batch_size=4", "train.max_minutes=0", "eval.before=false", "eval.after=false",
]


@pytest.mark.parametrize("preset", preset_names())
def test_preset_trains_tiny_model_3_steps(preset, tiny_dir, tmp_path):
    overrides = TINY + [f"model.name={tiny_dir}", f"logging.output_dir={tmp_path}", "train.steps=3"]
    cfg = load_config(preset=preset, overrides=overrides)
    cfg.rollout.max_new_tokens = 8
    if cfg.model.teacher:
        cfg.model.teacher = tiny_dir
    cfg.model.lora.target_modules = ["q_proj", "v_proj"]
    Trainer(cfg).train()
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        for key in ("loss", "grad_norm", "reward/mean"):
            assert math.isfinite(r[key]), (preset, key, r[key])
