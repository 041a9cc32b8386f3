"""Docstrings, comments, presets and docs cite papers, never the project's private notes.

An outside reader can follow "DAPO, arXiv 2503.14476, §3.2"; "variants-a §3", "(B §8)" or a
path outside the repository mean nothing to them. ``spec`` as a Python name (``find_spec``,
registry ``Spec`` objects, device specs) is not a citation and is not matched.
"""

from __future__ import annotations

import re
from pathlib import Path

import grpokit

ROOT = Path(grpokit.__file__).resolve().parents[2]  # src/grpokit/__init__.py -> the repository
SCANNED = ("src", "docs", "tests", "examples", "benchmarks", "README.md", "Makefile", "pyproject.toml")
SUFFIXES = {".py", ".yaml", ".yml", ".md", ".toml", ".txt", ""}
FORBIDDEN = [
    re.compile(r"variants-[ab]\b"),  # the notes' file names
    re.compile(r"\bspec(?:'s)?\s*§"),  # "spec §1.2"
    re.compile(r"\bspec variants"),
    re.compile(r"(?<![\w-])[AB] §\d"),  # "(B §4)", "A §8.3"
    re.compile(r"(?<![\w.\]])\(spec(?:\)|:| §)"),  # "(spec)", "(spec: ...", "(spec §"; not a call f(spec)
    re.compile(r"\bspec defaults\b"),
    re.compile(r"\bthe spec(?:'s)?\b(?! of)"),  # "the spec's fix", "per the spec"
    re.compile(r"\.\./shared/|/work/shared"),
    re.compile(r"REFERENCE-NUMBERS"),
    re.compile(r"cross-cutting notes"),
]


def _generated(path: Path) -> bool:
    return any(part == "__pycache__" or part.endswith(".egg-info") for part in path.parts)


def _files() -> list[Path]:
    out = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += [p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES and not _generated(p)]
    return sorted(p for p in out if p.name != Path(__file__).name)  # this file quotes the old forms


def test_no_citation_of_private_spec_notes():
    hits = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in FORBIDDEN):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:120]}")
    assert not hits, "cite the paper (title, arXiv id, section) instead of:\n" + "\n".join(hits)


def test_patterns_match_the_old_forms_and_spare_python_names():
    old = ["(variants-a §9)", "(spec §3.2)", "arXiv 2505.07291 (B §8)", "k_max (spec)", "spec variants-b §5",
           "(spec defaults)", "the spec's fix", "`../shared/REFERENCE-NUMBERS.md`", "(variants-b cross-cutting notes)"]
    fine = ["importlib.util.find_spec(spec.module)", "resolve_device(spec)", "registry.spec(name)",
            "_dry_run(spec, options)", "def is_builtin(spec: str)",
            "json.dumps(spec)", "a 'module:function' spec.", "DAPO, arXiv 2503.14476, §3.2"]
    assert all(any(p.search(s) for p in FORBIDDEN) for s in old)
    assert not any(p.search(s) for p in FORBIDDEN for s in fine)
