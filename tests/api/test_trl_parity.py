"""One GRPO step of grpokit's GRPOTrainer equals TRL 1.16's on the same completions: the same gradient.

Both trainers load the same tiny model folder and train one step on 2 prompts x G = 2 fixed
completions (TRL: a ``rollout_func``; grpokit: a backend that returns them), rewarded by their
length, for the loss types, reward scalings, GSPO ratio and a sampling temperature (the learner divides
its logits by it). The gradients right before the optimizer step (no clipping) must agree; prompts have equal
token lengths so that neither side pads them (TRL feeds no position ids).
"""

import pytest
import torch

from grpokit.rollout.types import group_batch

PROMPTS = ["ab", "cd"]  # the character tokenizer: 2 tokens each, no padding
COMPLETIONS = {"ab": ["xyz", "q"], "cd": ["hello", "hi"]}  # text of each prompt's G = 2 completions; EOS appended
ARGS = dict(per_device_train_batch_size=4, num_generations=2, max_steps=1, max_completion_length=6, learning_rate=1e-3,
            max_grad_norm=0.0, bf16=False, gradient_checkpointing=False, report_to="none", save_strategy="no",
            logging_steps=1, seed=0, disable_tqdm=True)


def reward_len(completions, **kwargs):
    return [float(len(c)) for c in completions]


def completion_ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]


class FixedBackend:
    """grpokit's side: the fixed completions of each prompt instead of sampled ones."""

    def __init__(self, real, tokenizer):
        self.real, self.tokenizer = real, tokenizer

    def __getattr__(self, name):  # pad / EOS ids and the rest: the real backend's
        return getattr(self.real, name)

    def generate(self, prompt_texts, rows, group_size, params):
        tok = self.tokenizer
        prompt_texts = list(prompt_texts)
        prompt_ids = torch.tensor([tok(t, add_special_tokens=False).input_ids for t in prompt_texts])
        comps = [completion_ids(tok, c) for t in prompt_texts for c in COMPLETIONS[t]]
        width = max(map(len, comps))
        ids = torch.tensor([c + [tok.pad_token_id] * (width - len(c)) for c in comps])
        mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in comps])
        zeros = torch.zeros(ids.shape)
        return group_batch(tok, prompt_ids, torch.ones_like(prompt_ids), rows, group_size, ids, mask, zeros,
                           torch.zeros(len(comps), dtype=torch.bool), zeros)


def grads_of(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_type, extra", [("dapo", {}), ("grpo", {}), ("dr_grpo", {}), ("dapo", {"scale_rewards": "batch"}),
                                              ("grpo", {"importance_sampling_level": "sequence"}), ("dapo", {"temperature": 0.7}),
                                              ("dapo", {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2}),
                                              ("grpo", {"num_iterations": 2, "max_steps": 2}),  # the 2nd update: ratio != 1
                                              ("dapo", {"beta": 0.1, "use_bias_correction_kl": False, "max_steps": 2})])  # KL != 0 at step 2
def test_one_step_gradient_equals_trls(tiny_model_dir, tmp_path, monkeypatch, loss_type, extra):
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import TrainerCallback

    from grpokit import GRPOConfig, GRPOTrainer

    dataset = Dataset.from_list([{"prompt": p} for p in PROMPTS])
    captured = {}

    class Capture(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            captured["trl"] = grads_of(model)

    def rollout(prompts, trainer):  # TRL passes each prompt G times
        tok, seen = trainer.processing_class, {}
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for p in prompts:
            k = seen[p] = seen.get(p, -1) + 1
            out["prompt_ids"].append(tok(p, add_special_tokens=False).input_ids)
            out["completion_ids"].append(completion_ids(tok, COMPLETIONS[p][k]))
            out["logprobs"].append([0.0] * len(out["completion_ids"][-1]))
        return out

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    args = {**ARGS, **extra}
    theirs = trl.GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, train_dataset=dataset, rollout_func=rollout,
                             args=trl.GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, loss_type=loss_type, **args),
                             callbacks=[Capture()])
    theirs.train()

    ours = GRPOTrainer(model=tiny_model_dir, reward_funcs=reward_len, train_dataset=dataset,
                       args=GRPOConfig(output_dir=str(tmp_path / "ours"), use_cpu=True, loss_type=loss_type, **args))
    ours.native.policy.backend = FixedBackend(ours.native.policy.backend, ours.processing_class)
    ours.native.optimizer.register_step_pre_hook(lambda opt, args, kwargs: captured.update(ours=grads_of(ours.model)) and None)
    ours.train()

    assert captured["trl"].keys() == captured["ours"].keys()
    for name, g in captured["trl"].items():
        torch.testing.assert_close(captured["ours"][name], g, rtol=1e-4, atol=1e-7, msg=name)
    assert ours.state.log_history[0]["reward"] == 2.75  # len of 'xyz', 'q', 'hello', 'hi': (3 + 1 + 5 + 2) / 4
    trl_at = {e["step"]: e for e in theirs.state.log_history[:-1]}  # num_iterations=2: TRL logs each update, grpokit each pair
    for o_logs in ours.state.log_history[:-1]:
        step, t_logs = o_logs["step"], trl_at[o_logs["step"]]
        for key in ("loss", "grad_norm", "learning_rate", "reward", "reward_std", "rewards/reward_len/mean", "rewards/reward_len/std",
                    "frac_reward_zero_std", "completions/mean_length", "completions/max_length", "completions/clipped_ratio",
                    "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "epoch", "step"):
            if key in t_logs or key in ("loss", "grad_norm", "learning_rate"):  # TRL's 2nd update of a batch logs no rewards
                assert o_logs[key] == pytest.approx(t_logs[key], rel=1e-4, abs=1e-7), (step, key)
    if "beta" in extra:  # the step compared is one where the policy has left the reference
        assert ours.state.log_history[1]["kl"] > 0 and ours.state.log_history[1]["kl"] == pytest.approx(theirs.state.log_history[1]["kl"], rel=1e-3)
