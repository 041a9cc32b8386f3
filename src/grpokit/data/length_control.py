"""INTELLECT-2 length control in the prompt: a target length per row, stated as an instruction.

Prime Intellect Team, "INTELLECT-2: A Reasoning Model Trained Through Globally Decentralized
Reinforcement Learning", arXiv 2505.07291, §3 (length rewards): a target length L* is sampled
from a list for each prompt and written into it, and the reward penalises |L* - L|
(``length_target``). The wording is the authors' prime-rl (``infer.py`` / ``format_prompts``,
"instruction" location): ``"<question> Think for {L*} tokens before giving a response."``.

Departure: prime-rl draws L* afresh each time a prompt is sampled; here each row draws it once,
from ``random.Random((seed, split, row index))``, so a prompt always carries the same target
(a learner and its rollout workers agree on it without exchanging it, and a re-drawn prompt is
the same prompt).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from grpokit.data.chat import RawPrompt, is_conversation

INSTRUCTION = " Think for {target} tokens before giving a response."


def state_target(prompt: Any, target: int) -> Any:
    """``prompt`` with the length instruction appended (to the last user message of a conversation)."""
    text = INSTRUCTION.format(target=target)
    if is_conversation(prompt):
        messages = [dict(m) for m in prompt]
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            raise ValueError("data.length_targets: a conversation prompt without a user message cannot state its target")
        messages[users[-1]]["content"] = f"{messages[users[-1]]['content']}{text}"
        return messages
    if isinstance(prompt, RawPrompt):
        return RawPrompt(f"{prompt}{text}")
    return f"{prompt}{text}"


def with_length_targets(rows: list[dict], targets: list, seed: int, split: str) -> list[dict]:
    """Each row with a ``target_length`` column drawn from ``targets`` and the instruction in its prompt."""
    out = []
    for i, row in enumerate(rows):
        target = int(random.Random(f"{seed}:{split}:{i}").choice(targets))
        out.append({**row, "prompt": state_target(row["prompt"], target), "target_length": target})
    return out


def apply_length_targets(splits: Any, targets: list, seed: int) -> Any:
    """``splits`` (a TaskSplits) with length targets on both splits; unchanged when ``targets`` is empty."""
    if not targets:
        return splits
    bad = [t for t in targets if not isinstance(t, int) or isinstance(t, bool) or t <= 0]
    if bad:
        raise ValueError(f"data.length_targets {bad}: give positive whole token counts, e.g. [16, 32]")
    return dataclasses.replace(splits, train=with_length_targets(splits.train, targets, seed, "train"),
                               heldout=with_length_targets(splits.heldout, targets, seed, "heldout"))
