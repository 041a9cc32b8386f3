"""Lookup of every registry by axis name (for config validation and ``grpokit list``)."""

from __future__ import annotations

import importlib

from grpokit.registry import Registry

# axis -> (module that defines the registry, attribute name); the modules that fill it are in grpokit.builtins
_LOCATIONS = {
    "task": ("grpokit.data.tasks", "TASKS"),
    "reward": ("grpokit.rewards.builtin", "REWARDS"),
    "advantage": ("grpokit.algos.advantages", "ADVANTAGES"),
    "loss": ("grpokit.algos.losses", "POLICY_LOSSES"),
    "aggregation": ("grpokit.algos.aggregation", "AGGREGATIONS"),
    "kl": ("grpokit.algos.kl", "KL_ESTIMATORS"),
    "token_weights": ("grpokit.algos.token_weights", "TOKEN_WEIGHTS"),
    "filter": ("grpokit.algos.filters", "FILTERS"),
    "ratio": ("grpokit.algos.ratios", "RATIOS"),
    "combiner": ("grpokit.rewards.combiners", "COMBINERS"),
    "curriculum": ("grpokit.data.curricula", "CURRICULA"),
    "correction": ("grpokit.algos.offpolicy", "CORRECTIONS"),
    "offline_loss": ("grpokit.algos.offline", "OFFLINE_LOSSES"),
    "demonstration": ("grpokit.data.demonstrations", "DEMONSTRATIONS"),
    "environment": ("grpokit.envs", "ENVIRONMENTS"),
    "tool": ("grpokit.envs.tools", "TOOLS"),
    "likelihood": ("grpokit.families.masked_diffusion.likelihoods", "LIKELIHOODS"),
}
AXES = tuple(_LOCATIONS)


def get_registry(axis: str) -> Registry:
    """The registry of ``axis``; its first lookup loads every built-in and third-party plugin (:mod:`grpokit.builtins`)."""
    if axis not in _LOCATIONS:
        raise KeyError(f"unknown registry axis '{axis}'; choose one of: {', '.join(AXES)}")
    module, attr = _LOCATIONS[axis]
    return getattr(importlib.import_module(module), attr)
