"""Run one tool call in a forked child process: a time limit, an output cap, no network, writes kept in a scratch folder.

What the child enforces (Linux, ``fork`` start method):

* **time**: the parent waits ``timeout_s`` for the result, then kills the child (an infinite loop
  costs ``timeout_s``, never the run);
* **output**: a result longer than ``max_output_chars`` characters is refused in the child, so
  a 10 MB result never crosses the pipe;
* **network**: ``socket.socket`` and ``socket.create_connection`` raise ``PermissionError``;
* **files**: the working directory is a fresh scratch folder; ``open`` for writing, and
  ``os.remove`` / ``rename`` / ``mkdir`` / ``rmdir`` and the like, raise ``PermissionError``
  outside it; ``RLIMIT_FSIZE`` caps any file the child writes at ``max_file_bytes``.

These are guards against a model's accidents and mistakes (the tools are the run's own Python
functions), not a security boundary against hostile code: Python-level patches can be undone
from inside Python. Run untrusted code in a container [grpokit's stated limit].
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional


@dataclass
class ToolOutcome:
    """``ok`` with the result's text, or not ``ok`` with ``kind`` ('timeout', 'exception', 'too_long') and ``text`` saying why."""

    ok: bool
    text: str
    kind: Optional[str] = None


def _confine(scratch: Path, max_file_bytes: int) -> None:
    """In the child: no sockets, writes only under ``scratch``, files capped (see the module docstring)."""
    import builtins
    import io
    import resource
    import shutil
    import socket

    def refuse(*_: Any, **__: Any) -> None:
        raise PermissionError("tools have no network access")

    socket.socket = refuse  # type: ignore[misc,assignment]
    socket.create_connection = refuse  # type: ignore[assignment]
    root = scratch.resolve()

    def inside(path: Any) -> bool:
        try:
            return Path(os.fsdecode(path)).resolve().is_relative_to(root)
        except (TypeError, ValueError):
            return False  # a file descriptor or something odd: refused

    real_open = builtins.open

    def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+") and not inside(file):
            raise PermissionError(f"tools may write only inside their scratch folder, not {file!r}")
        return real_open(file, mode, *args, **kwargs)

    builtins.open = io.open = guarded_open  # type: ignore[assignment]

    def only_inside(fn: Callable) -> Callable:
        def wrapped(*paths: Any, **kwargs: Any) -> Any:
            for p in paths[:2]:
                if isinstance(p, (str, bytes, os.PathLike)) and not inside(p):
                    raise PermissionError(f"tools may change files only inside their scratch folder, not {p!r}")
            return fn(*paths, **kwargs)
        return wrapped

    for name in ("remove", "unlink", "rename", "replace", "mkdir", "makedirs", "rmdir", "removedirs", "chmod", "symlink", "link"):
        setattr(os, name, only_inside(getattr(os, name)))
    shutil.rmtree = only_inside(shutil.rmtree)  # type: ignore[assignment]
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    os.chdir(root)


def _child(conn: Any, fn: Callable, arguments: dict, scratch: str, max_output_chars: int, max_file_bytes: int) -> None:
    try:
        _confine(Path(scratch), max_file_bytes)
        text = str(fn(**arguments))
        if len(text) > max_output_chars:
            conn.send(ToolOutcome(False, f"the result has {len(text)} characters, over the {max_output_chars}-character cap", "too_long"))
        else:
            conn.send(ToolOutcome(True, text))
    except BaseException as exc:  # the tool's failure is the model's observation
        conn.send(ToolOutcome(False, f"{type(exc).__name__}: {exc}".splitlines()[0][:500], "exception"))
    finally:
        conn.close()


def run_tool(fn: Callable, arguments: dict, *, timeout_s: float = 5.0, max_output_chars: int = 2000,
             max_file_bytes: int = 1 << 20, scratch_root: Optional[str] = None) -> ToolOutcome:
    """``fn(**arguments)`` in a confined child process (see the module docstring); never raises for the tool's faults."""
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="grpokit-tool-", dir=scratch_root) as scratch:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child, fn, arguments, scratch, max_output_chars, max_file_bytes), daemon=True)
        proc.start()
        child.close()
        try:
            if parent.poll(timeout_s):
                try:
                    return parent.recv()
                except EOFError:
                    return ToolOutcome(False, "the tool's process died without a result", "exception")
            return ToolOutcome(False, f"the tool did not finish within {timeout_s:g} s", "timeout")
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join(1.0)
            parent.close()
