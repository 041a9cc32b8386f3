"""The environment API: what a multi-turn episode needs from the world the policy acts in.

Gymnasium's contract with text in place of arrays (Towers et al., "Gymnasium: A Standard
Interface for Reinforcement Learning Environments", arXiv 2407.17032):

    reset(row, seed)     -> observation, or gymnasium's (observation, info)
    step(action_text)    -> StepResult(observation, reward, terminated, truncated, info)

``row`` is the dataset row the episode is for (its prompt, answer and any other columns), so
one environment class serves every prompt of a task. An observation is text, or a list of chat
messages (``{"role": "user" | "tool", "content": ...}``) that the rollout appends through the
policy's chat template. ``terminated``: the episode reached an end state (success or failure,
its reward is final); ``truncated``: it was cut (a budget) without reaching one. Environments are
registered by name in ``ENVIRONMENTS``, named by import path (``my_env.py:MyEnv``), or passed as
the class or factory object from Python; a ``gymnasium.Env`` works unchanged (its
``reset(seed=, options={"row": row})``, through :mod:`grpokit.envs.gym_adapter`). One is built at
load to check it (:mod:`grpokit.envs.checks`), then once per episode by the rollout with the
run's ``environment.options``; a dataset row may name its own in an ``environment`` column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Union

from grpokit.registry import Registry

Message = dict[str, Any]  # {"role": ..., "content": ...}
Observation = Union[str, list[Message]]

ENVIRONMENTS = Registry("environment")


@dataclass
class StepResult:
    """What one ``step`` returns (gymnasium's 5-tuple, named).

    observation: what the policy sees next (ignored once the episode has ended; "" for none)
    reward:      this step's reward (the episode return is their sum)
    terminated:  the episode reached an end state
    truncated:   the episode was cut short (a step budget) without an end state
    info:        anything else, any JSON value: every key reaches the rewards (``env_info``), numbers and
                 bools the ``env/<key>`` metrics (:mod:`grpokit.envs.info`)
    """

    observation: Observation = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, value: Any) -> "StepResult":
        """A StepResult from itself or gymnasium's ``(obs, reward, terminated, truncated, info)`` tuple."""
        if isinstance(value, StepResult):
            return value
        if isinstance(value, tuple) and len(value) == 5:
            obs, reward, terminated, truncated, info = value
            return cls(obs, float(reward), bool(terminated), bool(truncated), dict(info or {}))
        raise TypeError(f"step() must return a StepResult or a 5-tuple, got {type(value).__name__}")


def reset_result(value: Any) -> tuple[Observation, dict[str, Any]]:
    """``(observation, info)`` of what ``reset`` returned: an observation, or gymnasium's ``(observation, info)`` pair.

    An observation is text or a list of messages, never a tuple, so the pair is unambiguous; the
    info reaches the rewards and metrics as a step's info does (``env_info``, ``env/<key>``).
    """
    if isinstance(value, tuple):
        if len(value) != 2 or not isinstance(value[1], dict):
            raise TypeError("reset() must return an observation or an (observation, info dict) pair, "
                            f"got a tuple of {len(value)}")
        return value[0], dict(value[1])
    return value, {}


class Environment(Protocol):
    """A text environment for one episode (see the module docstring); an optional ``close()`` is
    called when the episode's batch is done (a server session, a subprocess)."""

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> Observation | tuple[Observation, dict[str, Any]]: ...

    def step(self, action: str) -> StepResult: ...


def environment_label(name: Any) -> str:
    """How messages name an environment: its registered name or spec, or ``module:Name`` for a class or factory object."""
    if isinstance(name, str):
        return name
    if hasattr(name, "__module__") and hasattr(name, "__qualname__"):  # a class or function
        return f"{name.__module__}:{name.__qualname__}"
    return repr(name)


def environment_factory(name: Any) -> Any:
    """The class or factory that ``environment.name`` names, called with ``environment.options`` to build one environment.

    ``name``: a registered name, ``package.module:Class`` / ``path/file.py:Class`` (resolved by
    :func:`grpokit.plugins.import_object`, the working folder importable), or the class or
    factory itself (from Python). A user's object is wrapped so that what it builds passes
    through :func:`grpokit.envs.gym_adapter.as_environment`: a ``gymnasium.Env`` (class or
    factory result) works through the gymnasium adapter, no registration module needed.
    Raises ``ValueError`` in one line naming the environment and the cause.
    """
    if isinstance(name, str) and name in ENVIRONMENTS:
        return ENVIRONMENTS.get(name)
    if isinstance(name, str):
        from grpokit.plugins import PluginError, import_object, is_import_spec

        if not is_import_spec(name):
            raise ValueError(f"unknown environment '{name}': choose one of {', '.join(ENVIRONMENTS.names())}, "
                             "'package.module:Class' or 'path/to/file.py:Class'")
        try:
            obj = import_object(name, "environment")
        except PluginError as exc:
            raise ValueError(str(exc)) from None
        except Exception as exc:  # an error inside the user's module (not an ImportError): its first line
            raise ValueError(f"environment {name!r}: importing it failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    else:
        obj = name
    if not callable(obj):
        raise ValueError(f"environment {environment_label(name)!r} is a {type(obj).__name__}, not a class or factory "
                         "(called with environment.options to build one environment)")
    from grpokit.envs.gym_adapter import as_environment

    def build(**options: Any) -> Any:
        return as_environment(obj(**options), environment_label(name))

    build.__wrapped__ = obj  # inspect.signature(build) shows the user's parameters
    return build
