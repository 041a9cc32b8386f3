"""DPP-GRPO's two stages on the tiny model: SFT on prompt_rewrites demonstrations, then GRPO with the R_q reward."""

import json
import math

import pytest

from grpokit.cli import main
from grpokit.testing import implicit_device_recorder, save_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def sets(pairs):
    return [a for p in pairs for a in ("--set", p)]


SMALL = ["logging.progress=false", "logging.log_samples_every=0", "data.n_train=16", "data.n_heldout=4",
         "model.lora.target_modules=[q_proj, v_proj]", "train.max_minutes=0"]


def test_sft_warm_up_then_grpo_against_the_reference_sets(tiny_dir, tmp_path):
    sft, grpo = tmp_path / "sft", tmp_path / "grpo"
    with implicit_device_recorder() as rec:
        assert main(["train", "--preset", "dpp_rewrite_sft", *sets(SMALL + [
            f"model.name={tiny_dir}", f"logging.output_dir={sft}", "train.steps=2", "logging.checkpoint_every=2",
            "offline.batch_size=4", "train.micro_batch_size=4", "eval.before=true", "eval.max_new_tokens=4"])]) == 0
        assert main(["train", "--preset", "dpp_rewrite", *sets(SMALL + [
            f"model.name={sft}", "model.family=causal_lm", f"logging.output_dir={grpo}", "train.steps=2",
            "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=8", "train.micro_batch_size=4"])]) == 0
    assert not rec.hits, rec.report()
    sft_rows = [json.loads(x) for x in (sft / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in sft_rows] == [1, 2]
    rows = [json.loads(x) for x in (grpo / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        # every rewrite scored against its row's R_q: r = 0.5 Δ + 0.5 R_rel, Δ in (0, log 2], |R_rel| <= 1
        assert math.isfinite(r["loss"]) and -0.5 < r["reward/dpp/mean"] <= 0.5 * math.log(2) + 0.5 + 1e-6
