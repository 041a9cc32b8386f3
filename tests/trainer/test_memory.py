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


class _FakeLibc:
    """Records mallopt / malloc_trim calls instead of changing the test process's allocator."""

    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))
        return 1


def test_cpu_memory_reuse_keeps_freed_pages_and_release_trims(monkeypatch):
    libc = _FakeLibc()
    monkeypatch.setattr(memory, "_libc", lambda: libc)
    monkeypatch.delenv("GRPOKIT_MALLOC_TUNING", raising=False)
    try:
        assert memory.configure_cpu_memory("reuse") is True
        # trim threshold at its maximum (never trim on free), mmap threshold at glibc's 32 MiB cap
        assert libc.calls == [("mallopt", -1, 2**31 - 1), ("mallopt", -3, 32 * 1024 * 1024)]
        memory.release_free_memory()
        assert ("malloc_trim", 0) not in libc.calls  # reuse: nothing handed back between phases
        libc.calls.clear()
        assert memory.configure_cpu_memory("release") is False  # glibc's own thresholds
        memory.release_free_memory()
        assert libc.calls == [("malloc_trim", 0)]
        libc.calls.clear()
        monkeypatch.setenv("GRPOKIT_MALLOC_TUNING", "1")  # the opt-in 1 MiB tuning wins over reuse
        assert memory.configure_cpu_memory("reuse") is False and libc.calls == []
        memory.release_free_memory()
        assert libc.calls == [("malloc_trim", 0)]
        libc.calls.clear()
        monkeypatch.delenv("GRPOKIT_MALLOC_TUNING")
        with pytest.raises(ValueError, match="train.cpu_memory=reuse .*model.device=meta"):  # off the CPU it could not act
            memory.configure_cpu_memory("reuse", device="meta")
        assert libc.calls == [] and memory.configure_cpu_memory("release", device="meta") is False
        monkeypatch.setattr(memory, "_libc", lambda: None)
        with pytest.raises(ValueError, match="no glibc"):
            memory.configure_cpu_memory("reuse")
        with pytest.raises(ValueError, match="train.cpu_memory"):
            memory.configure_cpu_memory("keep")
    finally:
        memory.configure_cpu_memory("release")
