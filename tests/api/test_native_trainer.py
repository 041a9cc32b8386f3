"""The native API: grpokit.Trainer(config, model=, tokenizer=, dataset=, eval_dataset=, rewards=, environment=)."""

import json

import pytest
import torch
from datasets import Dataset

import grpokit
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer import setup

ROWS = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(8)]


def native_cfg(tmp_path, *extra):
    return grpokit.load_config(overrides=[
        f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0", "rollout.group_size=2",
        "rollout.prompts_per_step=2", "rollout.max_new_tokens=6", "train.steps=2", "eval.before=false", "eval.after=false",
        "eval.max_new_tokens=4", "logging.checkpoint_every=0", *extra,
    ])


def length_reward(completions, **kwargs):
    return [float(len(c)) / 10 for c in completions]


def test_python_rewards_and_a_list_dataset_train_one_step_then_save(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    calls = []

    def echo_answer(prompts, completions, completion_ids, answer, **kwargs):  # TRL's reward signature
        calls.append((len(prompts), len(completion_ids), answer[0]))
        return [float(a in c) for c, a in zip(completions, answer)]

    trainer = grpokit.Trainer(native_cfg(tmp_path, "data.heldout_fraction=0.25"), model, tokenizer, dataset=ROWS,
                              rewards=[length_reward, echo_answer, "answer_match"])
    assert (len(trainer.splits.train), len(trainer.splits.heldout)) == (6, 2)  # round(0.25 x 8) rows held out
    assert [r.name for r in trainer.rewards] == ["length_reward", "echo_answer", "answer_match"]
    metrics = trainer.train_step()
    assert {"reward/length_reward/mean", "reward/echo_answer/mean", "reward/answer_match/mean"} <= set(metrics)
    assert calls[0][:2] == (4, 4)  # 2 prompts x G=2 completions in one call
    ckpt = trainer.save()  # train_step() then save(), without train(): elapsed was unset before
    assert json.loads((ckpt / "trainer_state.json").read_text())["step"] == 1
    assert [r.name for r in trainer.cfg.rewards][-1] == "answer_match" and trainer.cfg.rewards[0].name.endswith(":length_reward")


def test_a_conversational_dataset_with_its_own_eval_dataset_trains_and_evaluates(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    chat = [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in ROWS]
    seen = {}

    def chat_reward(prompts, completions, **kwargs):
        seen.update(prompt=prompts[0], completion=completions[0])
        return [1.0] * len(completions)

    trainer = grpokit.Trainer(native_cfg(tmp_path), model, tokenizer, dataset=Dataset.from_list(chat[:6]), eval_dataset=chat[6:],
                              rewards=[chat_reward])
    result = trainer.train()
    assert result["steps"] == 2 and seen["prompt"][0]["role"] == "user" and seen["completion"][0]["role"] == "assistant"
    assert len(trainer.splits.heldout) == 2 and trainer.evaluate("after")["n"] == 2


def test_bad_python_inputs_are_one_line_errors(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(TypeError, match="is not a reward name, a RewardConfig or a callable"):
        grpokit.Trainer(native_cfg(tmp_path), model, tokenizer, dataset=ROWS, rewards=[3])
    with pytest.raises(ValueError, match="row 1 has no column 'prompt'"):
        grpokit.Trainer(native_cfg(tmp_path), model, tokenizer, dataset=[ROWS[0], {"question": "?", "answer": "1"}], rewards=[length_reward])
    with pytest.raises(ValueError, match=r"Trainer\(eval_dataset=...\) needs dataset="):
        grpokit.Trainer(native_cfg(tmp_path), model, tokenizer, eval_dataset=ROWS, rewards=[length_reward])


def test_environment_takes_a_name_or_an_importable_class():
    from grpokit.envs.guessing import GuessNumber

    assert setup.environment_name("guess_number") == "guess_number"
    assert setup.environment_name(GuessNumber) == "grpokit.envs.guessing:GuessNumber"

    class Local:
        pass

    with pytest.raises(TypeError, match="importable module"):
        setup.environment_name(Local)


def test_import_grpokit_is_cheap_and_exports_both_doors():
    import subprocess
    import sys

    code = "import sys, grpokit; assert 'torch' not in sys.modules; from grpokit import GRPOConfig, GRPOTrainer, Trainer, Config, load_config"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert grpokit.Trainer.__module__ == "grpokit.trainer.loop" and grpokit.GRPOTrainer.__module__ == "grpokit.api.trl_trainer"
    with pytest.raises(AttributeError):
        grpokit.NoSuchThing  # noqa: B018
    torch.manual_seed(0)


def test_a_raw_prompt_skips_the_chat_template_in_native_runs_too():
    from grpokit.data.chat import RawPrompt, render_prompt
    from grpokit.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    assert render_prompt(tok, RawPrompt("Q: 1+1\nA:")) == "Q: 1+1\nA:"
    assert render_prompt(tok, RawPrompt("Q: 1+1\nA:"), "Be brief.") == "Be brief.\n\nQ: 1+1\nA:"
    assert render_prompt(tok, "Q: 1+1") == "<|im_start|>user\nQ: 1+1<|im_end|>\n<|im_start|>assistant\n"  # a plain str: a user message


def test_an_environment_class_passed_from_python_runs_multi_turn_episodes(tmp_path):
    from grpokit.envs.guessing import GuessNumber

    cfg = grpokit.load_config(overrides=[
        f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0",
        "environment.options={max_guesses: 3}",
        "environment.max_episode_tokens=120", "rewards=[{name: env_return}]", "eval.accuracy_reward=env_return",
        "rollout.group_size=2", "rollout.prompts_per_step=2", "rollout.max_new_tokens=5", "eval.before=false", "eval.after=false",
    ])
    model, tokenizer = tiny_model_and_tokenizer()
    rows = [{"prompt": f"Guess my number between {lo} and {lo + 7}.", "answer": str(lo + 3)} for lo in range(1, 9)]
    trainer = grpokit.Trainer(cfg, model, tokenizer, dataset=rows, environment=GuessNumber)
    assert trainer.cfg.environment.name == "grpokit.envs.guessing:GuessNumber"
    batch, _, _ = trainer._collect()
    assert batch.action_mask is not None and batch.episodes  # episodes of the environment, observation tokens masked


def test_the_callers_config_is_left_as_it_was(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    cfg = native_cfg(tmp_path)
    before = (cfg.model.family, [r.name for r in cfg.rewards], cfg.environment.name)
    trainer = grpokit.Trainer(cfg, model, tokenizer, dataset=ROWS, rewards=[length_reward])
    assert trainer.cfg.model.family == "causal_lm" and trainer.cfg.rewards[0].name.endswith(":length_reward")
    assert (cfg.model.family, [r.name for r in cfg.rewards], cfg.environment.name) == before == ("auto", ["answer_match"], None)
