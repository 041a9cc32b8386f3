"""Score a batch of completions with several weighted rewards."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

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


class RewardTimeout(RewardError):
    """A reward function did not return within its time limit."""


def is_group_level(fn: Callable) -> bool:
    """True for rewards that score a whole group at once (they take ``group_ids``)."""
    return bool(getattr(fn, "group_level", False) or getattr(getattr(fn, "func", None), "group_level", False))


def call_with_timeout(name: str, fn: Callable, args: tuple, kwargs: dict, timeout_s: Optional[float]) -> Any:
    """Run ``fn(*args, **kwargs)``; raise RewardTimeout naming the reward if it exceeds ``timeout_s``.

    The call runs in a daemon thread, so a hung reward cannot block the run (its thread is left
    behind; Python cannot kill it). ``timeout_s`` None or <= 0 calls directly.
    """
    if not timeout_s or timeout_s <= 0:
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"reward-{name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RewardTimeout(f"reward '{name}' did not return within {timeout_s:g} s (train.reward_timeout_s)")
    if "error" in box:
        raise box["error"]
    return box["value"]


@dataclass
class RewardScores:
    """Per-reward scores, their weighted total, and per-reward failure counts for one batch."""

    per_reward: dict[str, torch.Tensor]  # name -> [N] float32 on CPU, nan where None or failed
    total: torch.Tensor  # [N] float32 on CPU, sum_r weight_r * score_r with nan treated as 0
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
    timeout_s: Optional[float] = None,
) -> tuple[list[float], int]:
    """Call ``reward`` one sample at a time after a batch call raised; returns scores, failures."""
    scores: list[float] = []
    failures = 0
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        sample_columns = {k: [v[i]] for k, v in columns.items()}
        try:
            result = call_with_timeout(reward.name, reward.fn, ([prompt], [completion]), sample_columns, timeout_s)
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


def _expand(name: str, raw: object, n: int) -> dict[str, list[float]]:
    """One reward's output as named columns: plain scores -> {name}, dicts -> {name/key, ...}."""
    if isinstance(raw, (list, tuple)) and raw and all(isinstance(v, dict) for v in raw):
        if len(raw) != n:
            raise RewardError(f"reward '{name}' returned {len(raw)} scores for {n} completions")
        keys = sorted({k for v in raw for k in v})
        return {f"{name}/{k}": _check_scores(f"{name}/{k}", [v.get(k) for v in raw], n) for k in keys}
    return {name: _check_scores(name, raw, n)}


def _score_one(
    reward: NamedReward,
    prompts: list[str],
    completions: list[str],
    columns: dict[str, list],
    group_ids: Optional[list[int]],
    on_error: str,
    timeout_s: Optional[float],
) -> tuple[dict[str, list[float]], int]:
    """Columns of one reward and its failure count (timeouts and errors handled per ``on_error``)."""
    n = len(completions)
    kwargs = dict(columns)
    group_level = is_group_level(reward.fn)
    if group_level:
        kwargs["group_ids"] = list(group_ids) if group_ids is not None else [0] * n
    try:
        raw = call_with_timeout(reward.name, reward.fn, (prompts, completions), kwargs, timeout_s)
    except RewardTimeout:
        if on_error == "raise":
            raise
        logger.warning("reward '%s' timed out: its %d samples score 0", reward.name, n)
        return {reward.name: [0.0] * n}, n
    except Exception as exc:
        if group_level:  # a group scorer cannot be retried sample by sample
            if on_error == "raise":
                raise RewardError(f"reward '{reward.name}' failed on the batch: {type(exc).__name__}: {exc}") from exc
            return {reward.name: [0.0] * n}, n
        logger.debug("reward '%s' raised on the batch; retrying per sample", reward.name)
        scores, failed = _score_per_sample(reward, prompts, completions, columns, on_error, timeout_s)
        return {reward.name: scores}, failed
    return _expand(reward.name, raw, n), 0


def score_completions(
    rewards: list[NamedReward],
    prompts: list[str],
    completions: list[str],
    columns: dict[str, list],
    on_error: str = "raise",
    group_ids: Optional[list[int]] = None,
    timeout_s: Optional[float] = None,
) -> RewardScores:
    """Score ``completions`` with every reward; total = sum_r w_r * nan_to_num(score_r, 0).

    Each reward is called once with the whole batch (group-level rewards also get
    ``group_ids``). If a sample-level reward raises, it is called per sample to find the
    failing sample(s): ``on_error="raise"`` raises ``RewardError`` naming the reward and sample
    index; ``on_error="zero"`` scores those samples 0.0 and counts them in ``failures``. A call
    that exceeds ``timeout_s`` is a failure of its whole batch. A reward returning a dict per
    sample yields one column per key (``name/key``), each weighted by the reward's weight.
    None scores become nan in ``per_reward`` and add 0 to ``total`` (TRL's nansum).
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
    total = torch.zeros(n, dtype=torch.float32, device="cpu")  # rewards are Python: the trainer moves scores
    for reward in rewards:
        cols, failures[reward.name] = _score_one(reward, prompts, completions, columns, group_ids, on_error, timeout_s)
        for col, scores in cols.items():
            tensor = torch.tensor(scores, dtype=torch.float32, device="cpu")  # [N]
            per_reward[col] = tensor
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
