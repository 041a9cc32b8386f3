"""Score a batch of completions with several weighted rewards."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable

import torch

logger = logging.getLogger(__name__)

ON_ERROR_CHOICES = ("raise", "zero")


@dataclass
class NamedReward:
    """A reward callable with the name it is reported under and its weight in the total."""

    name: str
    fn: Callable
    weight: float = 1.0


class RewardError(RuntimeError):
    """A reward function failed or returned something other than one score per completion."""


@dataclass
class RewardScores:
    """Per-reward scores, their weighted total, and per-reward failure counts for one batch."""

    per_reward: dict[str, torch.Tensor]  # name -> [N] float32, nan where None or failed
    total: torch.Tensor  # [N] float32, sum_r weight_r * score_r with nan treated as 0
    failures: dict[str, int] = field(default_factory=dict)  # name -> samples that raised


def _check_scores(name: str, values: object, n: int) -> list[float]:
    """Validate one reward's output: n finite numbers or None; returns floats with nan for None."""
    try:
        length = len(values)  # type: ignore[arg-type]
    except TypeError:
        raise RewardError(
            f"reward '{name}' returned {type(values).__name__}; it must return a list of floats"
        ) from None
    if length != n:
        raise RewardError(f"reward '{name}' returned {length} scores for {n} completions")
    out: list[float] = []
    for i, value in enumerate(values):  # type: ignore[arg-type]
        if value is None:
            out.append(math.nan)
            continue
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RewardError(
                f"reward '{name}' returned {value!r} for sample {i}; "
                "scores must be finite floats or None"
            )
        out.append(float(value))
    return out


def _score_per_sample(
    reward: NamedReward,
    prompts: list[str],
    completions: list[str],
    columns: dict[str, list],
    on_error: str,
) -> tuple[list[float], int]:
    """Call ``reward`` one sample at a time after a batch call raised; returns scores, failures."""
    scores: list[float] = []
    failures = 0
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        sample_columns = {k: [v[i]] for k, v in columns.items()}
        try:
            result = reward.fn([prompt], [completion], **sample_columns)
        except Exception as exc:
            if on_error == "raise":
                raise RewardError(
                    f"reward '{reward.name}' failed on sample {i} (prompt {prompt[:60]!r}): "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            failures += 1
            scores.append(0.0)
            continue
        scores.extend(_check_scores(reward.name, result, 1))
    return scores, failures


def score_completions(
    rewards: list[NamedReward],
    prompts: list[str],
    completions: list[str],
    columns: dict[str, list],
    on_error: str = "raise",
) -> RewardScores:
    """Score ``completions`` with every reward; total = sum_r w_r * nan_to_num(score_r, 0).

    Each reward is called once with the whole batch. If that raises, it is called per sample
    to find the failing sample(s): ``on_error="raise"`` raises ``RewardError`` naming the
    reward and sample index; ``on_error="zero"`` scores those samples 0.0 and counts them in
    ``failures``. None scores become nan in ``per_reward`` and add 0 to ``total`` (TRL's
    nansum); a sample where every reward is None gets total 0 and a logged warning.
    ``columns`` holds per-sample lists (e.g. ``answer``), passed as keyword arguments.
    """
    if on_error not in ON_ERROR_CHOICES:
        raise ValueError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")
    n = len(completions)
    if len(prompts) != n:
        raise ValueError(f"got {len(prompts)} prompts for {n} completions")
    for key, values in columns.items():
        if len(values) != n:
            raise ValueError(f"column '{key}' has {len(values)} rows for {n} completions")
    names = [r.name for r in rewards]
    if len(set(names)) != len(names):
        raise ValueError(f"reward names must be unique, got {names}")

    per_reward: dict[str, torch.Tensor] = {}
    failures: dict[str, int] = {}
    total = torch.zeros(n, dtype=torch.float32)
    for reward in rewards:
        try:
            raw = reward.fn(prompts, completions, **columns)
        except Exception:
            logger.debug("reward '%s' raised on the batch; retrying per sample", reward.name)
            scores, failures[reward.name] = _score_per_sample(
                reward, prompts, completions, columns, on_error
            )
        else:
            scores, failures[reward.name] = _check_scores(reward.name, raw, n), 0
        tensor = torch.tensor(scores, dtype=torch.float32)  # [N]
        per_reward[reward.name] = tensor
        total += reward.weight * torch.nan_to_num(tensor, nan=0.0)

    if rewards and n:
        all_none = torch.stack(list(per_reward.values())).isnan().all(dim=0)  # [N]
        if all_none.any():
            logger.warning(
                "%d of %d samples got None from every reward; their total is 0",
                int(all_none.sum()),
                n,
            )
    return RewardScores(per_reward=per_reward, total=total, failures=failures)
