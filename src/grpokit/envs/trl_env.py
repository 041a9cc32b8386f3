"""TRL's ``environment_factory`` and ``tools=[...]`` as a grpokit environment: an instance's public methods are its tools.

TRL 1.16's ``GRPOTrainer(environment_factory=..., tools=[...])`` (the ``environment_factory`` and
``tools`` arguments of https://huggingface.co/docs/trl/grpo_trainer): each rollout gets its own
instance of the environment; its public methods other than ``reset`` / ``get_reward`` are tools
(schemas from ``transformers.utils.get_json_schema``: type hints and a Google-style docstring);
``reset(**row)`` gets the dataset row's fields and returns None or a string appended to the last
user message; an optional ``get_reward()`` scores the rollout from the environment's state (an
extra reward of weight 1, reported under the class name). A dict ``{name: factory}`` picks each
row's environment by the row's ``environment`` column (here: :data:`ROUTE_COLUMN`, see below).

Here, as environment ``trl`` (``environment.options``: ``factory``, ``tools``, …): a fresh
instance per episode, built in ``reset``; calls are grpokit's tool-call format and messages
(:mod:`grpokit.envs.tools`: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, the
schemas listed in a system message, one ``tool`` message per call, the same error texts and
``env/*_calls`` metrics); a turn without a call ends the episode. ``get_reward()`` is read after
every step into ``info[<class name>]`` (the last value is the episode's), and each step's reward
is its change, so ``env_return`` equals the final ``get_reward()`` however the episode ended
(TRL reads it once at the end; a pure ``get_reward`` gives the same score).

Trust: the methods and ``tools`` are the user's own code, called in this process with the
arguments the model chose (parsed JSON, checked against the signature), as TRL calls them. They
are not sandboxed: a tool that runs model-written code (a Python interpreter) belongs in
environment ``tools`` (:mod:`grpokit.envs.tools`), whose every call runs in a fresh sandboxed
interpreter. An ``async def`` method or ``get_reward`` runs to completion with ``asyncio.run``
(in the episode's worker thread); an ``async def reset`` is refused (TRL calls it synchronously).

Routing column: grpokit reads a row's ``environment`` column as the grpokit environment to play,
so TRL's names travel in :data:`ROUTE_COLUMN` (``GRPOTrainer`` moves them there, and back for
the reward functions); single-factory rows pass it to ``reset`` as ``environment``, as TRL does.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any, Callable, Optional

from grpokit.envs.base import ENVIRONMENTS, StepResult
from grpokit.envs.own_episodes import is_placeholder
from grpokit.envs.tools import SYSTEM, ToolEnvironment, tool_schema

ROUTE_COLUMN = "trl_environment"
HIDDEN = ("reset", "get_reward")  # TRL's non-tool methods
_SCHEMAS: dict[type, dict[str, dict]] = {}  # class -> {method: schema}, computed once per class


def _resolve(value: Any, what: str) -> Callable:
    """A callable as given, or the object a ``module:name`` / ``file.py:name`` string names."""
    if isinstance(value, str):
        from grpokit.plugins import PluginError, import_object, is_import_spec

        if not is_import_spec(value):
            raise ValueError(f"{what} {value!r}: give a callable, 'package.module:name' or 'path/to/file.py:name' "
                             "(grpokit's own tools run sandboxed in environment 'tools')")
        try:
            value = import_object(value, what)
        except PluginError as exc:
            raise ValueError(str(exc)) from None
    if not callable(value):
        raise ValueError(f"{what} is a {type(value).__name__}, not a callable")
    return value


def factories_of(factory: Any) -> dict[Optional[str], Callable]:
    """TRL's ``environment_factory`` as ``{name: factory}``: ``{None: f}`` for one factory, the dict as given otherwise."""
    if factory is None:
        return {}
    if isinstance(factory, dict):
        if not factory:
            raise ValueError("environment_factory={}: give at least one {name: factory}")
        return {str(k): _resolve(v, f"environment_factory[{k!r}]") for k, v in factory.items()}
    return {None: _resolve(factory, "environment_factory")}


def _label(obj: Any) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


def method_names(cls: type) -> list[str]:
    """The tools of an environment class, as TRL lists them: its functions (on the class) not named reset / get_reward or _*."""
    return [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if n not in HIDDEN and not n.startswith("_")]


def _schema(fn: Callable, name: str, owner: str) -> dict:
    try:
        return tool_schema(fn, name)
    except Exception as exc:  # transformers' DocstringParsingException / TypeHintParsingException
        raise ValueError(f"{owner}: tool {name!r}: {str(exc).splitlines()[0]} (a tool needs type hints and a Google-style "
                         "docstring with an Args section, TRL's tools contract; a method named _* is not a tool)") from None


def method_schemas(env: Any) -> dict[str, dict]:
    """``{method: schema}`` of ``env``'s tools (computed from its bound methods once per class)."""
    cls = type(env)
    if cls not in _SCHEMAS:
        _SCHEMAS[cls] = {n: _schema(getattr(env, n), n, f"environment {cls.__name__}") for n in method_names(cls)}
    return _SCHEMAS[cls]


def check_instance(env: Any, standalone: dict[str, Callable]) -> None:
    """Raise ``ValueError`` (one line) when ``env`` cannot play TRL's contract here: no sync ``reset``, a tool without
    a schema, a method that shadows a ``tools=`` function."""
    cls = type(env)
    if not callable(getattr(env, "reset", None)):
        raise ValueError(f"environment_factory built a {cls.__name__}, which has no reset() method (TRL's contract: "
                         "reset(**row) -> None or a string)")
    if inspect.iscoroutinefunction(env.reset):
        raise ValueError(f"{cls.__name__}.reset is async: TRL and grpokit call reset(**row) synchronously; make it a plain def")
    clash = sorted(set(method_schemas(env)) & set(standalone))
    if clash:
        raise ValueError(f"tool {clash[0]!r} is both in tools=[...] and a method of {cls.__name__}: rename one")


def probe(factory: Any, tools: Any = ()) -> list[str]:
    """Build one instance of each factory (as TRL does at init) and check it; the class names that define
    ``get_reward`` (one reward each). Raises ``ValueError`` in one line naming the argument."""
    standalone = {_label(fn): fn for fn in (_resolve(t, f"tools[{i}]") for i, t in enumerate(tools or ()))}
    for name, fn in standalone.items():
        _schema(fn, name, "tools=[...]")
    owners: list[str] = []
    for key, make in factories_of(factory).items():
        where = "environment_factory" if key is None else f"environment_factory[{key!r}]"
        try:
            env = make()
        except Exception as exc:
            raise ValueError(f"{where}() raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
        try:
            check_instance(env, standalone)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if callable(getattr(env, "get_reward", None)) and type(env).__name__ not in owners:
            owners.append(type(env).__name__)
    return owners


def env_reward(class_name: str) -> Callable:
    """The reward TRL adds for an environment class with ``get_reward``: that episode's last ``get_reward()`` value
    (``env_info[class_name]``), None for episodes of other environments (TRL: None, NaN in the logs, 0 in the sum)."""

    def reward(completions: list, env_info: list, **columns: Any) -> list:
        return [None if info is None else info.get(class_name) for info in env_info]

    reward.__name__ = reward.__qualname__ = class_name
    return reward


def _complete(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):  # an async def method: run it here (the episode's worker thread has no loop)
        async def wait() -> Any:
            return await result

        result = asyncio.run(wait())
    return result


@ENVIRONMENTS.register("trl")
class TRLEnvironment(ToolEnvironment):
    """TRL's ``environment_factory`` / ``tools=[...]``: a fresh instance per episode, its public methods as tools.

    See the module docstring; the methods are the user's trusted code, called in-process.

    ``factory``: a class or callable building the environment, a ``module:Name`` / ``file.py:Name``
    string, or a dict ``{name: factory}`` routed by each row's :data:`ROUTE_COLUMN`; ``tools``:
    plain functions (or ``module:function`` strings) offered in every episode; ``max_calls_per_turn``,
    ``max_output_chars``, ``result_role``, ``system_prompt`` as environment ``tools``. info per episode:
    environment ``tools``'s call counts, plus ``<class name>`` (the last ``get_reward()``).
    """

    def __init__(self, *, factory: Any = None, tools: Any = (), max_calls_per_turn: int = 4, max_output_chars: int = 2000,
                 result_role: str = "tool", system_prompt: Optional[str] = None) -> None:
        self.factories = factories_of(factory)
        self.standalone = {_label(fn): fn for fn in (_resolve(t, f"tools[{i}]") for i, t in enumerate(tools or ()))}
        if not self.factories and not self.standalone:
            raise ValueError("environment 'trl' needs environment.options.factory (TRL's environment_factory) or tools")
        self.base_schemas = {n: _schema(fn, n, "tools=[...]") for n, fn in self.standalone.items()}
        self.max_calls, self.result_role, self.max_output_chars = max_calls_per_turn, result_role, max_output_chars
        self.system_prompt, self.env, self.score = system_prompt, None, 0.0

    # ------------------------------------------------------------------ episode start
    def _build(self, row: dict[str, Any]) -> dict[str, Any]:
        """Build this episode's instance (the row's factory) and return the keyword arguments of its ``reset``, as TRL passes them."""
        kwargs = {k: v for k, v in row.items() if k != ROUTE_COLUMN}
        if is_placeholder(row):  # no train_dataset: TRL's placeholder row is one empty user message
            kwargs = {"prompt": [{"role": "user", "content": ""}]}
        if not self.factories:
            return kwargs
        if None in self.factories:
            if ROUTE_COLUMN in row:  # the row's own `environment` column, as TRL passes it to a single factory's reset
                kwargs["environment"] = row[ROUTE_COLUMN]
            self.env = self.factories[None]()
        else:
            name = row.get(ROUTE_COLUMN)
            if name not in self.factories:
                raise ValueError(f"the row's environment {name!r} is not one of environment_factory's {sorted(self.factories)}")
            self.env = self.factories[name]()
        check_instance(self.env, self.standalone)
        return kwargs

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> list[dict]:
        self.calls = self.malformed = self.failed = 0
        self.score, self.env = 0.0, None
        kwargs = self._build(row)
        self.tools = dict(self.standalone)
        schemas = dict(self.base_schemas)
        if self.env is not None:
            schemas.update(method_schemas(self.env))
            self.tools.update({n: getattr(self.env, n) for n in method_schemas(self.env)})
        observation = self.env.reset(**kwargs) if self.env is not None else None
        if observation is not None and not isinstance(observation, str):
            raise TypeError(f"{type(self.env).__name__}.reset() returned a {type(observation).__name__}: return None or a string "
                            "(grpokit's TRL adapter carries text)")
        if is_placeholder(row) and not observation:
            who = f"{type(self.env).__name__}.reset()" if self.env is not None else "environment 'trl' without a factory"
            raise ValueError(f"{who} returned no prompt and there is no train_dataset: return the prompt from reset() "
                             "or give train_dataset")
        prompt = kwargs["prompt"] if is_placeholder(row) else row["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        if not isinstance(messages[-1].get("content"), str):
            raise TypeError("grpokit's TRL adapter carries text prompts: the last prompt message's content is not a string")
        if observation:  # TRL: appended to the last message's text, as it is
            messages[-1]["content"] += observation
        self.schemas = list(schemas.values())
        if not self.schemas:
            return messages
        listing = self.system_prompt or SYSTEM.format(schemas="\n".join(json.dumps(s) for s in self.schemas))
        if messages[0]["role"] == "system":  # the prompt's own system message keeps its text, the tools after it
            return [{**messages[0], "content": f"{messages[0]['content']}\n\n{listing}"}, *messages[1:]]
        return [{"role": "system", "content": listing}, *messages]

    # ------------------------------------------------------------------ turns
    def _run(self, name: str, arguments: dict) -> tuple[str, str]:
        """One well-formed call, in this process (the user's own method or function): (text, 'ok' | 'failed'),
        with the sandbox worker's texts for a raised exception and an oversized result."""
        try:
            text = str(_complete(self.tools[name], **arguments))
        except Exception as exc:  # the tool's failure is the model's observation
            line = f"{type(exc).__name__}: {exc}".splitlines()
            return f"error: {(line[0] if line else type(exc).__name__)[:500]}", "failed"
        if len(text) > self.max_output_chars:
            return f"error: the result has {len(text)} characters, over the {self.max_output_chars}-character cap", "failed"
        return text, "ok"

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        if self.env is not None and callable(getattr(self.env, "get_reward", None)):
            score = float(_complete(self.env.get_reward))
            result.reward, self.score = score - self.score, score  # the steps' rewards sum to the last get_reward()
            result.info[type(self.env).__name__] = score
        return result


# ---------------------------------------------------------------------- GRPOTrainer's side (grpokit.api)
def route_rows(rows: Optional[list[dict]]) -> Optional[list[dict]]:
    """TRL rows with their ``environment`` column moved to :data:`ROUTE_COLUMN` (grpokit's own ``environment`` column
    names a grpokit environment to play)."""
    if rows is None:
        return None
    return [{(ROUTE_COLUMN if k == "environment" else k): v for k, v in row.items()} for row in rows]


def routing_problem(factory: Any, rows: Optional[list[dict]], where: str) -> Optional[str]:
    """Why the ``rows`` (already :func:`route_rows`) cannot be routed to a dict ``environment_factory`` (one line), or None."""
    if not isinstance(factory, dict) or rows is None:
        return None
    for i, row in enumerate(rows):
        if row.get(ROUTE_COLUMN) not in factory:
            got = f"environment={row[ROUTE_COLUMN]!r}" if ROUTE_COLUMN in row else "no 'environment' column"
            return (f"{where}: row {i} has {got}; with a dict environment_factory every row names one of "
                    f"{sorted(factory)} in its 'environment' column")
    return None


def with_environment_column(fn: Callable) -> Callable:
    """``fn`` called with the rows' ``environment`` column under its TRL name again (see :func:`route_rows`)."""
    import functools

    @functools.wraps(fn)  # inspect.signature follows __wrapped__: the scorer sees fn's own parameters
    def call(*args: Any, **kwargs: Any) -> Any:
        if ROUTE_COLUMN in kwargs:
            kwargs["environment"] = kwargs.pop(ROUTE_COLUMN)
        return fn(*args, **kwargs)

    return call


LISTING = SYSTEM.split("{schemas}")[0].replace("{{", "{").replace("}}", "}")  # how the tools' system text starts


def trl_view(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """An episode's messages as TRL's reward functions see a tool rollout: (the prompt messages, without the tools'
    listing, which TRL's chat template renders itself; every message from the first model turn on)."""
    k = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    prompt, completion = [dict(m) for m in messages[:k]], [dict(m) for m in messages[k:]]
    if prompt and prompt[0]["role"] == "system" and LISTING in prompt[0]["content"]:
        own = prompt[0]["content"].split(LISTING)[0].rstrip("\n")
        prompt = [{**prompt[0], "content": own}, *prompt[1:]] if own else prompt[1:]
    return prompt, completion


def reads_instances(fn: Callable) -> bool:
    """True for a reward that names TRL's ``environments`` parameter (the rollouts' live instances)."""
    try:
        return "environments" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def use_trl_environment(cfg: Any, factory: Any, tools: Any, max_completion_length: int,
                        max_tool_calling_iterations: Optional[int] = None) -> list[str]:
    """Point ``cfg.environment`` at environment ``trl`` for TRL's ``environment_factory`` / ``tools``; the class names
    whose ``get_reward`` is a reward (:func:`env_reward`). Raises ``ValueError`` (one line) for a factory or tool that
    cannot play (:func:`probe`).

    TRL caps a rollout's whole completion, tool results included, at ``max_completion_length`` and
    does not cap the tool rounds by default: ``environment.max_episode_tokens`` and ``max_turns`` are
    set to it unless ``grpokit=`` set them; ``max_tool_calling_iterations`` rounds of tool calls are
    ``max_turns`` = rounds + 1 (the answer after the last round).
    """
    e, default = cfg.environment, type(cfg.environment)()
    if e.name:
        raise ValueError(f"environment_factory / tools and grpokit's environment.name={e.name!r} both name an environment: give one")
    owners = probe(factory, tools)
    e.name, e.options = "trl", {**e.options, "factory": factory, "tools": list(tools or ())}
    if e.max_episode_tokens == default.max_episode_tokens:
        e.max_episode_tokens = max_completion_length
    if max_tool_calling_iterations is not None:
        e.max_turns = max_tool_calling_iterations + 1
    elif e.max_turns == default.max_turns:
        e.max_turns = max_completion_length  # every turn samples at least one token: the token cap binds first
    return owners
