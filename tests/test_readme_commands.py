"""README's and the docs pages' commands stay runnable: each one is checked without training anything.

Every shell command of README.md and of docs/**/*.md (run from the repository root) that starts with ``grpokit``, ``python -m grpokit...``, ``make``
or ``python benchmarks/...`` (also ``.venv/bin/python``; ``torchrun ... -m grpokit.cli ARGS`` is checked as ``grpokit ARGS``), in its fenced code blocks and in its
inline code spans, is checked the way its program would see it:

- ``grpokit ...``: parsed by ``grpokit.cli.build_parser()`` (an unknown subcommand or flag
  fails); ``train`` / ``demo`` / ``eval`` then load their config as the CLI does (config file,
  ``--preset``, ``--set``, ``--stage``): unknown presets, files and keys fail. Files the config
  names (``data.path``, reward ``.py`` files, ``model.name`` / ``model.teacher`` folders) must
  exist, or, under ``runs/``, be written by an earlier command of the same code block (its
  ``logging.output_dir`` and the checkpoints ``step-N`` it keeps). ``--resume`` and ``eval
  --model`` likewise need a run that an earlier command writes. A command followed by a
  ``grpokit: error: ...`` line is an example of a mistake: it must fail with that message.
- ``python benchmarks/X.py ...`` and ``python -m grpokit.mod ...``: run as a script up to its
  ``ArgumentParser.parse_args``, which parses the flags and then stops the run
  (a script that never parses its arguments is not run at all: the test fails instead).
- ``make T``: T is a target of the Makefile.

A token ``a|b|c`` stands for each alternative. Not checked: a command with a ``...`` token
(arguments left out) and an inline span with a placeholder in capitals (``grpokit train --preset
NAME``). ``grpokit edit --out DIR`` writes ``DIR`` and its edited model ``DIR/edited``. An inline
span may read what the code blocks of its page and the inline spans before it write. Fast:
nothing trains, no model loads.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]  # every page whose commands are checked
README_MAX_LINES = 300  # the README is the front door; the detail lives in docs/
PYTHONS = ("python", "python3", ".venv/bin/python")
NOT_SHELL = ("python", "py", "json", "yaml", "yml", "toml", "text", "txt", "markdown", "md")


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    line: int  # line number in its page
    block: int  # code block index; -1 for an inline code span
    expected_error: Optional[str] = None  # the "grpokit: error: ..." line printed after it
    page: str = "README.md"  # the page, relative to the repository

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {shlex.join(self.argv)}"


def _program(argv: list[str]) -> Optional[str]:
    """Which kind of command ``argv`` is: grpokit, module, benchmark, make; None for others."""
    if not argv:
        return None
    if argv[0] == "grpokit":
        return "grpokit"
    if argv[0] == "make":
        return "make"
    if argv[0] in PYTHONS and len(argv) > 2 and argv[1] == "-m" and re.fullmatch(r"grpokit(\.\w+)*", argv[2]):
        return "module"
    if argv[0] in PYTHONS and len(argv) > 1 and argv[1].startswith("benchmarks/"):
        return "benchmark"
    return None


def _expand(argv: list[str]) -> list[list[str]]:
    """Each alternative of a ``a|b|c`` token (README's shorthand), as its own argv."""
    for i, token in enumerate(argv):
        if "|" in token and not token.startswith("-"):
            prefix, _, rest = token.rpartition("=") if "=" in token else ("", "", token)
            head = prefix + "=" if prefix else ""
            return [x for alt in rest.split("|") for x in _expand([*argv[:i], head + alt, *argv[i + 1:]])]
    return [argv]


def _torchrun(argv: list[str]) -> list[str]:
    """``torchrun [its flags] -m grpokit.cli ARGS`` is the command ``grpokit ARGS`` on every rank."""
    if argv[:1] == ["torchrun"] and "-m" in argv:
        at = argv.index("-m")
        if argv[at + 1:at + 2] == ["grpokit.cli"]:
            return ["grpokit", *argv[at + 2:]]
    return argv


def _split(text: str) -> list[str]:
    return _torchrun(shlex.split(text.removeprefix("$ "), comments=True))


def _elided(argv: list[str], inline: bool) -> bool:
    """A command with arguments left out (``...``), or an inline template with a placeholder (``--preset NAME``)."""
    return "..." in argv or (inline and any(re.fullmatch(r"[A-Z][A-Z_]{2,}", a) for a in argv[1:]))


def readme_commands(text: str, page: str = "README.md") -> list[Command]:
    """The commands of a markdown ``text``: code blocks line by line (``\\`` joins lines), then inline spans."""
    commands: list[Command] = []
    lines = text.splitlines()
    block, lang, in_block, pending, start = -1, "", False, "", 0
    for no, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            in_block = not in_block
            if in_block:
                block, lang = block + 1, stripped[3:].strip().lower()
            continue
        if not in_block or lang in NOT_SHELL:
            continue
        if pending == "":
            start = no
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line, pending = pending + stripped, ""
        argv = _split(line) if _program(_torchrun(line.removeprefix("$ ").split())[:3]) else []
        if _program(argv) is None or _elided(argv, inline=False):
            continue
        following = lines[no].strip() if no < len(lines) else ""
        error = following.removeprefix("grpokit: error: ") if following.startswith("grpokit: error: ") else None
        commands += [Command(tuple(a), start, block, error, page) for a in _expand(argv)]
    # inline spans outside the blocks (a block becomes its newlines, so line numbers stay); each command once
    prose = re.sub(r"^\s*```.*?^\s*```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    inline: dict[tuple[str, ...], Command] = {}
    for match in re.finditer(r"`([^`\n]+)`", prose):
        argv = match.group(1).split()
        if _program(argv) is None or (argv[0] == "grpokit" and len(argv) > 1 and "." in argv[1]) or _elided(argv, inline=True):
            continue
        line = prose[: match.start()].count("\n") + 1
        for a in _expand(_split(match.group(1))):
            inline.setdefault(tuple(a), Command(tuple(a), line, -1, None, page))
    return commands + list(inline.values())


COMMANDS = [c for path in PAGES for c in readme_commands(path.read_text(), str(path.relative_to(ROOT)))]


# ---------------------------------------------------------------------------- grpokit commands
def _parse(argv: tuple[str, ...], capsys) -> argparse.Namespace:
    from grpokit.cli import build_parser

    try:
        return build_parser().parse_args(list(argv[1:]))
    except SystemExit:
        pytest.fail(f"grpokit's parser refuses it: {capsys.readouterr().err.strip().splitlines()[-1]}")


def _config(args: argparse.Namespace):
    from grpokit.cli import _load

    if args.command == "demo":  # as cmd_demo does
        args.config, args.preset = None, "demo"
    return _load(args)


def _kept_checkpoints(cfg) -> set[int]:
    """Steps whose checkpoint a run of ``cfg`` keeps: every ``checkpoint_every`` and the last, newest ``keep_checkpoints``."""
    steps, every = cfg.train.steps, cfg.logging.checkpoint_every
    saved = sorted({*(range(every, steps + 1, every) if every else ()), steps})
    return set(saved[-cfg.logging.keep_checkpoints:])


def _writes(command: Command, capsys) -> set[str]:
    """Paths (relative, as written in README) that ``command`` creates: a run folder and its checkpoints."""
    if _program(list(command.argv)) != "grpokit" or command.expected_error:
        return set()
    if command.block < 0 and len(command.argv) == 2:  # prose naming a subcommand (`grpokit synth`)
        return set()
    args = _parse(command.argv, capsys)
    if args.command == "edit":
        return _edit_writes(args)
    if args.command not in ("train", "demo"):
        return set()
    cfg = _config(args)
    out = cfg.logging.output_dir.rstrip("/")
    return {out} | {f"{out}/checkpoints/step-{n}" for n in _kept_checkpoints(cfg)}


def _edit_writes(args: argparse.Namespace) -> set[str]:
    """``grpokit edit`` writes its ``--out`` folder with the stage-1 model in ``edited/`` (grpokit.editing.pipeline)."""
    out = args.out.rstrip("/")
    return {out, f"{out}/edited"}


def _written_before(command: Command, capsys) -> set[str]:
    """What the commands before ``command`` in its code block write (inline spans: every code block's commands of its page)."""
    if command.block < 0:
        before = COMMANDS[: COMMANDS.index(command)] if command in COMMANDS else COMMANDS
        earlier = [c for c in before if c.page == command.page]
    else:
        earlier = [c for c in COMMANDS if c.page == command.page and c.block == command.block and c.line < command.line]
    return set().union(*(_writes(c, capsys) for c in earlier)) if earlier else set()


def _check_path(path: str, what: str, written: set[str]) -> None:
    if path.startswith("runs/"):
        assert path.rstrip("/") in written, f"{what} '{path}' is written by no earlier command of this code block"
    else:
        assert (ROOT / path).exists(), f"{what} '{path}' does not exist"


def _looks_like_path(name: Optional[str]) -> bool:
    return bool(name) and ("/" in name or name.endswith((".gguf", ".jsonl", ".json", ".csv", ".parquet")))


def _subcommands() -> set[str]:
    from grpokit.cli import build_parser

    return {name for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}


def _check_grpokit(command: Command, capsys) -> None:
    from grpokit.config import ConfigError

    if command.block < 0 and len(command.argv) == 2:  # prose naming a subcommand (`grpokit synth`), not a command line
        assert command.argv[1] in _subcommands(), f"grpokit has no subcommand '{command.argv[1]}'"
        return
    args = _parse(command.argv, capsys)
    if args.command not in ("train", "demo", "eval"):
        return  # list, synth, edit, rm: parsing is what can go stale without running them
    if command.expected_error is not None:
        with pytest.raises(ConfigError) as err:
            _config(args)
        assert str(err.value) == command.expected_error
        return
    cfg = _config(args)
    written = _written_before(command, capsys)
    for what, path in (("data.path", cfg.data.path), ("data.heldout_path", cfg.data.heldout_path),
                       ("model.name", cfg.model.name), ("model.teacher", cfg.model.teacher)):
        if _looks_like_path(path):
            _check_path(path, what, written)
    for reward in cfg.rewards:
        if ".py:" in reward.name:
            _check_path(reward.name.split(":")[0], f"reward file of '{reward.name}'", written)
    if getattr(args, "resume", False):
        _check_path(cfg.logging.output_dir, "--resume: the run folder (logging.output_dir)", written)
    if args.command == "eval" and _looks_like_path(args.model):
        _check_path(args.model, "--model", written)


# ---------------------------------------------------------------------------- scripts and make
class _Parsed(Exception):
    """Raised right after a script's arguments parsed: the script stops there."""


def _run_until_parsed(run, argv0: str, args: tuple[str, ...], source: str, monkeypatch, capsys) -> None:
    assert "parse_args(" in source, f"{argv0} parses no arguments: it cannot be checked without running it"
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, *a, **kw):
        original(self, *a, **kw)
        raise _Parsed

    environ = dict(os.environ)
    with monkeypatch.context() as patch:  # undone on leaving: later parsers (grpokit's) parse normally
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        patch.setattr(sys, "argv", [argv0, *args])
        try:
            run()
        except _Parsed:
            return
        except SystemExit as exc:
            err = capsys.readouterr().err.strip().splitlines()
            pytest.fail(f"{argv0} exits {exc.code} before its arguments parse: {err[-1] if err else ''}")
        finally:
            os.environ.clear()
            os.environ.update(environ)
    pytest.fail(f"{argv0} returned without parsing its arguments")


def _check_benchmark(command: Command, monkeypatch, capsys) -> None:
    script = ROOT / command.argv[1]
    assert script.is_file(), f"{command.argv[1]} does not exist"
    monkeypatch.syspath_prepend(str(script.parent))  # as `python script.py` puts its folder first
    _run_until_parsed(lambda: runpy.run_path(str(script), run_name="__main__"), command.argv[1], command.argv[2:],
                      script.read_text(), monkeypatch, capsys)


def _check_module(command: Command, monkeypatch, capsys) -> None:
    import importlib.util

    name = command.argv[2]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, f"module {name} does not exist"
    assert spec.submodule_search_locations is None, f"{name} is a package without __main__: `python -m {name}` cannot run"
    source = Path(spec.origin).read_text()
    assert 'if __name__ == "__main__":' in source, f"{name} has no __main__ block: `python -m {name}` does nothing"
    _run_until_parsed(lambda: runpy.run_module(name, run_name="__main__", alter_sys=True), name, command.argv[3:],
                      source, monkeypatch, capsys)


def _make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+):(?!=)", (ROOT / "Makefile").read_text(), flags=re.M))


def _check_make(command: Command) -> None:
    targets = [a for a in command.argv[1:] if not a.startswith("-") and "=" not in a]
    missing = [t for t in targets if t not in _make_targets()]
    assert not missing, f"make target(s) {missing} not in the Makefile (targets: {sorted(_make_targets())})"


# ---------------------------------------------------------------------------- the tests
def test_readme_is_a_front_door():
    lines = len(README.read_text().splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move the detail into a docs/ page (the README links it)"


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a markdown page, as GitHub makes them (lower case, punctuation dropped, spaces to -)."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"^\s*```.*?^\s*```", "", page.read_text(), flags=re.S | re.M), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_of_the_readme_and_docs_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"^(https?:|mailto:)", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme_or_another_page():
    pages = [p for p in PAGES if p != README]
    links = {(p.parent / t).resolve() for p in PAGES for t in re.findall(r"\]\(([^)#\s]+)", p.read_text())}
    orphans = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in links]
    assert not orphans, f"docs pages nothing links to: {orphans}"


def test_readme_has_commands_of_every_kind():
    kinds = {_program(list(c.argv)) for c in COMMANDS if c.page == "README.md"}
    assert kinds == {"grpokit", "make", "benchmark", "module"}
    assert any(c.expected_error for c in COMMANDS if c.page == "README.md")  # the quickstart's mistake example is recognised
    assert {c.page for c in COMMANDS} > {"README.md", "docs/environments.md", "docs/pipelines.md"}  # the docs pages are read


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_readme_command_is_runnable(command: Command, monkeypatch, capsys):
    kind = _program(list(command.argv))
    if kind == "grpokit":
        _check_grpokit(command, capsys)
    elif kind == "benchmark":
        _check_benchmark(command, monkeypatch, capsys)
    elif kind == "module":
        _check_module(command, monkeypatch, capsys)
    else:
        _check_make(command)


def test_the_checks_catch_stale_commands(monkeypatch, capsys):
    # each of these names a flag, preset, file, target or run that does not exist: the check must fail
    stale = [
        Command(("python", "benchmarks/vision.py", "--no-such-flag"), 1, 0),
        Command(("grpokit", "train", "--preset", "no_such_preset"), 1, 0),
        Command(("grpokit", "train", "--preset", "demo", "--resumed"), 1, 0),
        Command(("grpokit", "train", "examples/missing.yaml"), 1, 0),
        Command(("grpokit", "eval", "--preset", "demo", "--model", "runs/nowhere/checkpoints/step-40"), 1, 10_000),
        Command(("grpokit", "train", "--preset", "demo", "--resume"), 1, 10_000),
        Command(("grpokit", "train", "--preset", "demo", "--set", "algorithm.epsilon_lo=0.1"), 1, 0),
        Command(("python", "benchmarks/no_such_bench.py"), 1, 0),
        Command(("make", "no-such-target"), 1, 0),
        Command(("grpokit", "train", "--preset", "kdrl"), 1, -1, None, "docs/nowhere.md"),  # its teacher runs/demo: no command writes it
        Command(("grpokit", "train", "--preset", "demo", "--set", "model.name=runs/etcon/edited"), 1, -1, None, "docs/nowhere.md"),
    ]
    from grpokit.config import ConfigError

    for command in stale:
        with pytest.raises((AssertionError, pytest.fail.Exception, ConfigError)):
            test_readme_command_is_runnable(command, monkeypatch, capsys)


def test_templates_and_elided_commands_are_left_out():
    text = "`grpokit train --preset NAME`\n```bash\ngrpokit synth --out x ...\ngrpokit train --preset demo\n```\n"
    assert [c.argv for c in readme_commands(text, "x.md")] == [("grpokit", "train", "--preset", "demo")]


def test_checkpoints_a_run_keeps():
    from grpokit.config import load_config

    # steps 10, checkpoint_every 20: only the end (step 10); steps 100, every 20, keep 2: 80 and 100
    assert _kept_checkpoints(load_config(preset="demo", overrides=["train.steps=10"])) == {10}
    assert _kept_checkpoints(load_config(preset="demo", overrides=["train.steps=100"])) == {80, 100}
