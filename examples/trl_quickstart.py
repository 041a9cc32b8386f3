"""TRL's GRPO quickstart (https://huggingface.co/docs/trl/grpo_trainer#quick-start) on grpokit.

Identical to TRL's script except three lines: the import (``from grpokit`` instead of ``from trl``),
the dataset (built here with ``Dataset.from_list`` in trl-lib/tldr's format, a "prompt" and a
"completion" column, instead of ``load_dataset("trl-lib/tldr")``: grpokit runs offline), and the model
(grpokit's embedded SmolLM2-135M-Instruct, or a model folder given as argv[1] or $GRPOKIT_MODEL).

    python examples/trl_quickstart.py [MODEL_FOLDER]
"""

import os
import sys

from datasets import Dataset

from grpokit import GRPOConfig, GRPOTrainer

POSTS = [
    ("SUBREDDIT: r/relationships\nTITLE: My roommate eats my food\nPOST: Every week my groceries vanish and my roommate says it was not him.\nTL;DR:", " Roommate keeps eating my food and denies it."),
    ("SUBREDDIT: r/personalfinance\nTITLE: Should I pay off my car loan early?\nPOST: I have a 4% car loan and some savings sitting in a 1% account.\nTL;DR:", " Pay off a 4% loan with 1% savings?"),
    ("SUBREDDIT: r/AskReddit\nTITLE: My dog learned to open the fridge\nPOST: I came home to an open fridge and a very happy dog twice this week.\nTL;DR:", " Dog opens the fridge; how do I stop it?"),
    ("SUBREDDIT: r/running\nTITLE: First half marathon next month\nPOST: I have run 10k at most and the race is in five weeks. Is that enough time?\nTL;DR:", " Five weeks from 10k to a half marathon?"),
    ("SUBREDDIT: r/cooking\nTITLE: My bread never rises\nPOST: I follow the recipe but the dough stays flat after two hours.\nTL;DR:", " Bread dough does not rise; what am I doing wrong?"),
    ("SUBREDDIT: r/jobs\nTITLE: Two offers, one remote\nPOST: One job pays more, the other is fully remote and closer to what I studied.\nTL;DR:", " Higher pay or remote job in my field?"),
    ("SUBREDDIT: r/gardening\nTITLE: Tomato leaves turning yellow\nPOST: The lower leaves of my tomato plants went yellow after a week of rain.\nTL;DR:", " Tomato leaves yellow after rain."),
    ("SUBREDDIT: r/travel\nTITLE: Lost passport abroad\nPOST: My passport was stolen two days before my flight home. What do I do first?\nTL;DR:", " Passport stolen before my flight home."),
]
dataset = Dataset.from_list([{"prompt": p, "completion": c} for p, c in POSTS])
model = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GRPOKIT_MODEL", "smollm2")


# Define the reward function, which rewards completions that are close to 20 characters
def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


training_args = GRPOConfig(output_dir="SmolLM2-135M-GRPO")
trainer = GRPOTrainer(
    model=model,
    reward_funcs=reward_len,
    args=training_args,
    train_dataset=dataset,
)
trainer.train()
