"""`grpokit train --preset X` on the real embedded model, one step each (slow).

Beyond a finite loss, each preset in ``MECHANISM`` must log its method's own metric in that step,
and where one step can show it, a value proving the mechanism acted (a span found, forking tokens
selected, verification tokens trained). The other presets still check only the loss; making each
one prove its method on the real model is issue 13's work.
"""

import json

import pytest

from grpokit.cli import main
from grpokit.config import load_config, preset_names

pytestmark = pytest.mark.slow


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
    "dapo": [("dynamic_sampling/rounds", lambda v: v >= 1), ("overlong/penalised_frac", lambda v: 0 <= v <= 1)],
    "intellect2": [("clip/dual_frac", lambda v: 0 <= v <= 1), ("dynamic_sampling/rounds", lambda v: v >= 1)],
    "spine": [("tokens/selected_frac", lambda v: 0 < v < 1)],  # only the top-rho entropy (forking) tokens
    "ts_grpo": [("spans/plan_frac", lambda v: v > 0)],  # a planning span was found in the sampled text
    "grpo_verif": [("verif/token_frac", lambda v: v > 0)],  # verification tokens are in the loss
    "drpo": [("drpo/k_mean", lambda v: v >= 1)],  # difficulty clusters were formed per domain
    "reg_grpo": [("reg/sq_err", lambda v: v == v)],
    "disco": [("disco/valid_frac", lambda v: 0 <= v <= 1)],
    "lambda_grpo": [("lambda/weight_mean", lambda v: 0 < v <= 1)],
    "variational": [("variational/trained_frac", lambda v: 0 <= v <= 1)],
    "kdrl": [("kd/mask_frac", lambda v: 0 <= v <= 1)],
    "humanline": [("humanline/unclamped_frac", lambda v: 0 <= v <= 1)],
}


@pytest.mark.parametrize("preset", [p for p in preset_names() if p != "demo"])
def test_preset_runs_on_real_model(preset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths of a preset (reward models, runs/) land here
    train_reward_models_the_preset_needs(preset)
    code = main([
        "train", "--preset", preset,
        "--set", f"logging.output_dir={tmp_path / 'run'}",
        "--set", "train.steps=1",
        "--set", "rollout.prompts_per_step=2",
        "--set", "rollout.max_new_tokens=16",
        "--set", "eval.before=false", "--set", "eval.after=false",
        "--set", "logging.progress=false",
    ])
    assert code == 0
    m = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert m["loss"] == m["loss"]  # not NaN
    for key, holds in MECHANISM.get(preset, []):
        assert key in m and holds(m[key]), (preset, key, m.get(key))
