"""Every packaged preset trains the tiny model for 3 steps with finite metrics and no implicit-device tensor.

The run is recorded by ``implicit_device_recorder``: any tensor grpokit creates without an
explicit device (which would land on the CPU whatever device the policy is on) fails the test
with its file and line. ``GRPOKIT_TEST_DEVICE=cuda`` runs every preset with ``model.device=cuda``
and asserts the policy trained there (how ``benchmarks/gpu_check.sh --presets`` runs this file on a GPU).
"""

import json
import math
import os

import pytest

from grpokit.config import load_config, preset_names
from grpokit.config.loading import read_preset
from grpokit.testing import implicit_device_recorder, save_tiny_model
from grpokit.trainer.loop import Trainer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


TINY = [
    "logging.progress=false", "logging.log_samples_every=0", "data.n_train=16", "data.n_heldout=4",
    "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=8",
    "train.micro_batch_size=4", "train.max_minutes=0", "eval.before=false", "eval.after=false",
]
DEVICE = os.environ.get("GRPOKIT_TEST_DEVICE", "")  # "" keeps each preset's own model.device (auto)
if DEVICE:
    TINY.append(f"model.device={DEVICE}")


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory):
    from grpokit.families.vision_lm.tiny_qwen2vl import save_tiny_qwen2vl

    return save_tiny_qwen2vl(tmp_path_factory.mktemp("tiny_vlm"))


@pytest.fixture(scope="module")
def tiny_flow_dir(tmp_path_factory):
    from grpokit.families.flow_matching.pretrain import build

    return str(build(tmp_path_factory.mktemp("tiny_flow") / "m", steps=0, channels=(8, 16)))  # random weights


@pytest.fixture(scope="module")
def tiny_mdm_dir(tmp_path_factory):
    from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm, save_mdm

    tok = MDMTokenizer()
    return save_mdm(build_mdm(len(tok), hidden=32, layers=2, heads=2), tok, tmp_path_factory.mktemp("tiny_mdm") / "m")


@pytest.fixture(scope="module")
def tiny_palette_dir(tmp_path_factory):
    from grpokit.families.masked_diffusion.model import save_mdm
    from grpokit.families.palette.images import PaletteTokenizer, build_palette_predictor

    return save_mdm(build_palette_predictor(hidden=32, layers=1), PaletteTokenizer(), tmp_path_factory.mktemp("tiny_pal") / "m")


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    """A small multi-label reward model for presets that score with `rm_score`."""
    from grpokit.rewards.reward_model import train_regression_rm
    from grpokit.rm_cli import make_synthetic_rm_data
    from grpokit.testing import save_tiny_encoder

    out = tmp_path_factory.mktemp("rm")
    rows = make_synthetic_rm_data(40, seed=0)
    train_regression_rm(rows, "response", ["politeness", "safety"], out, backbone=save_tiny_encoder(out / "enc"), epochs=1)
    return str(out)


def use_test_reward_model(cfg, reward_model_dir):
    for r in cfg.rewards:
        if "model_path" in r.kwargs:
            r.kwargs["model_path"] = reward_model_dir


# ts_sql: a random tiny model never writes its plan delimiter ("```sql"), which the span stage refuses at step 1;
# tests/data/test_ts_sql.py trains it 2 steps from a tiny model taught to write a plan and a query block
OWN_TINY_RUN = {"ts_sql"}
ONLINE = [p for p in preset_names() if read_preset(p).get("stage", "grpo") == "grpo" and p not in OWN_TINY_RUN]  # offline ones: tests/trainer/test_offline_stage.py


@pytest.mark.parametrize("preset", ONLINE)
def test_preset_trains_tiny_model_3_steps(preset, tiny_dir, tmp_path, request):
    from grpokit.families import FAMILIES

    model = read_preset(preset).get("model", {})
    family = model.get("family") or FAMILIES.for_name(str(model.get("name", ""))).name
    fixture = {"vision_lm": "tiny_vlm_dir", "masked_diffusion": "tiny_mdm_dir", "flow_matching": "tiny_flow_dir",
               "palette": "tiny_palette_dir"}.get(family)  # the family's random tiny model; causal LM: tiny_dir
    if fixture:
        tiny_dir = request.getfixturevalue(fixture)
    overrides = TINY + [f"model.name={tiny_dir}", f"logging.output_dir={tmp_path}", "train.steps=3"]
    cfg = load_config(preset=preset, overrides=overrides)
    cfg.rollout.max_new_tokens = 8
    cfg.rollout.prompts_per_step = max(cfg.rollout.prompts_per_step, cfg.algorithm.mini_batches)  # a group per mini-batch (humanline: 4)
    if cfg.model.teacher:  # a teacher that differs from the student (the student's own weights are refused)
        cfg.model.teacher = save_tiny_model(tmp_path / "teacher", seed=1)
    cfg.model.lora.target_modules = ["q_proj", "v_proj"]
    if any("model_path" in r.kwargs for r in cfg.rewards):
        use_test_reward_model(cfg, request.getfixturevalue("reward_model_dir"))
    with implicit_device_recorder() as rec:
        trainer = Trainer(cfg)
        trainer.train()
    assert not rec.hits, f"{preset}: tensors created without a device: {rec.report()}"
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:  # a step that took no update (dynamic sampling found no informative group) has no loss
        for key in ("loss", "grad_norm", "reward/mean") if r.get("learn/updates", 1.0) else ("reward/mean",):
            assert math.isfinite(r[key]), (preset, key, r[key])
    if DEVICE:
        placed = next(trainer.model.parameters()).device
        assert placed.type == DEVICE.split(":")[0], f"{preset}: model.device={DEVICE} trained on {placed}"
