"""Environments for multi-turn episodes: the API, the episode backend and the built-ins.

See :mod:`grpokit.envs.base` for the ``reset`` / ``step`` contract and
:mod:`grpokit.envs.episodes` for how episodes become token-in/token-out training rows.
"""

from grpokit.envs import guessing, gym_adapter, navigation, openenv_adapter, tools, trl_env  # noqa: F401  (register the built-in environments)
from grpokit.envs.base import ENVIRONMENTS, Environment, StepResult, environment_factory

__all__ = ["ENVIRONMENTS", "Environment", "StepResult", "environment_factory"]
