"""The generated markdown tables (grpokit.docs_tables) equal the registries, and the check can fail."""

from __future__ import annotations

import re

import pytest

from grpokit import docs_tables
from grpokit.docs_tables import FILES, ROOT, blocks, render_file, stale


def test_committed_tables_equal_the_registries():
    assert stale() == [], "run: python -m grpokit.docs_tables --write"
    assert docs_tables.main(["--check"]) == 0


def test_reference_holds_every_table():
    names = [name for name, _ in blocks((ROOT / "docs/reference.md").read_text())]
    assert sorted(names) == sorted(set(docs_tables.TABLES) - {"methods"})
    assert [name for name, _ in blocks((ROOT / "README.md").read_text())] == ["methods"]


def test_a_stale_or_unknown_block_is_caught(tmp_path):
    fresh = docs_tables.presets_table()
    page = tmp_path / "page.md"
    page.write_text(f"x\n<!-- generated: presets -->\n{fresh}<!-- end generated -->\ny\n")
    assert render_file(page) == page.read_text()
    page.write_text(page.read_text().replace("| `demo` |", "| `demo_renamed` |"))  # a preset renamed by hand
    assert render_file(page) != page.read_text()
    page.write_text("<!-- generated: no_such_table -->\n<!-- end generated -->\n")
    with pytest.raises(ValueError, match="no_such_table"):
        render_file(page)


def _first_column(table: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", table, flags=re.M)]


def test_every_preset_and_family_is_listed_once():
    from grpokit.config import preset_names
    from grpokit.families import FAMILIES

    assert _first_column(docs_tables.presets_table()) == preset_names()
    assert _first_column(docs_tables.families_table()) == FAMILIES.names()
    assert "flow_matching" in FAMILIES.names()  # the family the old hand-written list forgot
    methods = docs_tables.methods_table()
    cells = [line.split(" | ")[3] for line in methods.splitlines()[2:]]  # the presets column
    listed = [n for cell in cells for n in re.findall(r"`([^`]+)`", cell)]
    assert sorted(listed) == preset_names()  # each preset in exactly one row of the README's table


def test_preset_families_follow_run_folders():
    info = docs_tables.preset_info()
    # tool_use trains from runs/tool_use_sft, which the tool_use_sft preset writes (SmolLM2: causal_lm)
    assert info["tool_use"]["model"] == "runs/tool_use_sft" and info["tool_use"]["family"] == "causal_lm"
    assert info["papo"]["family"] == "vision_lm" and info["flow_grpo"]["family"] == "flow_matching"
    assert info["co_grpo"]["family"] == "palette" and info["espo"]["family"] == "masked_diffusion"
    assert (info["sft"]["kind"], info["guess_number"]["kind"], info["dapo"]["kind"]) == ("offline", "environment", "grpo")


def test_every_family_has_a_docs_page_and_links_resolve():
    from grpokit.families import FAMILIES

    for family in FAMILIES:
        assert docs_tables.family_page(family.name), f"docs/families/{family.name}.md is missing"
    for f in FILES:
        text = (ROOT / f).read_text()
        for name, body in blocks(text):
            for target in re.findall(r"\]\(([^)#]+)", body):
                assert ((ROOT / f).parent / target).exists(), f"{f}: table '{name}' links to missing {target}"


def test_config_defaults_are_written_as_yaml():
    table = docs_tables.config_table()
    assert "| `model.name` | `smollm2-135m-instruct` |" in table
    assert "| `data.path` | `null` |" in table  # None as YAML writes it


def test_grpokit_list_markdown_prints_the_tables(capsys):
    from grpokit.cli import main

    assert main(["list", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "## families" in out and "| `flow_matching` |" in out and "| `ppo_clip` |" in out
