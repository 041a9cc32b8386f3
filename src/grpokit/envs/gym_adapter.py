"""A gymnasium environment with text observations and text actions, as a grpokit environment.

Gymnasium (PyPI ``gymnasium``; Towers et al., arXiv 2407.17032) is the reference API: ``reset(seed,
options) -> (observation, info)`` and ``step(action) -> (observation, reward, terminated,
truncated, info)``. An environment whose spaces are ``gymnasium.spaces.Text`` (or that returns
strings regardless) plugs in unchanged: the episode's dataset row is passed as
``reset(options={"row": row})``, so one registered id serves every prompt of a task.
"""

from __future__ import annotations

from typing import Any, Optional

from grpokit.envs.base import ENVIRONMENTS, StepResult


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

    def _text(self, observation: Any) -> Any:
        if isinstance(observation, (str, list)):
            return observation
        raise TypeError(f"gymnasium env {self.id!r} observed a {type(observation).__name__} "
                        f"({self.env.observation_space}); grpokit's adapter carries text observations only")

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> Any:
        observation, _ = self.env.reset(seed=seed, options={"row": row})
        return self._text(observation)

    def step(self, action: str) -> StepResult:
        observation, reward, terminated, truncated, info = self.env.step(action)
        return StepResult(self._text(observation) if not (terminated or truncated) else "", float(reward),
                          bool(terminated), bool(truncated), dict(info or {}))
