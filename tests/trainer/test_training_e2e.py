"""Seconds-long end-to-end runs of the real trainer on a tiny random model."""

import json

import pytest

from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.loop import Trainer


def count_x(prompts, completions, **_):
    """Trivially learnable reward: fraction of characters that are 'x'."""
    return [c.count("x") / max(len(c), 1) for c in completions]


def test_tiny_model_learns_trivial_reward(tiny_cfg):

    cfg = tiny_cfg(**{
        "rewards": f"[{{name: '{__file__}:count_x'}}]",
        "train.steps": 30,
        "optim.lr": 0.01,
        "rollout.temperature": 1.0,
        "rollout.group_size": 8,
        "rollout.prompts_per_step": 2,
        "rollout.max_new_tokens": 8,
        "train.micro_batch_size": 16,
        "eval.after": "true",
    })
    model, tok = tiny_model_and_tokenizer(seed=0)
    summary = Trainer(cfg, model=model, tokenizer=tok).train()
    rows = [json.loads(l) for l in (cfg_dir(cfg) / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 30
    first = sum(r["reward/mean"] for r in rows[:5]) / 5
    last = sum(r["reward/mean"] for r in rows[-5:]) / 5
    assert last > first + 0.3, (first, last)
    for key in ["reward/count_x/mean", "adv/zero_var_frac", "clip/frac", "entropy", "completion_len/mean",
                "tokens_per_s", "time/generation_s", "time/learn_s", "grad_norm", "lr"]:
        assert key in rows[0], key
    assert summary["after"]["n"] == 8
    assert (cfg_dir(cfg) / "report.md").is_file()
    assert (cfg_dir(cfg) / "samples.jsonl").is_file()


def cfg_dir(cfg):
    from pathlib import Path

    return Path(cfg.logging.output_dir)


@pytest.mark.parametrize("lora", [False, True])
def test_kl_and_mu_and_lora_run(tiny_cfg, lora):
    cfg = tiny_cfg(**{
        "train.steps": 2,
        "algorithm.beta": 0.1,
        "algorithm.num_iterations": 2,
        "model.lora.enabled": str(lora).lower(),
        "model.lora.target_modules": "[q_proj, v_proj]",
    })
    model, tok = tiny_model_and_tokenizer(seed=0)
    trainer = Trainer(cfg, model=model, tokenizer=tok)
    assert (trainer.ref_model is None) == lora  # LoRA uses the adapter-disabled base as reference
    m = trainer.train_step()
    assert m["kl"] == m["kl"]  # finite, present
    assert "grad_norm" in m


def test_no_reference_model_when_beta_is_zero(tiny_cfg):
    model, tok = tiny_model_and_tokenizer(seed=0)
    trainer = Trainer(tiny_cfg(**{"algorithm.beta": 0.0}), model=model, tokenizer=tok)
    assert trainer.ref_model is None
    assert "kl" not in trainer.train_step()
