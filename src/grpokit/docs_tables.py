"""Markdown tables of what grpokit registers, rendered from the registries so that the docs cannot drift.

Each table lives in a markdown file between two markers::

    <!-- generated: presets -->
    ...the table...
    <!-- end generated -->

``python -m grpokit.docs_tables --write`` rewrites every such block of ``README.md`` and
``docs/reference.md`` from the registries; ``--check`` exits 1 naming each block that differs
(``tests/test_docs_tables.py`` runs the same comparison); with no flag the tables are printed
(also ``grpokit list --markdown``). The tables:

- ``registries``: every axis of :data:`grpokit.registries.AXES`, each name with the first line of
  its docstring (``Registry.summary``);
- ``presets``: every packaged preset (``src/grpokit/presets/*.yaml``) with its description, model,
  policy family and kind of run;
- ``families``: every policy family of :data:`grpokit.families.FAMILIES` (name, description,
  embedded models, presets);
- ``methods``: the README's one table, a row per family and kind of run with its presets and docs page;
- ``config``: every config field with its default and its documentation.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[2]  # the repository (src/grpokit/docs_tables.py)
FILES = ("README.md", "docs/reference.md")  # files whose generated blocks --write rewrites
BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)

# kind of run -> (what the README's table calls it, the docs page that describes it, relative to the repository)
KINDS = {
    "grpo": ("GRPO and its variants", None),  # the family's own page and algorithms.md
    "environment": ("multi-turn episodes in an environment", "docs/environments.md"),
    "offline": ("offline stage on given completions (SFT, DPO, KTO)", "docs/offline.md"),
}


def _cell(text: Any) -> str:
    """One markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _codes(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


# ---------------------------------------------------------------------------- presets and their families
def preset_info() -> dict[str, dict[str, str]]:
    """name -> {description, model, family, kind} of every packaged preset (raw YAML: nothing loads).

    ``family`` is the family that claims the preset's ``model.name``; a model that is a run folder
    (``runs/tool_use_sft``) is written by another preset (its ``logging.output_dir``), whose family it takes.
    ``kind``: ``offline`` (``stage`` is not grpo), ``environment`` (``environment.name`` set) or ``grpo``.
    """
    from grpokit.config.loading import preset_names, raw_config
    from grpokit.config.schema import Config
    from grpokit.families import FAMILIES

    default = Config()
    raw = {name: raw_config(None, name, []) for name in preset_names()}
    writer = {(d.get("logging") or {}).get("output_dir", default.logging.output_dir): n for n, d in raw.items()}
    info: dict[str, dict[str, str]] = {}

    def family(name: str, seen: tuple[str, ...] = ()) -> str:
        model = raw[name].get("model") or {}
        model_name = str(model.get("name", default.model.name))
        if model_name in writer and writer[model_name] != name and writer[model_name] not in seen:
            return family(writer[model_name], (*seen, name))
        return FAMILIES.for_name(model_name, str(model.get("family", "auto") or "auto")).name

    for name, data in raw.items():
        env = (data.get("environment") or {}).get("name")
        stage = data.get("stage", default.stage)
        kind = "environment" if env else "offline" if stage != "grpo" else "grpo"
        info[name] = {"description": str(data.get("description", "")),
                      "model": str((data.get("model") or {}).get("name", default.model.name)),
                      "family": family(name), "kind": kind}
    return info


def family_page(name: str) -> Optional[str]:
    """The docs page of family ``name`` (``docs/families/<name>.md``, relative to the repository), None when it has none."""
    page = f"docs/families/{name}.md"
    return page if (ROOT / page).is_file() else None


def _link(page: Optional[str], base: str) -> str:
    """A markdown link to ``page`` from a file in folder ``base`` (both relative to the repository)."""
    if page is None:
        return "—"
    return f"[{Path(page).name}]({os.path.relpath(page, base or '.')})"


# ---------------------------------------------------------------------------- the tables
def registries_table(base: str = "docs") -> str:
    """Every registry axis, each as a heading and a table of its names and summaries."""
    from grpokit.registries import AXES, get_registry

    parts = []
    for axis in AXES:
        reg = get_registry(axis)
        parts.append(f"### `{axis}`\n\n" + _table(("name", "what it is"), [(f"`{n}`", reg.summary(n)) for n in reg.names()]))
    return "\n".join(parts)


def presets_table(base: str = "docs") -> str:
    """Every packaged preset: ``grpokit train --preset NAME``."""
    rows = [(f"`{n}`", i["description"], f"`{i['model']}`", i["family"], i["kind"]) for n, i in sorted(preset_info().items())]
    return _table(("preset", "description", "model", "family", "kind"), rows)


def families_table(base: str = "docs") -> str:
    """Every registered policy family with its embedded models, presets and docs page."""
    from grpokit.families import FAMILIES

    by_family: dict[str, list[str]] = defaultdict(list)
    for name, info in sorted(preset_info().items()):
        by_family[info["family"]].append(name)
    rows = [(f"`{f.name}`", f.description, "; ".join(f"`{m}`: {d}" for m, d in f.embedded.items()) or "—",
             _codes(by_family.get(f.name, [])) or "—", _link(family_page(f.name), base)) for f in FAMILIES]
    return _table(("family", "what it trains", "embedded models", "presets", "docs"), rows)


def methods_table(base: str = "") -> str:
    """The README's table: per family and kind of run, its presets and the page that describes them."""
    from grpokit.families import FAMILIES

    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, info in sorted(preset_info().items()):
        groups[(info["family"], info["kind"])].append(name)
    rows = []
    for family in FAMILIES:
        first = True
        for kind, (what, page) in KINDS.items():
            if groups.get((family.name, kind)):
                docs = _link(page, base) if page else f"{_link(family_page(family.name), base)}, {_link('docs/algorithms.md', base)}"
                rows.append((f"`{family.name}`", family.description if first else "", what,
                             _codes(groups[(family.name, kind)]), docs))
                first = False
    return _table(("policy family", "what it is", "runs", "presets (`--preset NAME`)", "docs"), rows)


def config_table(base: str = "docs") -> str:
    """Every config field (dotted name), its default and its documentation."""
    from grpokit.config.loading import field_docs

    return _table(("field", "default", "what it does"), [(f"`{n}`", _yaml(d), doc) for n, doc, d in field_docs()])


def _yaml(value: Any) -> str:
    """A default as it would be written in a config file (YAML flow style), empty for "" / [] / {}."""
    import dataclasses
    import json

    import yaml

    plain = json.loads(json.dumps(value, default=dataclasses.asdict))  # dataclass entries (rewards) as mappings
    if plain in ("", [], {}):
        return ""
    return "`" + yaml.safe_dump(plain, default_flow_style=True, width=10**6).strip().removesuffix("...").strip() + "`"


TABLES: dict[str, Callable[[str], str]] = {"registries": registries_table, "presets": presets_table,
                                           "families": families_table, "methods": methods_table, "config": config_table}


# ---------------------------------------------------------------------------- the blocks in files
def blocks(text: str) -> list[tuple[str, str]]:
    """``(name, body)`` of every generated block of a markdown ``text``."""
    return [(m["name"], m["body"]) for m in BLOCK.finditer(text)]


def render_file(path: Path) -> str:
    """``path``'s text with each generated block rendered afresh (ValueError naming an unknown block)."""
    text = path.read_text()
    base = str(path.resolve().parent.relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else ""
    base = "" if base == "." else base
    cache: dict[str, str] = {}

    def fresh(m: re.Match) -> str:
        name = m["name"]
        if name not in TABLES:
            raise ValueError(f"{path}: generated block '{name}' is not a table; choose one of {', '.join(TABLES)}")
        if name not in cache:
            cache[name] = TABLES[name](base)
        return m.group(1) + cache[name] + m.group(4)

    return BLOCK.sub(fresh, text)


def stale(files: tuple[str, ...] = FILES) -> list[str]:
    """The files (relative) whose generated blocks differ from the registries."""
    return [f for f in files if render_file(ROOT / f) != (ROOT / f).read_text()]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpokit.docs_tables", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite the generated blocks of {', '.join(FILES)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when a committed block differs from the registries")
    args = parser.parse_args(argv)
    if (args.write or args.check) and not (ROOT / "docs").is_dir():
        parser.error(f"--write / --check work in a source checkout (an editable install); {ROOT} has no docs/ folder")
    if args.write:
        for f in FILES:
            (ROOT / f).write_text(render_file(ROOT / f))
        return 0
    if args.check:
        bad = stale()
        for f in bad:
            print(f"{f}: generated tables differ from the registries; run: python -m grpokit.docs_tables --write", file=sys.stderr)
        return 1 if bad else 0
    print(markdown())
    return 0


def markdown(base: str = "docs") -> str:
    """Every table with a heading (what ``grpokit list --markdown`` prints)."""
    return "\n".join(f"## {name}\n\n{fn(base)}" for name, fn in TABLES.items())


if __name__ == "__main__":
    sys.exit(main())
