"""glibc malloc tuning: thresholds fixed where glibc is present, opt-out by environment."""

import platform

import pytest

from grpokit.trainer import memory


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_tune_malloc_is_opt_in_on_glibc(monkeypatch):
    monkeypatch.delenv("GRPOKIT_MALLOC_TUNING", raising=False)
    assert memory.tune_malloc() is False
    monkeypatch.setenv("GRPOKIT_MALLOC_TUNING", "1")
    assert memory.tune_malloc() is True
    memory.release_free_memory()  # must not raise


def test_without_libc_everything_is_a_no_op(monkeypatch):
    monkeypatch.setenv("GRPOKIT_MALLOC_TUNING", "1")
    monkeypatch.setattr(memory, "_libc", lambda: None)
    assert memory.tune_malloc() is False
    memory.release_free_memory()
