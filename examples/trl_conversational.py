"""TRL's GRPO with a conversational dataset and two custom rewards, on grpokit.

As TRL's docs (https://huggingface.co/docs/trl/grpo_trainer#using-a-custom-reward-function and the
conversational dataset format, https://huggingface.co/docs/trl/dataset_formats): prompts are lists of
messages, each completion is ``[{"role": "assistant", "content": ...}]``, and every reward is called
as ``f(prompts, completions, completion_ids, **columns)``. Identical to a TRL script except the
import line, the in-script dataset (grpokit runs offline) and the model (grpokit's embedded
SmolLM2-135M-Instruct, or a model folder given as argv[1] or $GRPOKIT_MODEL).

    python examples/trl_conversational.py
"""

import os
import re
import sys

from datasets import Dataset

from grpokit import GRPOConfig, GRPOTrainer

QUESTIONS = [
    "What is the capital of France?", "Name a primary colour.", "How many legs does a spider have?",
    "What gas do plants take in?", "Which planet is known as the red planet?", "What is 7 times 6?",
    "What is the boiling point of water in Celsius?", "Who wrote Romeo and Juliet?",
]
SYSTEM = "Think in <think> </think>, then answer in <answer> </answer>."
dataset = Dataset.from_list(
    [{"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]} for q in QUESTIONS]
)
model = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GRPOKIT_MODEL", "smollm2")


def format_reward_func(completions, **kwargs):
    """Reward function that checks if the completion has a specific format."""
    pattern = r"^<think>.*?</think>\s*<answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content, re.DOTALL) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


def reward_num_unique_chars(completions, **kwargs):
    """Reward function that rewards completions with more unique characters."""
    return [len(set(completion[0]["content"])) / 100 for completion in completions]


training_args = GRPOConfig(output_dir="SmolLM2-135M-GRPO-chat", logging_steps=1, max_completion_length=128)
trainer = GRPOTrainer(
    model=model,
    reward_funcs=[format_reward_func, reward_num_unique_chars],
    args=training_args,
    train_dataset=dataset,
)
trainer.train()
print(trainer.state.log_history[-2])
