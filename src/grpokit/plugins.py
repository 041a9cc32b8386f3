"""User code named by a string: ``"package.module:name"`` or ``"path/to/file.py:name"``.

One resolver for everything a config or a script may name by import path (reward functions,
environment classes, datasets, policy families, plugin modules). A file path is relative to
the working folder or absolute; a module name is looked up on ``sys.path`` with the working
folder on it, as ``python -m`` would (the ``grpokit`` console script does not put it there
by itself). Every failure is one ``PluginError`` line naming the string and the fix.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


class PluginError(ValueError):
    """A ``module:name`` / ``file.py:name`` spec cannot be resolved; the message says what to change."""


def is_import_spec(spec: Any) -> bool:
    """True when ``spec`` is a string of the form ``source:name`` (a module or a .py file, then an attribute)."""
    if not isinstance(spec, str) or ":" not in spec:
        return False
    source, _, attr = spec.rpartition(":")
    return bool(source) and bool(attr) and attr.isidentifier()


def _is_file(source: str) -> bool:
    return source.endswith(".py") or "/" in source or "\\" in source


def working_folder_importable() -> None:
    """Put the working folder on ``sys.path`` (first), as ``python -m`` and pytest do for a user's own modules."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def load_file(path_text: str, what: str) -> ModuleType:
    """Import a Python file by path (relative to the working folder, or absolute); imported once per path."""
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"{what}: file not found: {path}")
    # A name derived from the full path keeps two files called rewards.py apart.
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"grpokit_user_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise PluginError(f"{what}: cannot import {path} as a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PluginError(f"{what}: importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def load_module(source: str, what: str) -> ModuleType:
    """Import ``source``: a dotted module name (the working folder is importable) or a ``.py`` file path."""
    if _is_file(source):
        return load_file(source, what)
    working_folder_importable()
    try:
        return importlib.import_module(source)
    except ImportError as exc:
        raise PluginError(
            f"{what}: cannot import module '{source}' ({exc}); check the name and that it is importable "
            "from the working folder, or give 'path/to/file.py:name'"
        ) from exc


def import_object(spec: str, what: str) -> Any:
    """The object named by ``spec`` (``"package.module:name"`` or ``"path/to/file.py:name"``); ``what`` names the field."""
    if not is_import_spec(spec):
        raise PluginError(f"{what} {spec!r}: expected 'package.module:name' or 'path/to/file.py:name'")
    source, _, attr = spec.rpartition(":")
    module = load_module(source, f"{what} {spec!r}")
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise PluginError(f"{what} {spec!r}: {source} has no '{attr}' (names there: {', '.join(public[:20]) or 'none'})")
    return getattr(module, attr)
