"""INTELLECT-2 offline difficulty filter: keep prompts with pass rate 0 < p < 1 under the initial policy."""

import math

import pytest
import torch

from grpokit.config import load_config
from grpokit.data.offline_filter import offline_difficulty_filter, pass_rates
from grpokit.rewards import NamedReward
from grpokit.rewards.builtin import answer_match
from grpokit.rollout.types import RolloutBatch, SamplingParams
from grpokit.testing import save_tiny_model
from grpokit.trainer.setup import build_splits
from grpokit.trainer.loop import Trainer


class ScriptedBackend:
    """Returns each row's scripted completions (``row["outs"]``, k of them), prompt-major."""

    def __init__(self):
        self.calls = []

    def generate(self, prompt_texts, rows, group_size, params):
        self.calls.append((len(rows), group_size))
        outs = [c for row in rows for c in row["outs"][:group_size]]
        b = len(outs)
        ids = lambda: torch.ones(b, 1, dtype=torch.long)  # noqa: E731
        return RolloutBatch(ids(), ids(), ids(), ids(), torch.arange(len(rows)).repeat_interleave(group_size),
                            torch.zeros(b, 1), torch.zeros(b, dtype=torch.bool), None,
                            [r["prompt"] for r in rows for _ in range(group_size)], outs,
                            [r for r in rows for _ in range(group_size)])


ROWS = [
    {"prompt": "always", "answer": "1", "outs": ["1", "1", "1", "1"]},  # p = 1: dropped (too easy)
    {"prompt": "half", "answer": "2", "outs": ["2", "0", "2", "0"]},  # p = 0.5: kept
    {"prompt": "never", "answer": "3", "outs": ["0", "0", "0", "0"]},  # p = 0: dropped (hopeless)
    {"prompt": "once", "answer": "4", "outs": ["0", "0", "0", "4"]},  # p = 0.25: kept
]
JUDGE = NamedReward(name="answer_match", fn=answer_match, weight=1.0)


def test_pass_rates_count_judged_correct_samples_per_prompt():
    backend = ScriptedBackend()
    rates = pass_rates(backend, ROWS, lambda rows: [r["prompt"] for r in rows], JUDGE, samples=4,
                       params=SamplingParams(), batch_size=3)
    assert rates == [1.0, 0.5, 0.0, 0.25]
    assert backend.calls == [(3, 4), (1, 4)]  # prompts in batches of 3, k = 4 samples each


def test_filter_keeps_only_prompts_with_rates_strictly_between_0_and_1():
    cfg = load_config(overrides=["data.offline_filter_samples=4", "eval.batch_size=2"])
    kept = offline_difficulty_filter(cfg, ScriptedBackend(), ROWS, lambda rows: [r["prompt"] for r in rows], JUDGE)
    assert [r["prompt"] for r in kept] == ["half", "once"]
    with pytest.raises(ValueError, match="data.offline_filter_samples=4.*set it to 0"):
        offline_difficulty_filter(cfg, ScriptedBackend(), [ROWS[0], ROWS[2]], lambda rows: [r["prompt"] for r in rows], JUDGE)


def prompt_keyed_reward(prompts, completions, **kw):
    """'*' problems always pass, '-' never, '+' on about half the samples (parity of the first character)."""
    out = []
    for prompt, text in zip(prompts, completions):
        if "*" in prompt or "-" in prompt:
            out.append(float("*" in prompt))
        else:
            out.append(float(bool(text) and ord(text[0]) % 2 == 0))
    return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_trainer_filters_before_training_on_the_tiny_model(tiny_dir, tmp_path):
    cfg = load_config(overrides=[
        f"model.name={tiny_dir}", f"logging.output_dir={tmp_path}", "logging.progress=false",
        "data.n_train=12", "data.n_heldout=2", "rollout.group_size=4", "rollout.prompts_per_step=2",
        "rollout.max_new_tokens=4", "train.micro_batch_size=8", "eval.before=false", "eval.after=false",
        "data.offline_filter_samples=6", f"rewards=[{{name: '{__file__}:prompt_keyed_reward'}}]",
    ])
    full = [r["prompt"] for r in build_splits(cfg.data).train]
    trainer = Trainer(cfg)
    kept = [r["prompt"] for r in trainer.splits.train]
    # '*' (rate 1) and '-' (rate 0) problems go; '+' problems stay unless all 6 samples agree (p = 1/32)
    assert any("*" in q or "-" in q for q in full) and any("+" in q for q in full)
    assert kept and set(kept) <= {q for q in full if "+" in q}
    assert trainer.sampler.rows is trainer.splits.train  # training draws only the kept prompts
    assert math.isfinite(trainer.train_step()["loss"])


def test_a_separate_model_can_compute_the_solve_rates(tiny_dir, tmp_path, monkeypatch):
    import grpokit.data.offline_filter as offline_filter

    solver_dir = save_tiny_model(tmp_path / "solver", seed=3)
    seen = []
    real = offline_filter.offline_difficulty_filter

    def spy(cfg, backend, rows, render, judge):
        seen.append(backend)
        return real(cfg, backend, rows, render, judge)

    monkeypatch.setattr(offline_filter, "offline_difficulty_filter", spy)
    overrides = [
        f"model.name={tiny_dir}", f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false",
        "data.n_train=12", "data.n_heldout=2", "rollout.group_size=4", "rollout.prompts_per_step=2",
        "rollout.max_new_tokens=4", "train.micro_batch_size=8", "eval.before=false", "eval.after=false",
        "data.offline_filter_samples=6", f"rewards=[{{name: '{__file__}:prompt_keyed_reward'}}]",
    ]
    cfg = load_config(overrides=[*overrides, f"data.offline_filter_model={solver_dir}"])
    trainer = Trainer(cfg)
    assert len(seen) == 1 and seen[0] is not trainer.backend  # the solver's own backend, not the policy's
    solver_w = seen[0].model.model.embed_tokens.weight
    assert not torch.equal(solver_w, trainer.model.model.embed_tokens.weight)  # another model's weights (seed 3)
    assert trainer.splits.train and {r["prompt"] for r in trainer.splits.train} <= {r["prompt"] for r in build_splits(cfg.data).train}
    with pytest.raises(ValueError, match="data.offline_filter_model"):
        Trainer(load_config(overrides=[*overrides, "data.offline_filter_model=/no/such/model"]))
