"""Reward functions in TRL's GRPOTrainer convention; `grpokit train` calls them the same way.

TRL calls ``fn(prompts=..., completions=..., completion_ids=..., **columns)``: every dataset
column arrives as a keyword list with one entry per completion. With conversational prompts each
completion is ``[{"role": "assistant", "content": text}]``. Return one float per completion, or
None where the reward does not apply.
"""

import re


def correct_answer(completions, answer, **kwargs):
    """1.0 when the last number of the reply equals the dataset's ``answer``, else 0.0."""
    rewards = []
    for completion, gold in zip(completions, answer):
        if gold is None:
            rewards.append(None)  # not applicable: left out of the weighted sum
            continue
        numbers = re.findall(r"-?\d+", completion[0]["content"])
        rewards.append(float(bool(numbers) and numbers[-1] == gold))
    return rewards


def short_answer(completions, completion_ids, **kwargs):
    """Prefer short replies: 0 up to 8 sampled tokens, then -0.05 for each token more."""
    return [-0.05 * max(0, len(ids) - 8) for ids in completion_ids]
