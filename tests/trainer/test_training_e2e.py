"""Seconds-long end-to-end runs of the real trainer on a tiny random model."""

import json
import math

import pytest
import torch

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
    assert math.isfinite(m["kl"]) and m["kl"] >= 0.0  # k3 is non-negative
    assert "grad_norm" in m


def test_no_reference_model_when_beta_is_zero(tiny_cfg):
    model, tok = tiny_model_and_tokenizer(seed=0)
    trainer = Trainer(tiny_cfg(**{"algorithm.beta": 0.0}), model=model, tokenizer=tok)
    assert trainer.ref_model is None
    assert "kl" not in trainer.train_step()


def test_entropy_bonus_runs_and_kl_none_with_beta_is_refused(tiny_cfg):
    from grpokit.trainer.inputs import RunContractError

    model, tok = tiny_model_and_tokenizer(seed=0)
    with pytest.raises(RunContractError, match="^algorithm.beta = 0.1 with algorithm.kl 'none' adds no KL term"):
        Trainer(tiny_cfg(**{"algorithm.kl": "none", "algorithm.beta": 0.1}), model=model, tokenizer=tok)  # before: KL silently 0
    trainer = Trainer(tiny_cfg(**{"train.steps": 1, "algorithm.entropy_coef": 0.01}), model=model, tokenizer=tok)
    assert trainer.ref_model is None
    m = trainer.train_step()
    assert "kl" not in m and m["entropy"] > 0


def length_reward(prompts, completions, **_):
    """A reward with variance inside every group: completion length."""
    return [len(c) / 10 for c in completions]


def test_humanline_reference_is_the_pre_update_policy(tiny_cfg):
    cfg = tiny_cfg(**{"train.steps": 2, "algorithm.loss": "humanline", "algorithm.ref_sync_every": 1, "optim.lr": 0.01,
                      "rewards": f"[{{name: '{__file__}:length_reward'}}]", "rollout.max_new_tokens": 8})
    model, tok = tiny_model_and_tokenizer(seed=0)
    trainer = Trainer(cfg, model=model, tokenizer=tok)
    assert trainer.ref_model is not None  # humanline needs ref_logp even at beta = 0
    trainer.train_step()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train_step()
    # the sync at the start of step 2 copied the policy as it was before step 2's update
    assert any(not torch.equal(a, p) for a, p in zip(before, trainer.model.parameters()))
    for b, r in zip(before, trainer.ref_model.parameters()):
        assert torch.equal(b, r)


def test_drpo_state_is_checkpointed_and_restored(tiny_cfg, tmp_path):
    cfg = tiny_cfg(**{"train.steps": 2, "algorithm.advantage": "drpo", "logging.checkpoint_every": 1,
                      "data.task_options": "{operators: ['+', '-'], digits: 1}"})
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    trainer.train()
    saved = trainer.advantage_state.state_dict()
    assert saved  # per-domain history was recorded
    resumed = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    assert resumed.resume()
    restored = resumed.advantage_state.state_dict()
    assert json.dumps(restored, default=str, sort_keys=True) == json.dumps(saved, default=str, sort_keys=True)


def test_curriculum_and_combiner_run_log_and_checkpoint(tiny_cfg):
    cfg = tiny_cfg(**{
        "train.steps": 2, "logging.checkpoint_every": 1,
        "data.task_options": "{operators: ['+'], digits: 1}",
        "data.curriculum": "pass_rate_filter",
        "data.curriculum_options": "{online: true, min_observations: 1}",
        "reward_combiner.name": "normalize_sum",
        "rewards": f"[{{name: answer_match, weight: 1.0}}, {{name: '{__file__}:length_reward', weight: 0.5}}]",
    })
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    trainer.train()
    rows = [json.loads(l) for l in (cfg_dir(cfg) / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("curriculum/") for k in rows[-1])
    assert any(k.startswith("combiner/") for k in rows[-1])
    state = trainer.sampler.curriculum.state_dict()
    resumed = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    assert resumed.resume()
    assert json.dumps(resumed.sampler.curriculum.state_dict(), sort_keys=True, default=str) == json.dumps(
        state, sort_keys=True, default=str
    )


def first_char(prompts, completions, **_):
    """Varies inside every group of random text, whatever the lengths: first character's code mod 5."""
    return [(ord(c[0]) % 5) / 5 if c else 0.0 for c in completions]


def last_char(prompts, completions, **_):
    return [(ord(c[-1]) % 3) / 3 if c else 0.0 for c in completions]


def test_mirror_descent_moves_weights_from_objective_gradients(tiny_cfg):
    cfg = tiny_cfg(**{
        "train.steps": 1, "rollout.max_new_tokens": 8,
        "rewards": f"[{{name: '{__file__}:first_char'}}, {{name: '{__file__}:last_char'}}]",
        "reward_combiner.name": "mirror_descent",
        "reward_combiner.options": "{rho: 1.0e-3, grad_param_pattern: 'layers\\.'}",
    })
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    m = trainer.train_step()
    # both weights start at 0.5; nonzero per-objective gradients move them on the simplex
    assert m["combiner/w0"] + m["combiner/w1"] == pytest.approx(1.0, abs=1e-5)
    assert m["combiner/w0"] != pytest.approx(0.5, abs=1e-6)
    assert "combiner/influence0" in m


def test_hypervolume_combiner_gets_online_validation_vectors(tiny_cfg):
    cfg = tiny_cfg(**{
        "train.steps": 2, "rollout.max_new_tokens": 8,
        "rewards": f"[{{name: '{__file__}:length_reward'}}, {{name: '{__file__}:count_x'}}]",
        "reward_combiner.name": "hypervolume", "algorithm.advantage": "dr_grpo",  # a std-dividing advantage cancels m (refused)
    })
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    trainer.train_step()
    m = trainer.train_step()
    assert trainer.combiner_state.buffer.shape[0] >= 1  # the Pareto buffer saw the validation vectors
    assert "combiner/meta_reward" in m


def test_disco_preset_constrains_its_later_mini_batches(tmp_path):
    """DisCO's preset (the authors' 4 mini-batches per generation): the KL constraint is measured at moved weights.

    The first update of a generation is on-policy (D = 0, nothing measured); before each later one D is the
    token-mean of sampler minus current log-probs over that mini-batch, so it is non-zero once an update moved the
    policy. With one update per generation (the constraint's only other case) it never acts.
    """
    from grpokit.config import load_config

    sets = [f"logging.output_dir={tmp_path}", "logging.progress=false", "logging.log_samples_every=0", "data.n_train=20",
            "data.n_heldout=8", "rollout.group_size=4", "rollout.prompts_per_step=4", "rollout.max_new_tokens=6",
            "train.micro_batch_size=4", "eval.before=false", "eval.after=false", "optim.lr=0.01",
            f"rewards=[{{name: '{__file__}:length_reward'}}]"]
    trainer = Trainer(load_config(preset="disco", overrides=sets), *tiny_model_and_tokenizer(seed=0))
    m = trainer.train_step()
    assert m["learn/updates"] > 1.0  # several mini-batch updates on one generation (a group of equal lengths takes none)
    assert m["disco/constraint_kl"] != 0.0
    on_policy = Trainer(load_config(preset="disco", overrides=sets + ["algorithm.mini_batches=1"]),
                        *tiny_model_and_tokenizer(seed=0)).train_step()
    assert on_policy["learn/updates"] == 1.0 and "disco/constraint_kl" not in on_policy


def test_groupwise_loss_needs_whole_groups_per_micro_batch(tiny_cfg):
    cfg = tiny_cfg(**{"algorithm.loss": "disco", "train.micro_batch_size": 3, "rollout.group_size": 4})
    with pytest.raises(ValueError, match="multiple of rollout.group_size"):
        Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
