"""Rows of an environment-only run: the environment makes its own episodes, no dataset needed.

With ``environment.name`` set and neither ``data.task`` nor ``data.path`` (in a config file or
``--set``, a run that names an environment and no data source gets ``data.task: null``), the
splits are placeholders: ``data.n_train`` training rows and ``data.n_heldout`` held-out rows, one
per episode slot, each ``{"prompt": "environment episode <i>", "episode": i}`` (held-out:
``"environment held-out episode <i>"``). The placeholder prompt is never shown to the policy:
the environment's ``reset(row, seed)`` must return the first observation (the load-time check
refuses one that returns none, :mod:`grpokit.envs.checks`). The seed is what makes an episode:
a training group plays a seed drawn per step (:meth:`~grpokit.envs.episodes.EpisodeBackend.episode_seed`,
so training never runs out of episodes), held-out row ``i`` plays ``environment.heldout_seed + i``
at every evaluation. TRL's ``GRPOTrainer`` does the same when ``train_dataset`` is omitted with
an ``environment_factory`` (empty placeholder prompts; the prompt comes from ``reset()``).
Held-out accuracy is the judge reward (``eval.accuracy_reward``) over those episodes, e.g.
``env_info`` with ``key: is_success``, with the episodes' ``env/*`` means (``env/return``).
"""

from __future__ import annotations

from typing import Any

TRAIN_PROMPT = "environment episode {i}"
HELDOUT_PROMPT = "environment held-out episode {i}"


def environment_only(data: Any, environment: Any) -> bool:
    """True when the run's episodes come from the environment alone (``environment.name`` set, no data.task / data.path)."""
    return bool(environment.name) and not data.task and not data.path


def is_placeholder(row: dict) -> bool:
    """True for a placeholder row of an environment-only run."""
    return "episode" in row and row.get("prompt") in (TRAIN_PROMPT.format(i=row["episode"]), HELDOUT_PROMPT.format(i=row["episode"]))


def episode_splits(n_train: int, n_heldout: int) -> Any:
    """Placeholder splits of an environment-only run: ``n_train`` training rows, ``n_heldout`` held-out rows (see the module docstring)."""
    from grpokit.data.tasks import TaskSplits

    return TaskSplits(
        train=[{"prompt": TRAIN_PROMPT.format(i=i), "episode": i} for i in range(n_train)],
        heldout=[{"prompt": HELDOUT_PROMPT.format(i=i), "episode": i} for i in range(n_heldout)],
    )
