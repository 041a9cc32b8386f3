"""Environments for multi-turn episodes: the API, the episode backend and the built-ins.

The built-in environments register from :data:`grpokit.builtins.BUILTIN_MODULES` like every other
registry's variants (``ENVIRONMENTS`` loads them on its first lookup).

See :mod:`grpokit.envs.base` for the ``reset`` / ``step`` contract and
:mod:`grpokit.envs.episodes` for how episodes become token-in/token-out training rows.
"""

from grpokit.envs.base import ENVIRONMENTS, Environment, StepResult, environment_factory

__all__ = ["ENVIRONMENTS", "Environment", "StepResult", "environment_factory"]
