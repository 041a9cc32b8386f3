"""A gymnasium environment with text observations and text actions, as a grpokit environment.

Gymnasium (PyPI ``gymnasium``; Towers et al., arXiv 2407.17032) is the reference API: ``reset(seed,
options) -> (observation, info)`` and ``step(action) -> (observation, reward, terminated,
truncated, info)``. An environment whose spaces are ``gymnasium.spaces.Text`` (or that returns
strings regardless) plugs in unchanged: the episode's dataset row is passed as
``reset(options={"row": row})``, so one registered id serves every prompt of a task. A user's own
``gymnasium.Env`` subclass needs no registration: ``environment.name: my_env.py:MyEnv`` (or the
class from Python) builds it with ``environment.options`` and wraps it here (:func:`as_environment`).
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from grpokit.envs.base import ENVIRONMENTS, StepResult


def is_gymnasium_env(obj: Any) -> bool:
    """True for an instance of ``gymnasium.Env`` (a wrapper included), without importing gymnasium when nothing did."""
    gymnasium = sys.modules.get("gymnasium")
    return gymnasium is not None and isinstance(obj, gymnasium.Env)


def as_environment(built: Any, label: str) -> Any:
    """What ``environment.name``'s class or factory built, as a grpokit environment: a ``gymnasium.Env`` through
    :class:`GymnasiumEnv`, anything else as it is."""
    return GymnasiumEnv.around(built, label) if is_gymnasium_env(built) else built


def import_gymnasium():
    try:
        import gymnasium
    except ImportError:
        raise ImportError("environment 'gymnasium' needs the gymnasium package: pip install gymnasium") from None
    return gymnasium


@ENVIRONMENTS.register("gymnasium")
class GymnasiumEnv:
    """``gymnasium.make(id, **kwargs)`` with text observations; ``reset`` gets ``options={"row": row}``.

    A non-text observation is refused with the space it has (this adapter carries text only).
    """

    def __init__(self, *, id: str, kwargs: Optional[dict[str, Any]] = None) -> None:
        gymnasium = import_gymnasium()
        try:
            self.env = gymnasium.make(id, disable_env_checker=True, **(kwargs or {}))
        except gymnasium.error.Error as exc:
            raise ValueError(f"environment 'gymnasium': gymnasium.make({id!r}) failed: {exc}") from None
        self.id = id

    @classmethod
    def around(cls, env: Any, label: str) -> "GymnasiumEnv":
        """The adapter around an already built ``gymnasium.Env`` (``label`` names it in messages)."""
        adapter = cls.__new__(cls)
        adapter.env, adapter.id = env, label
        return adapter

    def close(self) -> None:
        self.env.close()

    def _text(self, observation: Any) -> Any:
        if isinstance(observation, (str, list)):
            return observation
        raise TypeError(f"gymnasium env {self.id!r} observed a {type(observation).__name__} "
                        f"({self.env.observation_space}); grpokit's adapter carries text observations only")

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> tuple[Any, dict[str, Any]]:
        """``(observation, info)``: gymnasium's reset info reaches ``env_info`` and the metrics as a step's does."""
        observation, info = self.env.reset(seed=seed, options={"row": row})
        return self._text(observation), dict(info or {})

    def step(self, action: str) -> StepResult:
        observation, reward, terminated, truncated, info = self.env.step(action)
        return StepResult(self._text(observation) if not (terminated or truncated) else "", float(reward),
                          bool(terminated), bool(truncated), dict(info or {}))
