"""examples/trl_quickstart.py and examples/trl_conversational.py, TRL scripts with only the import changed, run.

The scripts use TRL's default run length; the tests shorten it by handing the script a
GRPOConfig that adds a few keywords (max_steps, ...), so the script files stay as TRL's.
"""

import runpy
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import grpokit
from grpokit.api.trl_args import GRPOConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name, model, monkeypatch, tmp_path, **short):
    """The example's globals after running it on ``model`` with ``short`` keywords added to its GRPOConfig."""

    def shortened(output_dir=None, **kwargs):
        return GRPOConfig(output_dir=str(tmp_path / "out"), **{**kwargs, **short})

    monkeypatch.setattr(grpokit, "GRPOConfig", shortened, raising=False)
    monkeypatch.setattr(sys, "argv", [name, model])
    monkeypatch.chdir(tmp_path)
    return runpy.run_path(str(EXAMPLES / name), run_name="__main__")


TINY = dict(max_steps=2, per_device_train_batch_size=4, num_generations=2, max_completion_length=8, logging_steps=1,
            gradient_checkpointing=False, disable_tqdm=True)


@pytest.mark.parametrize("name, rewards", [
    ("trl_quickstart.py", ["reward_len"]),
    ("trl_conversational.py", ["format_reward_func", "reward_num_unique_chars"]),
])
def test_the_example_trains_the_tiny_model_and_saves_a_loadable_model(name, rewards, tiny_model_dir, monkeypatch, tmp_path):
    g = run_example(name, tiny_model_dir, monkeypatch, tmp_path, **TINY)
    trainer = g["trainer"]
    assert trainer.state.global_step == 2
    history = [e for e in trainer.state.log_history if "reward" in e]
    assert [e["step"] for e in history] == [1, 2]
    assert all(f"rewards/{r}/mean" in history[0] for r in rewards)
    trainer.save_model(str(tmp_path / "final"))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), trainer.model.state_dict().values()))


def test_the_conversational_example_feeds_message_lists_to_the_rewards(tiny_model_dir, monkeypatch, tmp_path):
    g = run_example("trl_conversational.py", tiny_model_dir, monkeypatch, tmp_path, **TINY)
    rows = g["trainer"].native.splits.train
    assert all(isinstance(r["prompt"], list) and r["prompt"][0]["role"] == "system" for r in rows)
    # completions reach the rewards as [{"role": "assistant", "content": ...}]: the unique-character reward is in [0, 1]
    assert 0 <= g["trainer"].state.log_history[0]["rewards/reward_num_unique_chars/mean"] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trl_quickstart.py", "trl_conversational.py"])
def test_the_example_trains_the_embedded_smollm2(name, monkeypatch, tmp_path):
    g = run_example(name, "smollm2", monkeypatch, tmp_path, max_steps=3, max_completion_length=48, logging_steps=1)
    history = [e for e in g["trainer"].state.log_history if "reward" in e]
    assert [e["step"] for e in history] == [1, 2, 3]
    assert all(e["grad_norm"] > 0 for e in history)  # TRL's default 8 completions per prompt differ in reward
    g["trainer"].save_model(str(tmp_path / "final"))  # the trained SmolLM2 as a plain transformers folder
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    trained = g["trainer"].model.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in loaded.state_dict().items() if k in trained)
