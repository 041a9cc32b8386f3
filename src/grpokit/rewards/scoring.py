"""Score a batch of completions with several weighted rewards.

Rewards are called as TRL's GRPOTrainer calls them (its "Using a custom reward function"
convention): ``fn(prompts=..., completions=..., completion_ids=..., **columns)`` with every
dataset column as a keyword list, one entry per completion; the function returns one float (or
None: not applicable) per completion. For conversational prompts (message lists) ``prompts``
are the message lists and each completion is ``[{"role": "assistant", "content": text}]``;
``completion_ids`` are the completion's tokens without padding (EOS included when sampled).
A function that names no ``completions`` parameter is called positionally, ``fn(prompts,
completions, **columns)`` (grpokit's earlier convention), and ``completion_ids`` reaches only
functions that take it (by name or ``**kwargs``). Rewards marked ``text_only`` (grpokit's
built-ins) always see plain texts: a conversation's last user message and the completion text.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from grpokit.data.chat import is_conversation, prompt_text

logger = logging.getLogger(__name__)

ON_ERROR_CHOICES = ("raise", "zero")


@dataclass
class NamedReward:
    """A reward callable with the name it is reported under and its weight in the total."""

    name: str
    fn: Callable
    weight: float = 1.0
    text_only: bool = False  # True: plain texts even for conversational prompts (the built-ins)


@dataclass
class RewardInputs:
    """What one reward is called with: prompts, completions and per-completion keyword columns."""

    prompts: list  # [N] str, or message lists (TRL's conversational form)
    completions: list  # [N] str, or [{"role": "assistant", "content": text}] per completion
    columns: dict[str, list]  # dataset columns and completion_ids, each [N]

    def row(self, i: int) -> "RewardInputs":
        """The inputs of completion ``i`` alone (a batch of one)."""
        return RewardInputs([self.prompts[i]], [self.completions[i]], {k: [v[i]] for k, v in self.columns.items()})


def reward_views(
    prompts: list, completions: list[str], columns: dict[str, list], completion_ids: Optional[Sequence[Sequence[int]]]
) -> tuple[RewardInputs, RewardInputs]:
    """(TRL's view, the text view) of one batch; the same object twice for string prompts.

    A dataset column named ``completion_ids`` is replaced by the sampled tokens (TRL drops it too).
    """
    cols = dict(columns)
    if completion_ids is not None:
        cols["completion_ids"] = [list(ids) for ids in completion_ids]
    if not any(is_conversation(p) for p in prompts):
        same = RewardInputs(list(prompts), list(completions), cols)
        return same, same
    messages = [[{"role": "assistant", "content": c}] for c in completions]
    return RewardInputs(list(prompts), messages, cols), RewardInputs([prompt_text(p) for p in prompts], list(completions), cols)


def _signature(fn: Callable) -> tuple[set[str], bool]:
    """(parameter names, takes ``**kwargs``) of ``fn``; an uninspectable callable takes anything."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set(), True
    names = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def call_reward(fn: Callable, inputs: RewardInputs, extra: dict[str, Any]) -> Any:
    """``fn`` on ``inputs``: with keywords as TRL calls it when it names ``completions``, else positionally.

    ``completion_ids`` and ``prompts`` (keyword call) are passed only when ``fn`` takes them;
    dataset columns and ``extra`` (``group_ids``) always. An awaitable result (an ``async def``
    reward, which TRL also accepts) is run to completion.
    """
    names, var_kw = _signature(fn)
    kwargs = {**inputs.columns, **extra}
    if "completion_ids" in kwargs and not (var_kw or "completion_ids" in names):
        del kwargs["completion_ids"]
    if "completions" in names:
        if var_kw or "prompts" in names:
            kwargs["prompts"] = inputs.prompts
        result = fn(completions=inputs.completions, **kwargs)
    else:
        result = fn(inputs.prompts, inputs.completions, **kwargs)
    if inspect.isawaitable(result):
        result = asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


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
    reward: NamedReward, inputs: RewardInputs, on_error: str, timeout_s: Optional[float] = None,
) -> tuple[list[float], int]:
    """Call ``reward`` one sample at a time after a batch call raised; returns scores, failures."""
    scores: list[float] = []
    failures = 0
    for i in range(len(inputs.completions)):
        try:
            result = call_with_timeout(reward.name, call_reward, (reward.fn, inputs.row(i), {}), {}, timeout_s)
        except Exception as exc:
            if on_error == "raise":
                prompt = prompt_text(inputs.prompts[i])
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
    inputs: RewardInputs,
    group_ids: Optional[list[int]],
    on_error: str,
    timeout_s: Optional[float],
) -> tuple[dict[str, list[float]], int]:
    """Columns of one reward and its failure count (timeouts and errors handled per ``on_error``)."""
    n = len(inputs.completions)
    extra: dict[str, Any] = {}
    group_level = is_group_level(reward.fn)
    if group_level:
        extra["group_ids"] = list(group_ids) if group_ids is not None else [0] * n
    try:
        raw = call_with_timeout(reward.name, call_reward, (reward.fn, inputs, extra), {}, timeout_s)
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
        scores, failed = _score_per_sample(reward, inputs, on_error, timeout_s)
        return {reward.name: scores}, failed
    return _expand(reward.name, raw, n), 0


def score_completions(
    rewards: list[NamedReward],
    prompts: list,
    completions: list[str],
    columns: dict[str, list],
    on_error: str = "raise",
    group_ids: Optional[list[int]] = None,
    timeout_s: Optional[float] = None,
    completion_ids: Optional[Sequence[Sequence[int]]] = None,
) -> RewardScores:
    """Score ``completions`` with every reward; total = sum_r w_r * nan_to_num(score_r, 0).

    ``prompts`` are the data rows' prompts (strings or message lists), ``completions`` the
    decoded texts and ``completion_ids`` their tokens without padding; see the module docstring
    for how each reward is called. Each reward is called once with the whole batch
    (group-level rewards also get ``group_ids``). If a sample-level reward raises, it is called per sample to find the
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
    if completion_ids is not None and len(completion_ids) != n:
        raise ValueError(f"got {len(completion_ids)} completion_ids for {n} completions")
    trl_view, text_view = reward_views(prompts, completions, columns, completion_ids)
    names = [r.name for r in rewards]
    if len(set(names)) != len(names):
        raise ValueError(f"reward names must be unique, got {names}")

    per_reward: dict[str, torch.Tensor] = {}
    failures: dict[str, int] = {}
    total = torch.zeros(n, dtype=torch.float32, device="cpu")  # rewards are Python: the trainer moves scores
    for reward in rewards:
        inputs = text_view if reward.text_only else trl_view
        cols, failures[reward.name] = _score_one(reward, inputs, group_ids, on_error, timeout_s)
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
