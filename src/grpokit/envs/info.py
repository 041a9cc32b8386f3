"""What an episode reports: its reward columns and its ``env/*`` metrics, the environment's ``info`` included.

An environment's ``info`` may hold any JSON value (gymnasium's usual ``is_success: True``, counts,
floats, text, None, lists, dicts), and numpy / torch scalars. The last value of each key in an
episode reaches the rewards twice: in the ``env_info`` column (a dict per episode, every key and
value as the environment gave them; the ``env_info`` reward reads it) and as an ``env_<key>``
column, except a key whose column would shadow one of grpokit's own (:data:`FIXED_COLUMNS`:
``info["return"]`` is only in ``env_info``, never over ``env_return``). Metrics: numbers and bools
(as 0 / 1) are averaged over the episodes that reported them as ``env/<key>``; a key whose name
is one of grpokit's own metrics (:data:`OWN_METRICS`, e.g. ``info["turns"]``) or starts with
``info/`` is renamed ``env/info/<key>`` (so no two keys share a name and grpokit's ``env/turns``
stays the turn count); text, None, lists and dicts are not metrics [grpokit's choices].
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

FIXED_COLUMNS = ("env_return", "messages", "conversation", "turns", "env_terminated", "env_done", "env_failed", "env_turn_rewards", "env_info", "env_error")
OWN_METRICS = ("return", "turns", "terminated_frac", "failed_episodes", "failed_frac", "action_tokens", "observation_tokens")


def info_number(value: Any) -> Optional[float]:
    """``value`` as a metric: a number or bool (True = 1.0), numpy / torch scalars included; None for anything else."""
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        value = value.item()  # numpy scalars and 0-d arrays / tensors
    if isinstance(value, (bool, numbers.Real)):
        return float(value)
    return None


def metric_name(key: str) -> str:
    """The ``env/*`` metric of ``info[key]``: ``env/<key>``, or ``env/info/<key>`` for a name grpokit uses itself."""
    return f"env/info/{key}" if key in OWN_METRICS or key.startswith("info/") else f"env/{key}"


def episode_columns(ret: float, messages: list, turns: int, terminated: bool, env_done: bool, error: Optional[str],
                    turn_rewards: list[float], info: dict[str, Any], conversation: Optional[list] = None) -> dict[str, Any]:
    """What an episode hands the reward functions, one column per key (``RolloutBatch.columns``).

    ``env_done``: the environment ended the episode (terminated or truncated it), not one of
    grpokit's caps; ``env_failed``: the environment raised or hung (``env_error`` says how);
    ``env_info``: the last value of every info key; ``env_<key>`` per key unless it would shadow
    a column above; ``conversation``: every message of the episode with its role (system, the
    first observation or the row's prompt, then model turns and observations), ``messages`` if not given.
    """
    own = {"env_return": ret, "messages": messages, "conversation": list(messages if conversation is None else conversation), "turns": turns, "env_terminated": terminated, "env_done": env_done,
           "env_failed": error is not None, "env_error": error, "env_turn_rewards": list(turn_rewards), "env_info": dict(info)}
    return {**{f"env_{k}": v for k, v in info.items() if f"env_{k}" not in FIXED_COLUMNS}, **own}


def episode_metrics(batch: Any) -> dict[str, float]:
    """``env/*`` metrics of a batch of episodes (means over episodes unless named otherwise; {} for single-turn).

    return, turns, terminated_frac, failed_episodes (a count), failed_frac, action_tokens /
    observation_tokens (per episode: sampled, and appended from observations), and every info key
    with a number or bool value (:func:`metric_name`), averaged over the episodes that reported it.
    """
    eps = batch.episodes
    if not eps or batch.action_mask is None:
        return {}
    n = len(eps)
    action, mask = batch.action_mask.float(), batch.completion_mask.float()
    failed = sum(bool(e["env_failed"]) for e in eps)
    out = {
        "env/return": sum(float(e["env_return"]) for e in eps) / n,
        "env/turns": sum(e["turns"] for e in eps) / n,
        "env/terminated_frac": sum(bool(e["env_terminated"]) for e in eps) / n,
        "env/failed_episodes": float(failed),
        "env/failed_frac": failed / n,
        "env/action_tokens": float(action.sum()) / n,
        "env/observation_tokens": float((mask - action).sum()) / n,
    }
    for key in sorted({k for e in eps for k in e["env_info"]}):
        values = [v for v in (info_number(e["env_info"].get(key)) for e in eps) if v is not None]
        if values:
            out[metric_name(key)] = sum(values) / len(values)
    return out
