"""`grpokit train --preset X` on the real embedded model, one step each (slow).

Beyond a finite loss, every preset must log its method's own metric and a value proving the
mechanism acted on the real model (a span found, forking tokens selected, verification tokens
trained, a teacher that differs from the student, a label-free reward, a regression term that is
non-zero). Where one step cannot show it, ``EXTRA`` gives the preset the steps or updates it needs
and the assertions read the last step.
"""

import json
from pathlib import Path

import pytest

from grpokit.cli import main
from grpokit.config import load_config, preset_names

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def train_reward_models_the_preset_needs(preset):
    """Presets that score with a trained reward model get one, trained here on synthetic labels."""
    from grpokit.rewards.reward_model import train_regression_rm
    from grpokit.rm_cli import make_synthetic_rm_data

    for r in load_config(preset=preset).rewards:
        if "model_path" in r.kwargs:
            rows = make_synthetic_rm_data(120, seed=0)
            train_regression_rm(rows, "response", ["politeness", "safety", "actionability"], r.kwargs["model_path"],
                                freeze_backbone=True, epochs=20, max_length=32)


MECHANISM = {
    # flow-matching images: the SDE steps are the trained units (Flow-GRPO 9 of 10 in order; Pref-GRPO a random 60%)
    "flow_grpo": [("flow/trained_steps", lambda v: v == 9), ("flow/step_logp", lambda v: v == v)],
    "pref_grpo_image": [("flow/trained_steps", lambda v: v == 6),
                        ("reward/win_rate/mean", lambda v: abs(v - 0.5) < 1e-4)],  # every comparison hands out one point
    "dpp_grpo_image": [("flow/trained_steps", lambda v: v == 9), ("reward/dpp/std", lambda v: v > 0)],  # diversity differs
    # masked-diffusion LMs: each estimator's own units (ESPO: the ELBO over the whole canvas; d1: tokens through [EOS];
    # Mask-GRPO: the unmasking steps) and, with mu > 1 updates on a batch, a ratio and a KL that moved off 1 and 0
    "espo": [("mdm/units_per_sample", lambda v: v == 8), ("ratio/mean", lambda v: v != 1.0), ("kl", lambda v: v > 0)],
    "diffu_grpo": [("mdm/units_per_sample", lambda v: 0 < v <= 8), ("ratio/mean", lambda v: v != 1.0), ("kl", lambda v: v > 0)],
    "mask_grpo": [("mdm/units_per_sample", lambda v: v == 8), ("ratio/mean", lambda v: abs(v - 1.0) < 1e-6)],  # K = 8, on-policy
    "co_grpo": [("schedule/moved", lambda v: v > 0)],  # the schedule policy phi took a gradient step with the predictor
    "dapo": [("dynamic_sampling/rounds", lambda v: v >= 1), ("overlong/penalised_frac", lambda v: 0 <= v <= 1)],
    "intellect2": [("clip/dual_frac", lambda v: 0 <= v <= 1), ("dynamic_sampling/rounds", lambda v: v >= 1)],
    "spine": [("tokens/selected_frac", lambda v: 0 < v < 1),  # only the top-rho entropy (forking) tokens
              ("reward/majority_vote/mean", lambda v: 0 <= v <= 1),  # label-free: agreement with the majority
              ("band/penalty", lambda v: v >= 0)],  # the entropy band is on
    "ts_grpo": [("spans/plan_frac", lambda v: v > 0)],  # a planning span was found in the sampled text
    "grpo_verif": [("verif/token_frac", lambda v: v > 0),  # verification tokens are in the loss
                   ("reward/answer_tiers/mean", lambda v: -1.5 <= v <= 1)],  # solutions scored +1 / -1 / -1.5
    "drpo": [("drpo/k_mean", lambda v: v >= 1)],  # difficulty clusters were formed per domain
    "reg_grpo": [("reg/sq_err", lambda v: v == v), ("reg/rho_std", lambda v: v > 0)],  # mu = 2: the regression acts
    "deepvideo_r1": [("reg/rho_std", lambda v: v > 0), ("curriculum/hint_refused", lambda v: v == 0),
                     ("vision/video_tokens", lambda v: v > 0)],  # the clips reached the model as video tokens
    "crpo": [("combiner/w0", lambda v: v == 10.0)],  # the fixed weighted sum, 10 r_acc + ...
    "pref_grpo": [("adv/clipped_frac", lambda v: 0 <= v <= 1),  # the advantage clip at 5 is applied
                  ("reward/win_rate/mean", lambda v: abs(v - 0.5) < 1e-4)],  # every comparison hands out one point
    "ttrl": [("reward/majority_vote/mean", lambda v: 0 <= v <= 1)],
    "disco": [("disco/valid_frac", lambda v: 0 <= v <= 1)],
    "lambda_grpo": [("lambda/weight_mean", lambda v: 0 < v <= 1)],
    "variational": [  # posterior traces sampled with the answer in the prompt and trained on with weights rho~ > 0
        ("variational/posterior_rows", lambda v: v == 2 * 4), ("variational/hint_in_prompt", lambda v: v == 1.0),
        ("variational/posterior_trained_frac", lambda v: 0 < v <= 1), ("variational/ess", lambda v: 1 <= v <= 4),
    ],
    "kdrl": [("kd/mask_frac", lambda v: 0 <= v <= 1),
             ("kd/teacher_gap", lambda v: v > 0)],  # the teacher (a demo run trained first) is not the student
    "humanline": [("humanline/unclamped_frac", lambda v: 0 <= v <= 1)],
    "grpo": [("adv/mean", lambda v: abs(v) < 1e-6), ("kl", lambda v: v >= 0)],  # group-relative advantage, beta KL on
    "dr_grpo": [("adv/mean", lambda v: abs(v) < 1e-6), ("adv/abs_mean", lambda v: v <= 1.0)],  # R - mean, no std
    "gspo": [("ratio/mean", lambda v: v != 1.0)],  # second update: the sequence-level ratio has moved
    "dpp_grpo": [("reward/dpp/mean", lambda v: v > 0)],  # marginal log-det gains of distinct completions
    "dynamic_weights": [("combiner/influence0", lambda v: v == v), ("combiner/w0", lambda v: v > 0)],
    "sql": [("reward/sql_execution/mean", lambda v: 0 <= v <= 1), ("reward/sql_schema_f1/mean", lambda v: 0 <= v <= 1)],
    "safe_multilabel": [("reward/rm_score/mean", lambda v: v == v)],  # scored by the multi-label reward model
    "guess_number": [("env/turns", lambda v: v > 1),  # episodes went on after "higher" / "lower"
                     ("env/observation_tokens", lambda v: v > 0), ("env/valid_guess", lambda v: 0 <= v <= 1)],
    "tool_use": [("env/tool_calls", lambda v: v >= 0),  # the tools environment parsed every final turn
                 ("env/answered", lambda v: 0 <= v <= 1), ("env/well_formed", lambda v: 0 <= v <= 1)],
    "activevln": [("env/turns", lambda v: v >= 1), ("env/steps", lambda v: v >= 0),  # episodes ran in the world
                  # (after 3 imitation steps most first turns may still be malformed: steps can be 0)
                  ("env/budget", lambda v, m: abs(v - 2 * m["env/n_gt"]) < 1e-6),  # the step budget: 2 x the expert path
                  ("env/pruned", lambda v: 0 <= v <= 1)],
    "activevln_sft": [("loss", lambda v: v > 0), ("tokens", lambda v: v > 0)],
    "tool_use_sft": [("loss", lambda v: v > 0), ("tokens", lambda v: v > 0)],
    "vision_grpo": [("vision/image_tokens", lambda v: v > 0),  # every prompt carried its image's tokens
                    ("adv/abs_mean", lambda v: v > 0)],  # answers about the images differed within groups
    "papo": [("papo/kl_prcp", lambda v: v > 0)],  # the patch-blackened image changed the answers' log-probs
    "sft": [("loss", lambda v: v > 0)],
    "dpo": [("rewards/margins", lambda v: v > 0)],  # after 3 steps the chosen completions beat the rejected ones
    "kto": [("rewards/margins", lambda v: v > 0)],
}
EXTRA = {  # presets whose mechanism needs more than one update to show
    "gspo": ["algorithm.num_iterations=2"],
    # the masked-diffusion LMs at the canvas they were pretrained on (8), where rewards differ within groups
    "espo": ["rollout.max_new_tokens=8"], "diffu_grpo": ["rollout.max_new_tokens=8"], "mask_grpo": ["rollout.max_new_tokens=8"],
    "co_grpo": ["rollout.max_new_tokens=64"],  # the 64 image tokens
    "papo": ["data.task_options={kinds: [colour]}"],  # the questions the noisy prior answers by looking
    "sft": ["train.steps=3"], "dpo": ["train.steps=3"], "kto": ["train.steps=3"],
}


def train_the_stage_the_preset_starts_from(preset):
    """A preset whose model is a run another preset writes (ActiveVLN's GRPO starts from its imitation run): 3 steps of that one."""
    name = load_config(preset=preset).model.name
    writers = [p for p in preset_names() if load_config(preset=p).logging.output_dir == name]
    if writers:
        assert main(["train", "--preset", writers[0], "--set", f"logging.output_dir={name}", "--set", "train.steps=3",
                     "--set", "data.n_train=8", "--set", "data.n_heldout=2", "--set", "eval.before=false",
                     "--set", "eval.after=false", "--set", "logging.progress=false"]) == 0


def train_the_teacher_the_preset_needs(preset):
    """KDRL's teacher is a run grpokit trained first (``runs/demo``, relative to the test's folder): 2 demo steps."""
    teacher = load_config(preset=preset).model.teacher
    if teacher:
        assert main(["train", "--preset", "demo", "--set", f"logging.output_dir={teacher}", "--set", "train.steps=2",
                     "--set", "rollout.max_new_tokens=16", "--set", "eval.before=false", "--set", "eval.after=false",
                     "--set", "logging.progress=false"]) == 0


@pytest.mark.parametrize("preset", [p for p in preset_names() if p != "demo"])
def test_preset_runs_on_real_model(preset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths of a preset (reward models, runs/) land here
    train_reward_models_the_preset_needs(preset)
    train_the_teacher_the_preset_needs(preset)
    train_the_stage_the_preset_starts_from(preset)
    cfg = load_config(preset=preset)
    data = cfg.data.path if cfg.stage != "grpo" else None  # offline presets (sft, dpo, kto) read the repository's example data
    code = main([
        "train", "--preset", preset, *(["--set", f"data.path={REPO / data}"] if data else []),
        "--set", f"logging.output_dir={tmp_path / 'run'}",
        "--set", "train.steps=1",
        "--set", "rollout.prompts_per_step=2",
        "--set", "rollout.max_new_tokens=16",
        "--set", "eval.before=false", "--set", "eval.after=false",
        "--set", "logging.progress=false",
        *[arg for extra in EXTRA.get(preset, []) for arg in ("--set", extra)],
    ])
    assert code == 0
    m = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert m["loss"] == m["loss"]  # not NaN
    for key, holds in MECHANISM.get(preset, []):
        assert key in m, (preset, key)
        args = (m[key], m) if holds.__code__.co_argcount == 2 else (m[key],)  # a check may read the step's other metrics
        assert holds(*args), (preset, key, m[key])
