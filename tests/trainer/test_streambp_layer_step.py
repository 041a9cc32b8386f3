"""train.streambp=layer through the real learners: GRPO / GSPO steps and SFT / DPO gradients equal the plain ones."""

from pathlib import Path

import pytest
import torch

from grpokit.config import load_config
from grpokit.model import streambp_layers
from grpokit.testing import save_tiny_model, tiny_model_and_tokenizer
from grpokit.trainer.inputs import RunContractError
from grpokit.trainer.loop import Trainer
from grpokit.trainer.memory import allocate_gradients
from grpokit.trainer.offline import OfflineTrainer

DATA = Path(__file__).resolve().parents[2] / "examples" / "offline"
LAYER = {"train.streambp": "layer", "train.sequence_chunk": 3}


@pytest.fixture
def streamed_calls(monkeypatch):
    """How many decoder-layer calls went through StreamBP's chunked function (the mechanism acted)."""
    calls = []
    real = streambp_layers._StreamedLayer.apply
    monkeypatch.setattr(streambp_layers._StreamedLayer, "apply", lambda *a: calls.append(1) or real(*a))
    return calls


def _step_gradient(cfg):
    """(metrics, flat gradient before clipping) of one GRPO training step on the tiny model."""
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=5))
    grads, step = [], trainer._optimizer_step

    def spy():
        grads.append(torch.cat([p.grad.flatten() for p in trainer.policy.trainable_parameters()]))
        return step()

    trainer._optimizer_step = spy
    return trainer.train_step(), torch.cat(grads)


@pytest.mark.parametrize("algorithm", [
    {"algorithm.ratio": "token", "algorithm.beta": 0.04},  # GRPO: token ratio, clipped surrogate + k3 KL
    {"algorithm.ratio": "sequence", "algorithm.entropy_coef": 0.01},  # GSPO: a sequence-level ratio, plus an entropy bonus
])
def test_grpo_step_gradient_equals_the_plain_step(tiny_cfg, algorithm, streamed_calls):
    common = {**algorithm, "rollout.max_new_tokens": 10,
              "rewards": "[{name: length_target, kwargs: {target: 3}}]"}  # varies within a group: advantages are not 0
    m0, g0 = _step_gradient(tiny_cfg(**common))
    assert not streamed_calls
    m1, g1 = _step_gradient(tiny_cfg(**common, **LAYER))
    assert streamed_calls  # the layers went through the chunked backward
    assert m0["reward/mean"] == m1["reward/mean"] and m0["completion_len/max"] > 3  # same rollouts, several chunks
    scale = g0.abs().max()
    assert scale > 0 and (g1 - g0).abs().max() <= 1e-5 * scale
    assert abs(m0["loss"] - m1["loss"]) <= 1e-5 * max(1.0, abs(m0["loss"]))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def _offline(tiny_dir, out, stage, **overrides):
    sets = ["logging.progress=false", "eval.max_new_tokens=4", f"stage={stage}", "data.task=null",
            f"data.path={DATA / (stage + '.jsonl')}", f"model.name={tiny_dir}", f"logging.output_dir={out}",
            "data.heldout_fraction=0.0"]
    return OfflineTrainer(load_config(overrides=sets + [f"{k}={v}" for k, v in overrides.items()]))


def _offline_gradient(trainer, examples):
    params = list(trainer.policy.trainable_parameters())
    allocate_gradients(params)
    trainer.objective(examples, learn=True)
    return torch.cat([p.grad.flatten() for p in params])


@pytest.mark.parametrize("stage", ["sft", "dpo"])
def test_offline_gradient_equals_the_plain_one(stage, tiny_dir, tmp_path, streamed_calls):
    """SFT's token-mean NLL and DPO's -log sigmoid(beta c) (sequence-level): the whole-sequence gradient."""
    plain = _offline(tiny_dir, tmp_path / "a", stage)
    examples = plain.train_examples[:6]
    reference = _offline_gradient(plain, examples)
    streamed = _offline_gradient(_offline(tiny_dir, tmp_path / "b", stage, **LAYER), examples)
    assert streamed_calls
    scale = reference.abs().max()
    assert scale > 0 and (streamed - reference).abs().max() <= 1e-5 * scale


def test_layer_without_a_chunk_is_refused_at_load(tiny_cfg, tiny_dir, tmp_path):
    with pytest.raises(RunContractError, match=r"^train.streambp=layer .* set train.sequence_chunk > 0"):
        Trainer(tiny_cfg(**{"train.streambp": "layer"}), *tiny_model_and_tokenizer(seed=5))
    with pytest.raises(RunContractError, match=r"^train.streambp=layer .* set train.sequence_chunk > 0"):
        _offline(tiny_dir, tmp_path / "c", "sft", **{"train.streambp": "layer"})
