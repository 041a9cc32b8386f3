"""INTELLECT-2 length control: a penalty for missing a target completion length.

Prime Intellect Team, "INTELLECT-2: A Reasoning Model Trained Through Globally Decentralized
Reinforcement Learning", arXiv 2505.07291, §3 (Training Recipe; the authors' prime-rl
``inference/rewards.py``, "exact" mode). A target length L* is stated in the prompt and the
total reward is

    r = r_task − coef · |L* − L|,    coef = 3e-4,

with L the completion length in tokens. ``length_target`` returns the penalty term
``−coef · |L* − L|``; listed next to the task reward with weight 1, the fixed combiner's sum is r.
The paper's other modes multiply the task reward (``max``: r_task · clip(coef(L* − L) + 0.5, 0, 1);
``clip``: 0 when L > L*) and are not additive columns, so they are not offered here.
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

from grpokit.rewards.builtin import REWARDS


@functools.lru_cache(maxsize=4)
def _tokenizer(source: str) -> Any:
    from grpokit.model.loading import load_tokenizer

    return load_tokenizer(source)


def completion_lengths(completions: list[str], tokenizer: Optional[str] = None) -> list[int]:
    """Length of each completion in tokens of ``tokenizer`` (model name or folder), or in characters."""
    if tokenizer is None:
        return [len(c) for c in completions]
    ids = _tokenizer(tokenizer)(completions, add_special_tokens=False).input_ids
    return [len(x) for x in ids]


@REWARDS.register("length_target")
def length_target(
    prompts: list[str],
    completions: list[str],
    target_length: Optional[Sequence] = None,
    *,
    target: Optional[int] = None,
    coef: float = 3e-4,
    tokenizer: Optional[str] = None,
    unit: str = "characters",
    completion_ids: Optional[Sequence] = None,
    **kwargs: Any,
) -> list[Optional[float]]:
    """INTELLECT-2 length penalty −coef·|L* − L| (arXiv 2505.07291); add it to the task reward.

    L* is the row's ``target_length`` column (``data.length_targets`` writes it and states it in
    the prompt), else the ``target`` option; None for a row with neither. L: ``unit: tokens``
    counts the sampled completion tokens (the paper's, prime-rl ``len(output.token_ids)``);
    ``unit: characters`` counts tokens of ``tokenizer`` (a model name or folder, loaded once) when
    one is named, else characters.
    """
    if coef < 0:
        raise ValueError(f"reward 'length_target': coef must be >= 0, got {coef}")
    if unit not in ("tokens", "characters"):
        raise ValueError(f"reward 'length_target': unit '{unit}': choose tokens or characters")
    targets = list(target_length) if target_length is not None else [None] * len(completions)
    if unit == "tokens":
        if completion_ids is None:
            raise ValueError("reward 'length_target': unit tokens needs the sampled completion_ids; use unit: characters")
        lengths = [len(ids) for ids in completion_ids]
    else:
        lengths = completion_lengths(completions, tokenizer)
    out: list[Optional[float]] = []
    for goal, n in zip(targets, lengths):
        goal = goal if goal is not None else target
        out.append(None if goal is None else -coef * abs(float(goal) - n))
    return out
