"""The import graph of ``src/grpokit``, read with ``ast`` (nothing is imported).

(a) No module-level import cycle: built-in plugins register from :mod:`grpokit.builtins`, so no
registry module imports its plugins at the bottom of its file. An import inside a function or
under ``if TYPE_CHECKING:`` runs later or never and does not count; one at module level in a
class body, ``try`` or ``if`` does. ``from pkg import name`` is an edge to ``pkg.name`` when that
is a module, else to ``pkg``; importing a submodule is not counted as importing its parent
packages (a package ``__init__`` that imports its own submodules is not a cycle here).

(b) The trainer talks to a family through ``grpokit.families`` (the registry and ``Family``) and
``grpokit.families.policy`` (the Policy interface) only: no module under ``grpokit.trainer``
imports a family's folder ``grpokit.families.<name>``, at module level or inside a function,
nor names one to ``importlib.import_module`` / ``import_object``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "grpokit"
FAMILY_INTERFACE = {"grpokit.families", "grpokit.families.policy"}


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module = field(repr=False, default=None)


def modules() -> dict[str, Module]:
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = Module(name, path, is_package, ast.parse(path.read_text(), filename=str(path)))
    return found


def _resolve(name: str, known: dict) -> str | None:
    """The longest prefix of ``name`` that is a module of the package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.stmt, mod: Module, known: dict) -> list[str]:
    """The package modules an ``import`` / ``from … import`` statement imports."""
    if isinstance(node, ast.Import):
        return [t for a in node.names if (t := _resolve(a.name, known))]
    if node.level:  # relative: from the module's package, one level up per extra dot
        base = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source != PACKAGE and not source.startswith(PACKAGE + "."):
        return []
    out = []
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        out.append(sub if sub in known else _resolve(source, known))
    return [t for t in out if t]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_level_imports(mod: Module, known: dict) -> dict[str, int]:
    """target module -> first line importing it, counting only imports that run when ``mod`` is imported."""
    edges: dict[str, int] = {}

    def visit(stmts):
        for node in stmts:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue  # runs when called (decorators and defaults do run, but hold no import statement)
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, mod, known):
                    if target != mod.name:
                        edges.setdefault(target, node.lineno)
            for child in ast.iter_child_nodes(node):  # class bodies, try / if / with / for blocks
                if isinstance(child, ast.stmt):
                    visit([child])
                elif isinstance(child, ast.excepthandler):
                    visit(child.body)

    visit(mod.tree.body)
    return edges


def all_imports(mod: Module, known: dict) -> list[tuple[str, int]]:
    """Every package module ``mod`` imports anywhere (functions and TYPE_CHECKING blocks too), with its line,
    and the string constants it hands to ``import_module`` / ``import_object`` / ``__import__``."""
    out = []
    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [(t, node.lineno) for t in _targets(node, mod, known)]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            value = node.args[0].value
            if func in ("import_module", "import_object", "__import__") and isinstance(value, str):
                target = _resolve(value.partition(":")[0], known)
                if target:
                    out.append((target, node.lineno))
    return out


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def one_loop(component: list[str], graph: dict[str, dict[str, int]], mods: dict) -> str:
    """A shortest import loop through the component's first module, each arrow with the importing file and line."""
    start, members = component[0], set(component)
    previous = {start: None}
    frontier = [start]
    while frontier:  # breadth-first, back to start
        nxt = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == start:
                    path = [node]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    path = path[::-1] + [start]
                    return "\n  ".join(
                        f"{a} -> {b}  ({mods[a].path.relative_to(SRC.parent)}:{graph[a][b]})" for a, b in zip(path, path[1:]))
                if child in members and child not in previous:
                    previous[child] = node
                    nxt.append(child)
        frontier = nxt
    return " -> ".join(component)


def test_graph_reader_sees_the_package():
    mods = modules()
    graph = {name: module_level_imports(m, mods) for name, m in mods.items()}
    assert len(mods) > 100 and "grpokit.registry" in mods
    assert "grpokit.registry" in graph["grpokit.algos.losses"]  # a module-level `from grpokit.registry import Registry`


def test_reader_counts_module_level_imports_only():
    src = (
        "from typing import TYPE_CHECKING\n"
        "import grpokit.a\n"
        "from . import b\n"
        "if TYPE_CHECKING:\n    from grpokit import c\n"
        "try:\n    from grpokit.d import X\nexcept ImportError:\n    from grpokit import e\n"
        "class K:\n    from grpokit import f\n"
        "def later():\n    from grpokit import g\n"
    )
    known = {f"grpokit.{x}": None for x in "abcdefg"} | {"grpokit": None, "grpokit.pkg": None}
    mod = Module("grpokit.pkg.m", Path("m.py"), False, ast.parse(src))
    mod_known = {**known, "grpokit.pkg.b": None}
    assert set(module_level_imports(mod, mod_known)) == {"grpokit.a", "grpokit.pkg.b", "grpokit.d", "grpokit.e", "grpokit.f"}
    assert {t for t, _ in all_imports(mod, mod_known)} >= {"grpokit.c", "grpokit.g"}
    assert cycles({"x": {"y": 1}, "y": {"z": 1}, "z": {"x": 1}, "w": {"x": 1}}) == [["x", "y", "z"]]


def test_no_module_level_import_cycles():
    mods = modules()
    graph = {name: module_level_imports(m, mods) for name, m in mods.items()}
    found = cycles(graph)
    loops = "\n".join(f"{len(c)} modules: {', '.join(c)}\n  {one_loop(c, graph, mods)}" for c in found)
    assert not found, f"{len(found)} module-level import cycle(s) (register plugins from grpokit.builtins instead):\n{loops}"


def test_trainer_imports_no_family_folder():
    mods = modules()
    bad = []
    for name, mod in mods.items():
        if name != "grpokit.trainer" and not name.startswith("grpokit.trainer."):
            continue
        for target, line in all_imports(mod, mods):
            if target.startswith("grpokit.families.") and target not in FAMILY_INTERFACE:
                bad.append(f"{mod.path.relative_to(SRC.parent)}:{line} imports {target}")
    assert not bad, "the trainer must reach families through grpokit.families / grpokit.families.policy only:\n" + "\n".join(sorted(set(bad)))
