"""Shared by the benchmarks' dry-run tests: run a benchmark script with ``--dry-run`` in a child process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dry_run(tmp_path):
    """``dry_run("benchmarks/x.py", timeout)`` -> stdout of a successful ``--dry-run --out tmp_path`` run."""

    def run(script: str, timeout: int = 300) -> str:
        proc = subprocess.run(
            [sys.executable, script, "--dry-run", "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    return run
