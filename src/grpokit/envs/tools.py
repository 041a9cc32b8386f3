"""Tool calling: Python functions with JSON schemas, calls parsed from the model's text, run confined.

A tool is a plain function with type hints and a Google-style docstring; its JSON schema comes
from ``transformers.utils.get_json_schema`` (what chat templates take as ``tools=``). Built-ins
are registered in ``TOOLS``; a run may name ``package.module:function`` or ``file.py:function``.

Calls use the JSON tag format of Hermes / Qwen2.5 chat templates, documented here because small
models' templates (SmolLM2's) have no tool syntax of their own::

    <tool_call>{"name": "calculator", "arguments": {"expression": "37 * 46"}}</tool_call>

The environment's first observation is a system message listing the tools' schemas and this
format, then the row's prompt. Each call runs in :func:`grpokit.envs.sandbox.run_tool`, a fresh
interpreter in an OS-level sandbox (bubblewrap namespaces, else Landlock; ``sandbox: none`` only
when the config says so); the tool is imported there by reference, so a tool must be a
module-level function (``module:function`` / ``file.py:function``). The results come back as one ``tool`` message per call. A turn without a call is the final answer
and ends the episode (the rewards judge it: ``completions`` holds the last model turn). A bad
call (invalid JSON, unknown tool, wrong arguments, an exception, a timeout, an oversized
result) becomes an error message the model sees, and counts in ``env/bad_calls``.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import io
import json
import math
import operator
import re
from typing import Any, Callable, Optional

from grpokit.envs.base import ENVIRONMENTS, StepResult
from grpokit.envs.sandbox import SANDBOXES, Limits, ToolRef, choose, run_tool, tool_reference
from grpokit.registry import Registry

TOOLS = Registry("tool")
CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _arith(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.operand))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


@TOOLS.register("calculator")
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / // % ** and parentheses.

    Args:
        expression: the expression, for example "(37 * 46) + 5"
    """
    value = _arith(ast.parse(expression.strip(), mode="eval").body)
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


@TOOLS.register("python")
def python(code: str) -> str:
    """Run a short Python program and return what it prints (no imports beyond math).

    Args:
        code: the program; print the result
    """
    # The restricted builtins tell the model what the tool offers; they are no boundary (an
    # introspection walk reaches ``os``): the sandbox process around each call is.
    allowed = {k: getattr(builtins, k) for k in ("abs", "min", "max", "sum", "len", "range", "round", "int", "float", "str", "list", "dict",
                         "tuple", "set", "sorted", "enumerate", "zip", "map", "filter", "print", "pow", "divmod", "any", "all")}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {"__builtins__": allowed, "math": math})  # noqa: S102 - confined by the sandbox (grpokit.envs.sandbox)
    return out.getvalue().strip()


def resolve_tool(name: str) -> Callable:
    """A registered tool or ``package.module:function`` / ``file.py:function``."""
    if name in TOOLS:
        return TOOLS.get(name)
    if ":" in name:
        from grpokit.rewards.loading import resolve_reward  # the same import rules as a user reward

        return resolve_reward(name)
    raise ValueError(f"unknown tool '{name}': choose one of {', '.join(TOOLS.names())} or 'module:function'")


def _reference(name: str, fn: Callable) -> ToolRef:
    """How the sandbox imports tool ``name``: a registered one by its function, a user one by its config spec."""
    return tool_reference(fn if name in TOOLS else name)


def tools_problem(options: dict, where: str = "environment.options") -> Optional[str]:
    """Why the tools environment cannot run with ``options`` here (one line), or None; for the config-load check.

    The sandbox must be available (``sandbox: auto`` finds none on a machine without user
    namespaces and Landlock) and each tool reachable by import inside it.
    """
    sandbox = options.get("sandbox", "auto")
    if sandbox not in SANDBOXES:
        return f"{where}.sandbox = {sandbox!r} is not one of {', '.join(SANDBOXES)}"
    try:
        choose(sandbox)
    except ValueError as exc:
        return f"{where}.sandbox: {exc}"
    for name in options.get("tools", ("calculator",)):
        try:
            _reference(name, resolve_tool(name))
        except (ValueError, ImportError) as exc:
            return f"{where}.tools: '{name}': {str(exc).splitlines()[0]}"
    return None


def tool_schema(fn: Callable, name: str) -> dict:
    from transformers.utils import get_json_schema

    schema = get_json_schema(fn)
    schema["function"]["name"] = name
    return schema


def parse_calls(text: str) -> list[Any]:
    """Every ``<tool_call>…</tool_call>`` body in ``text``: a parsed JSON value, or the JSONDecodeError for a malformed one."""
    calls = []
    for body in CALL.findall(text):
        try:
            calls.append(json.loads(body.strip()))
        except json.JSONDecodeError as exc:
            calls.append(exc)
    return calls


SYSTEM = ("You can call tools. To call one, write <tool_call>{{\"name\": <tool name>, \"arguments\": <arguments>}}</tool_call>; "
          "the result comes back in the next message. When you know the answer, reply without a tool call.\nTools:\n{schemas}")


@ENVIRONMENTS.register("tools")
class ToolEnvironment:
    """Each model turn may call ``tools``; a turn without a call is the final answer (see the module docstring).

    info per episode: ``tool_calls`` (calls made), ``malformed_calls`` (invalid JSON, unknown tool,
    arguments that do not fit), ``failed_calls`` (the tool raised, timed out or overflowed),
    ``bad_calls`` (both), ``well_formed`` (1 - malformed / calls; 0 without calls), ``answered``
    (1: the episode ended with a turn without a call).

    Each call's confinement (:mod:`grpokit.envs.sandbox`): ``sandbox`` (auto | bwrap | landlock |
    none; building the environment raises, one line, when it is unavailable here),
    ``tool_timeout_s`` from the call on, ``max_output_chars``, ``max_file_bytes`` per file,
    ``memory_mb`` of address space, ``max_processes``.
    """

    def __init__(self, *, tools: list[str] = ("calculator",), max_calls_per_turn: int = 4, tool_timeout_s: float = 5.0,
                 max_output_chars: int = 2000, result_role: str = "tool", system_prompt: Optional[str] = None,
                 sandbox: str = "auto", max_file_bytes: int = 1 << 20, memory_mb: int = 1024, max_processes: int = 32) -> None:
        problem = tools_problem({"tools": list(tools), "sandbox": sandbox})
        if problem:
            raise ValueError(problem)
        self.tools: dict[str, Callable] = {}
        self.refs: dict[str, ToolRef] = {}
        for name in tools:
            short = name.rpartition(":")[2] if ":" in name else name
            self.tools[short] = resolve_tool(name)
            self.refs[short] = _reference(name, self.tools[short])
        self.schemas = [tool_schema(fn, n) for n, fn in self.tools.items()]
        self.max_calls, self.sandbox, self.result_role = max_calls_per_turn, sandbox, result_role
        self.limits = Limits(timeout_s=tool_timeout_s, max_output_chars=max_output_chars, max_file_bytes=max_file_bytes,
                             memory_bytes=memory_mb << 20, max_processes=max_processes)
        self.system = system_prompt or SYSTEM.format(schemas="\n".join(json.dumps(s) for s in self.schemas))

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> list[dict]:
        self.calls = self.malformed = self.failed = 0
        prompt = row["prompt"] if isinstance(row["prompt"], str) else row["prompt"][-1]["content"]
        return [{"role": "system", "content": self.system}, {"role": "user", "content": prompt}]

    def _call(self, call: Any) -> tuple[str, str]:
        """(the result message's text, 'ok' | 'malformed' (not a valid call) | 'failed' (the tool raised, hung or overflowed))."""
        if isinstance(call, json.JSONDecodeError):
            return f"error: invalid tool call JSON ({call.msg} at character {call.pos})", "malformed"
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return 'error: a tool call is {"name": ..., "arguments": {...}}', "malformed"
        fn = self.tools.get(call["name"])
        if fn is None:
            return f"error: unknown tool '{call['name']}'; tools: {', '.join(self.tools)}", "malformed"
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            return "error: arguments must be a JSON object", "malformed"
        try:
            inspect.signature(fn).bind(**arguments)
        except TypeError as exc:
            return f"error: {call['name']}: {exc}", "malformed"
        return self._run(call["name"], arguments)

    def _run(self, name: str, arguments: dict) -> tuple[str, str]:
        """One well-formed call, in a fresh sandboxed interpreter: (text, 'ok' | 'failed')."""
        out = run_tool(self.refs[name], arguments, sandbox=self.sandbox, limits=self.limits)
        return (out.text, "ok") if out.ok else (f"error: {out.text}", "failed")

    def _info(self, answered: bool) -> dict[str, float]:
        return {"tool_calls": float(self.calls), "bad_calls": float(self.malformed + self.failed),
                "malformed_calls": float(self.malformed), "failed_calls": float(self.failed),
                "well_formed": (self.calls - self.malformed) / self.calls if self.calls else 0.0, "answered": float(answered)}

    def step(self, action: str) -> StepResult:
        calls = parse_calls(action)
        if not calls:
            return StepResult("", 0.0, terminated=True, info=self._info(True))
        results = []
        for call in calls[: self.max_calls]:
            text, kind = self._call(call)
            self.calls += 1
            self.malformed += kind == "malformed"
            self.failed += kind == "failed"
            results.append({"role": self.result_role, "content": text})
        return StepResult(results, 0.0, info=self._info(False))
