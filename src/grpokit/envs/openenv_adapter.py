"""An OpenEnv environment server (PyPI ``openenv-core``) as a grpokit environment.

OpenEnv serves an environment over HTTP / WebSocket (``openenv.core.env_server.create_fastapi_app``);
each client holds one session (one episode at a time) on the server. This adapter talks to a
running server through OpenEnv's own ``GenericEnvClient`` (dictionaries, no environment package
needed here): one session per episode, opened at ``reset`` and closed when the episode ends.
Text moves through one field of the action (``action_key``) and one of the observation
(``observation_key``); the observation's ``reward`` and ``done`` are the step's reward and
termination, and its other fields, of any JSON type, become ``info`` (OpenEnv's serialisation
leaves an observation's ``metadata`` on the server).
"""

from __future__ import annotations

from typing import Any, Optional

from grpokit.envs.base import ENVIRONMENTS, StepResult


def import_openenv():
    try:
        from openenv.core.generic_client import GenericEnvClient
    except ImportError:
        raise ImportError("environment 'openenv' needs the openenv-core package: pip install 'grpokit[envs]'") from None
    return GenericEnvClient


@ENVIRONMENTS.register("openenv")
class OpenEnvEnvironment:
    """Episodes on an OpenEnv server at ``base_url`` (``http://host:port``).

    action_key: the action field that carries the model's turn text; observation_key: the
    observation field with the text the model sees; reset_from_row: row columns passed as
    ``reset`` keywords (e.g. ``[prompt]``, for servers whose episodes depend on the data).
    """

    def __init__(self, *, base_url: str, action_key: str = "message", observation_key: str = "text",
                 reset_from_row: Optional[list[str]] = None, message_timeout_s: float = 30.0) -> None:
        self.base_url, self.action_key, self.observation_key = base_url, action_key, observation_key
        self.reset_from_row, self.timeout = list(reset_from_row or []), message_timeout_s
        self.client: Any = None

    def _text(self, observation: Any) -> str:
        if not isinstance(observation, dict) or self.observation_key not in observation:
            keys = sorted(observation) if isinstance(observation, dict) else type(observation).__name__
            raise KeyError(f"the OpenEnv observation has no '{self.observation_key}' field ({keys}): set environment.options.observation_key")
        return str(observation[self.observation_key])

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> str:
        self.close()
        client_cls = import_openenv()
        self.client = client_cls(base_url=self.base_url, message_timeout_s=self.timeout).sync()
        self.client.connect()
        kwargs = {k: row[k] for k in self.reset_from_row}
        result = self.client.reset(seed=seed, **kwargs)
        return self._text(result.observation)

    def step(self, action: str) -> StepResult:
        result = self.client.step({self.action_key: action})
        obs = result.observation
        info = {k: v for k, v in obs.items() if k != self.observation_key} if isinstance(obs, dict) else {}
        if result.done:
            self.close()
            return StepResult("", float(result.reward or 0.0), terminated=True, info=info)
        return StepResult(self._text(obs), float(result.reward or 0.0), info=info)

    def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            client.close()
