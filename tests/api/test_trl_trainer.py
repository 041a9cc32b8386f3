"""GRPOTrainer: TRL's arguments and methods on the tiny model (seconds per test)."""

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, TrainerCallback

from grpokit import GRPOConfig, GRPOTrainer
from grpokit.api.trl_args import UnsupportedArgument

PROMPTS = [{"prompt": f"Write {i} words.", "words": i} for i in range(6)]


def reward_len(completions, **kwargs):
    return [-abs(6 - len(c)) for c in completions]


class Recorder(TrainerCallback):
    def __init__(self):
        self.events = []

    def on_step_end(self, args, state, control, **kwargs):
        self.events.append(("step_end", state.global_step))

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.events.append(("log", state.global_step))

    def on_train_end(self, args, state, control, **kwargs):
        self.events.append(("train_end", state.global_step))


def test_a_callable_reward_trains_and_log_history_has_trl_names(tiny_model_dir, short_args):
    seen = {}

    def reward_words(prompts, completions, completion_ids, words, **kwargs):  # TRL's signature: dataset columns as keywords
        seen.update(n=len(completions), words=words[:2], ids=type(completion_ids[0]).__name__)
        return [float(len(c.split()) == w) for c, w in zip(completions, words)]

    recorder = Recorder()
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[reward_len, reward_words], args=GRPOConfig(**short_args),
                          train_dataset=Dataset.from_list(PROMPTS), callbacks=[recorder])
    before = [p.detach().clone() for p in trainer.model.parameters()]
    out = trainer.train()
    assert out.global_step == 2 and trainer.state.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    assert seen["n"] == 4 and seen["ids"] == "list"  # per_device 4 x accumulation 1 = 2 prompts x G=2 completions per step
    assert seen["words"][0] == seen["words"][1]  # a column's value repeats over the G completions of its prompt
    first = trainer.state.log_history[0]
    for name in ("loss", "grad_norm", "learning_rate", "reward", "reward_std", "rewards/reward_len/mean",
                 "rewards/reward_words/mean", "entropy", "completions/mean_length", "completions/clipped_ratio",
                 "frac_reward_zero_std", "epoch", "step"):
        assert name in first, name
    assert first["step"] == 1 and trainer.state.log_history[1]["step"] == 2
    assert "train_runtime" in trainer.state.log_history[-1]
    # linear decay to 0 over max_steps (TRL's default); TRL logs the rate each step used: 1e-6, then 1e-6 * (2 - 1) / 2
    assert first["learning_rate"] == pytest.approx(1e-6) and trainer.state.log_history[1]["learning_rate"] == pytest.approx(0.5e-6)
    assert recorder.events == [("step_end", 1), ("log", 1), ("step_end", 2), ("log", 2), ("log", 2), ("train_end", 2)]


def test_logging_steps_average_the_window(tiny_model_dir, short_args):
    args = GRPOConfig(**{**short_args, "max_steps": 4, "logging_steps": 2})
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=args, train_dataset=PROMPTS)
    trainer.train()
    steps = [e["step"] for e in trainer.state.log_history if "reward" in e]
    assert steps == [2, 4]
    per_step = [r["reward/mean"] for r in _jsonl(trainer.native.run_dir / "metrics.jsonl")]
    assert trainer.state.log_history[0]["reward"] == pytest.approx((per_step[0] + per_step[1]) / 2)


def test_the_saved_model_loads_with_from_pretrained(tiny_model_dir, short_args, tmp_path):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=GRPOConfig(**short_args), train_dataset=PROMPTS)
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), trainer.model.state_dict().values()))
    assert (trainer.native.run_dir / "checkpoints" / "step-2").is_dir()  # save_strategy steps: the last step is saved


def test_a_model_object_with_its_tokenizer_and_a_lora_peft_config(tiny_model_dir, short_args):
    from peft import LoraConfig
    from transformers import AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward_len, args=GRPOConfig(**short_args),
                          train_dataset=PROMPTS, peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    assert hasattr(trainer.model, "peft_config")
    trained = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)
    trainer.train()


def test_evaluate_reports_trl_eval_names(tiny_model_dir, short_args):
    args = GRPOConfig(**short_args, eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=2)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=args, train_dataset=PROMPTS, eval_dataset=PROMPTS[:3])
    trainer.train()
    evals = [e for e in trainer.state.log_history if "eval_reward" in e]
    assert len(evals) == 1 and evals[0]["step"] == 2
    assert {"eval_reward", "eval_reward_std", "eval_rewards/reward_len/mean", "eval_completions/mean_length"} <= set(evals[0])
    assert -6 <= evals[0]["eval_reward"] <= 2  # reward_len of completions of 0..8 characters


def test_refused_trainer_arguments_are_one_line(tiny_model_dir, short_args):
    with pytest.raises(UnsupportedArgument, match=r"^GRPOTrainer\(optimizers=\.\.\.\)") as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=GRPOConfig(**short_args), train_dataset=PROMPTS,
                    optimizers=(torch.optim.SGD([torch.zeros(1)], lr=1.0), None))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="model 'nobody/no-such-model' is not in the Hugging Face cache"):
        GRPOTrainer(model="nobody/no-such-model", reward_funcs=reward_len, args=GRPOConfig(**short_args), train_dataset=PROMPTS)


def test_resume_continues_from_the_latest_checkpoint(tiny_model_dir, short_args):
    GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=GRPOConfig(**short_args), train_dataset=PROMPTS).train()
    args = GRPOConfig(**{**short_args, "max_steps": 3})
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=args, train_dataset=PROMPTS)
    trainer.train(resume_from_checkpoint=True)
    assert [e["step"] for e in trainer.state.log_history if "reward" in e] == [3]
    assert [r["step"] for r in _jsonl(trainer.native.run_dir / "metrics.jsonl")] == [1, 2, 3]
    fresh = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=GRPOConfig(**short_args), train_dataset=PROMPTS)
    fresh.train()  # a fresh run in the same folder replaces the earlier run's logs, as the native train()
    assert [r["step"] for r in _jsonl(fresh.native.run_dir / "metrics.jsonl")] == [1, 2]
    assert (fresh.native.run_dir / "config.yaml").is_file()


def _jsonl(path):
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_save_strategy_no_writes_no_checkpoint_and_disable_dropout_zeroes_dropout(tiny_model_dir, short_args):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, train_dataset=PROMPTS,
                          args=GRPOConfig(**short_args, save_strategy="no", disable_dropout=True))
    trainer.train()
    assert not (trainer.native.run_dir / "checkpoints").exists()
    assert all(m.attention_dropout == 0.0 for m in trainer.model.modules() if hasattr(m, "attention_dropout"))
    with pytest.raises(UnsupportedArgument, match=r"eval_strategy='steps'\) needs GRPOTrainer\(eval_dataset=...\)"):
        GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, train_dataset=PROMPTS, args=GRPOConfig(**short_args, eval_strategy="steps"))


@pytest.mark.parametrize("scale, rewards, expected", [
    # group: mean 0.25, unbiased std sqrt((0.75^2 + 3 x 0.25^2) / 3) = 0.5; TRL divides by std + 1e-4
    ("group", [1.0, 0.0, 0.0, 0.0], [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001]),
    # batch: group means 0.5 and 3 subtracted, divided by the batch's unbiased std: rewards 1, 0, 3, 3 -> sqrt(6.75 / 3) = 1.5
    ("batch", [1.0, 0.0, 3.0, 3.0], [0.5 / 1.5001, -0.5 / 1.5001, 0.0, 0.0]),
    ("none", [1.0, 0.0, 3.0, 3.0], [0.5, -0.5, 0.0, 0.0]),
])
def test_advantages_are_trls_for_each_scale_rewards(tiny_model_dir, short_args, scale, rewards, expected):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, train_dataset=PROMPTS,
                          args=GRPOConfig(**short_args, scale_rewards=scale))
    groups = torch.tensor([0, 0, 0, 0]) if scale == "group" else torch.tensor([0, 0, 1, 1])
    adv, _ = trainer.native.advantages(torch.tensor(rewards), groups)
    torch.testing.assert_close(adv, torch.tensor(expected), rtol=0, atol=1e-6)


def test_grpokit_methods_are_reachable_through_the_grpokit_argument(tiny_model_dir, short_args):
    args = GRPOConfig(**short_args, grpokit={"algorithm": {"advantage": "rloo"}, "rollout.top_k": 3})
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, train_dataset=PROMPTS, args=args)
    assert trainer.native.cfg.algorithm.advantage == "rloo" and trainer.native.cfg.rollout.top_k == 3
    # RLOO: each completion's baseline is the mean of the other G - 1 = 1 rewards of its group (no std scaling)
    adv, _ = trainer.native.advantages(torch.tensor([1.0, 0.0, 3.0, 5.0]), torch.tensor([0, 0, 1, 1]))
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, -2.0, 2.0]))
    trainer.train()


def test_a_hub_id_is_read_from_the_local_hugging_face_cache(tiny_model_dir, short_args, tmp_path, monkeypatch):
    import shutil

    repo = tmp_path / "hub" / "models--someorg--tiny-llama"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    trainer = GRPOTrainer(model="someorg/tiny-llama", reward_funcs=reward_len, args=GRPOConfig(**short_args), train_dataset=PROMPTS)
    assert trainer.native.cfg.model.name == str(repo / "snapshots" / "abc123")


def test_a_reward_model_folder_string_scores_with_its_first_logit(tiny_model_dir, short_args, tmp_path):
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny_model_dir, num_labels=1)
    torch.manual_seed(0)
    rm = AutoModelForSequenceClassification.from_config(config)
    folder = tmp_path / "tiny-rm"
    rm.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[str(folder)], args=GRPOConfig(**short_args), train_dataset=PROMPTS)
    assert trainer.reward_func_names == ["tiny-rm"]
    reward = trainer.native.rewards[0].fn
    tok = trainer.native.tokenizer
    ids = tok(["ab" + "cd"], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        expected = rm.eval()(**ids).logits[0, 0].item()  # TRL: prompt + completion, no special tokens, logit 0
    assert reward(["ab"], ["cd"]) == pytest.approx([expected], abs=1e-5)
    trainer.train()
    assert "rewards/tiny-rm/mean" in trainer.state.log_history[0]


@pytest.mark.parametrize("loss_type, level, beta, mu", [("grpo", "sequence", 0.04, 2), ("dapo", "token", 0.04, 1),
                                                         ("dr_grpo", "token", 0.0, 2), ("bnpo", "token", 0.0, 1)])
def test_trl_loss_settings_train_through_the_native_checks(tiny_model_dir, short_args, loss_type, level, beta, mu):
    args = GRPOConfig(**{**short_args, "max_steps": 2 * mu}, loss_type=loss_type, importance_sampling_level=level, beta=beta,
                      use_bias_correction_kl=False, num_iterations=mu, epsilon_high=0.28, temperature=0.9, top_p=0.95,
                      lr_scheduler_type="cosine", bf16=False)  # (mask_truncated_completions would mask every 8-token completion)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=args, train_dataset=PROMPTS)
    trainer.train()
    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert trainer.state.global_step == 2 * mu and [e["step"] for e in logged] == [mu, 2 * mu]  # TRL counts optimizer steps
    assert ("kl" in logged[0]) == (beta > 0)


def test_a_callback_can_stop_training_and_logs_follow_optimizer_steps(tiny_model_dir, short_args):
    class StopAtFour(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step >= 4

    # num_iterations=2: each grpokit step is 2 optimizer steps; logging_steps=3 logs at the steps that pass 3 and 6
    args = GRPOConfig(**{**short_args, "max_steps": 8, "logging_steps": 3}, num_iterations=2)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=args, train_dataset=PROMPTS, callbacks=[StopAtFour])
    trainer.train()
    assert trainer.state.global_step == 4 and [e["step"] for e in trainer.state.log_history if "reward" in e] == [4]


def test_rewards_get_trls_extra_keywords_and_log_metric_joins_log_history(tiny_model_dir, short_args):
    seen = []

    def shaped(prompts, completions, completion_ids, trainer_state, log_metric, log_extra, **columns):
        seen.append((trainer_state.global_step, sorted(columns)))
        log_metric("shaped/calls", float(trainer_state.global_step))  # step 0, then 1: one value per step
        log_extra("note", ["x"] * len(completions))
        return [0.0] * len(completions)

    rows = [{"prompt": p["prompt"], "completion": "ref", "words": p["words"]} for p in PROMPTS]
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[reward_len, shaped], args=GRPOConfig(**short_args), train_dataset=rows)
    trainer.train()
    assert seen == [(0, ["words"]), (1, ["words"])]  # TRL drops the dataset's completion column
    assert [e["shaped/calls"] for e in trainer.state.log_history if "reward" in e] == [0.0, 1.0]
    assert [r.name for r in trainer.native.cfg.rewards] == [f"{__name__}:reward_len", f"{__name__}:{shaped.__qualname__}"]


def test_string_prompts_are_the_model_input_as_written_and_conversations_use_the_template(tiny_model_dir, short_args):
    from grpokit.data.chat import RawPrompt

    rows = [{"prompt": "SUBREDDIT: r/x\nTL;DR:"}, {"prompt": [{"role": "user", "content": "hi"}]}]
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, args=GRPOConfig(**short_args), train_dataset=rows[:1])
    assert isinstance(trainer.native.splits.train[0]["prompt"], RawPrompt)
    # TRL tokenizes a standard prompt as it is; a conversation gets the chat template and the generation prompt
    assert trainer.native._prompt_texts(trainer.native.splits.train) == ["SUBREDDIT: r/x\nTL;DR:"]
    assert trainer.native._prompt_texts([rows[1]]) == ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]
