"""Every registered name must have a test that names it (a new variant without a test fails here)."""

from pathlib import Path

import pytest

from grpokit.registries import AXES, get_registry

TESTS = Path(__file__).parent
ALL_TEST_TEXT = "\n".join(p.read_text() for p in TESTS.rglob("test_*.py") if p.name != Path(__file__).name)


@pytest.mark.parametrize("axis,name", [(a, n) for a in AXES for n in get_registry(a).names()])
def test_registered_name_has_a_test(axis, name):
    assert f'"{name}"' in ALL_TEST_TEXT or f"'{name}'" in ALL_TEST_TEXT or f"{name}(" in ALL_TEST_TEXT, (
        f"{axis} '{name}' is registered but no test mentions it"
    )
