"""Reward / preset fidelity (issue 13, faults 7, 9, 10, 11 and Reg-GRPO's half of 4), through the real trainer.

Each test trains the tiny random model for a step or two with a packaged preset and checks the
paper's mechanism in the step's metrics; they use only APIs that existed at d3cb0f9, so on that
commit they fail on behaviour (the hint half of fault 4 is tests/data/test_curricula_hints.py).
"""

import json
import math

import pytest
import torch

from grpokit.config import load_config
from grpokit.rewards import score_completions
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.loop import Trainer
from grpokit.trainer.setup import build_rewards, build_splits

TINY = [
    "logging.progress=false", "logging.log_samples_every=0", "data.n_train=16", "data.n_heldout=4",
    "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=8",
    "train.micro_batch_size=4", "train.max_minutes=0", "eval.before=false", "eval.after=false",
]


def preset_trainer(preset, tmp_path, *extra):
    cfg = load_config(preset=preset, overrides=TINY + [f"logging.output_dir={tmp_path / 'run'}", *extra])
    return Trainer(cfg, *tiny_model_and_tokenizer(seed=0))


# ----------------------------------------------------------------------------- fault 4: Reg-GRPO


def test_reg_grpo_preset_regresses_a_nonzero_log_ratio(tmp_path):
    # rho is taken against the policy one optimizer update behind (the previous iteration's pi_old),
    # so even with mu = 1 (old_logp = detached logp) every batch after the run's first has rho != 0.
    # The run's first update has no earlier policy: rho = 0 there (reg/rho_std = 0).
    trainer = preset_trainer("reg_grpo", tmp_path)  # the preset: mu = 1, beta = 0.1 (a frozen reference copy)
    first, second = trainer.train_step(), trainer.train_step()
    assert first["reg/rho_std"] == 0.0, first
    assert second["reg/rho_std"] > 1e-4 and math.isfinite(second["reg/sq_err"]), second
    # with mu = 2 the second update of the first batch already sees a moved policy
    m = preset_trainer("reg_grpo", tmp_path / "mu2", "algorithm.num_iterations=2").train_step()
    assert m["reg/rho_std"] > 0 and math.isfinite(m["reg/sq_err"]), m


def test_reg_grpo_resumes_with_the_previous_policy_it_was_regressing_against(tmp_path):
    # the snapshot travels in the checkpoint: a resumed run's first update is not a rho = 0 step
    trainer = preset_trainer("reg_grpo", tmp_path)
    trainer.train_step(), trainer.train_step()
    trainer.save()
    again = preset_trainer("reg_grpo", tmp_path)
    assert again.policy.previous_weights() is None
    again.resume()
    saved, loaded = trainer.policy.previous_weights(), again.policy.previous_weights()
    assert len(saved) == len(loaded) and all(torch.equal(a, b) for a, b in zip(saved, loaded))
    assert any(not torch.equal(a, p) for a, p in zip(loaded, again.policy.trainable_parameters()))  # one update behind
    assert again.train_step()["reg/rho_std"] > 1e-4


def test_reg_grpo_refuses_to_resume_a_checkpoint_without_the_previous_policy(tmp_path):
    # a checkpoint written before the snapshot was saved: one line naming the missing state, not a KeyError
    from grpokit.trainer.inputs import RunContractError

    trainer = preset_trainer("reg_grpo", tmp_path)
    trainer.train_step()
    ckpt = trainer.save()
    extra = torch.load(ckpt / "extra.pt", weights_only=False)
    extra.pop("previous_weights")
    torch.save(extra, ckpt / "extra.pt")
    with pytest.raises(RunContractError, match="holds no 'previous_weights' state"):
        preset_trainer("reg_grpo", tmp_path).resume()


# ----------------------------------------------------------------------------- fault 7: CRPO


def test_crpo_preset_trains_on_the_fixed_weighted_sum(tmp_path):
    # paper: r = 10 r_acc + r_fmt + 0.5 r_lang + r_faith + r_comp, then GRPO's z-score of r.
    # A per-objective z-score sum (normalize_sum) has group mean 0, so its batch mean is 0.
    trainer = preset_trainer("crpo", tmp_path)
    m = trainer.train_step()
    weights = {"crpo_accuracy": 10.0, "crpo_format": 1.0, "crpo_language": 0.5,
               "crpo_faithfulness": 1.0, "crpo_comprehensiveness": 1.0}
    # clinical_mcq rows carry their options: every objective is scored on every row (none is NaN)
    assert all(math.isfinite(m[f"reward/{name}/mean"]) for name in weights), m
    expected = sum(w * m[f"reward/{name}/mean"] for name, w in weights.items())
    assert expected > 0.1  # the tiny model writes ASCII text: r_lang > 0, r_faith = 0.5 (undeterminable)
    assert m["reward/mean"] == pytest.approx(expected, abs=1e-5)


# ----------------------------------------------------------------------------- fault 9: SPINE


def test_spine_preset_is_label_free_with_the_entropy_band(tmp_path):
    data = tmp_path / "unlabelled.jsonl"  # no answer column at all
    data.write_text("".join(json.dumps({"question": f"What is {a} + {a}?"}) + "\n" for a in range(12)))
    trainer = preset_trainer(
        "spine", tmp_path, f"data.path={data}", "data.task=null", "data.prompt_column=question",
        "data.answer_column=null", "train.steps=2",
    )
    assert all("answer" not in row for row in trainer.splits.train)
    for _ in range(2):
        m = trainer.train_step()
        # the training reward is the majority vote alone: total mean = agreement with the group's majority
        assert 0.0 <= m["reward/majority_vote/mean"] <= 1.0
        assert m["reward/mean"] == pytest.approx(m["reward/majority_vote/mean"], abs=1e-6)
        assert 0 < m["tokens/selected_frac"] < 1  # forking tokens only
        assert "band/penalty" in m  # the entropy band is on


# ----------------------------------------------------------------------------- fault 10: hypervolume


def in_heldout(prompts, completions, heldout=(), **_):
    """1.0 when the (rendered) prompt is one of the held-out questions, else 0.0."""
    return [float(any(q in str(p) for q in heldout)) for p in prompts]


def half(prompts, completions, **_):
    return [0.5] * len(completions)


def test_hypervolume_multiplier_comes_from_a_heldout_validation_batch(tiny_cfg):
    cfg = tiny_cfg(**{
        "train.steps": 2, "rollout.max_new_tokens": 6,
        "rewards": f"[{{name: '{__file__}:in_heldout', weight: 1.0}}, {{name: '{__file__}:half', weight: 0.5}}]",
        "reward_combiner.name": "hypervolume", "algorithm.advantage": "dr_grpo",  # a std-dividing advantage cancels m (refused)
    })
    cfg.rewards[0].kwargs["heldout"] = [row["prompt"] for row in build_splits(cfg.data).heldout]
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    first = trainer.train_step()
    # The reference (the initial model's validation vector) is measured on held-out prompts:
    # in_heldout = 1 there (it is 0 on every training prompt), half = 0.5.
    assert trainer.combiner_state.buffer[0].tolist() == [1.0, 0.5]
    assert first["combiner/meta_reward"] == 1.0  # m = 1 for step 1
    # training prompts: r = m (1·0 + 0.5·0.5) = 0.25 m
    assert first["reward/mean"] == pytest.approx(0.25)
    second = trainer.train_step()
    # the validation after update 1 gives (1, 0.5) again: dominated, dHV = 0 -> m = 0.5 + 1.5 tanh(0) = 0.5
    assert second["combiner/meta_reward"] == pytest.approx(0.5)
    assert second["reward/mean"] == pytest.approx(0.125)  # 0.25 · 0.5


def test_hypervolume_without_heldout_rows_is_refused_at_load(tiny_cfg):
    cfg = tiny_cfg(**{"data.n_heldout": 0, "reward_combiner.name": "hypervolume"})
    with pytest.raises(ValueError, match="needs input 'validation'.*data.n_heldout > 0"):
        Trainer(cfg)  # before any model is loaded


# ----------------------------------------------------------------------------- fault 11: Pref-GRPO, GRPO-Verif


def first_of_group(prompts, completions, **_):
    """1 for the first completion of the batch, 0 for the others (one prompt per step)."""
    return [1.0] + [0.0] * (len(completions) - 1)


def test_pref_grpo_preset_clips_the_advantage_at_5(tmp_path):
    # G = 30, rewards (1, 0 x 29): mean 1/30, unbiased var = (1/29)(29/30) = 1/30, std 0.182574;
    # A_1 = (29/30) / 0.182574 = 5.29465 > 5 -> clipped to 5; the others -(1/30)/0.182574 = -0.182574.
    trainer = preset_trainer(
        "pref_grpo", tmp_path, "rollout.group_size=30", "rollout.prompts_per_step=1", "train.micro_batch_size=30",
        f"rewards=[{{name: '{__file__}:first_of_group'}}]", "eval.accuracy_reward=null", "logging.samples_per_table=1",
    )
    m = trainer.train_step()
    samples = [json.loads(l) for l in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert samples[-1]["advantage"] == pytest.approx(5.0, abs=1e-6)  # the first completion's advantage
    assert m["adv/abs_mean"] == pytest.approx((5.0 + 29 * 0.182574) / 30, abs=1e-5)  # 0.343155


def test_pref_grpo_clip_is_exact_and_inert_below_the_bound():
    from grpokit.algos.advantages import grpo_advantage

    rewards, ids = torch.tensor([1.0] + [0.0] * 29), torch.zeros(30, dtype=torch.long)
    adv, m = grpo_advantage(rewards, ids, std_eps=1e-8, clip=5.0)
    assert adv[0] == pytest.approx(5.0) and adv[1] == pytest.approx(-0.182574, abs=1e-6)
    assert float(m["adv/clipped_frac"]) == pytest.approx(1 / 30)
    small = torch.tensor([1.0, 0.0, 0.0, 0.0])  # G = 4: |A| <= 3/2; A_1 = 0.75 / 0.5 = 1.5
    assert torch.equal(grpo_advantage(small, ids[:4], clip=5.0)[0], grpo_advantage(small, ids[:4])[0])
    with pytest.raises(ValueError, match="clip must be > 0"):
        grpo_advantage(small, ids[:4], clip=0.0)


def test_grpo_verif_preset_rewards_solutions_in_the_paper_tiers():
    cfg = load_config(preset="grpo_verif")
    scores = score_completions(build_rewards(cfg.rewards), ["q"] * 3, ["5", "The answer is 7", "no idea"],
                               {"answer": ["5", "5", "5"]})
    # +1 correct, -1 incorrect, -1.5 no valid answer
    assert scores.total.tolist() == [1.0, -1.0, -1.5]
    judge = [r.name for r in cfg.rewards].index(cfg.eval.accuracy_reward)
    assert judge == 0  # the tiered reward is also the accuracy judge (value >= 1 exactly when correct)
