"""benchmarks/activevln.py --dry-run: imitation, then GRPO with and without early stopping, on the tiny model."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_activevln_dry_run_prints_the_three_success_rates_and_the_token_saving(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/activevln.py", "--dry-run", "--out", str(tmp_path)], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"success_gain_pp=-?\d+\.\d token_saving=-?\d+\.\d{3} success_on=\d\.\d{3} success_off=\d\.\d{3}", last), last
    assert (tmp_path / "sft" / "checkpoints").is_dir()  # stage 2 started from stage 1's run folder
    assert "| early stopping on |" in proc.stdout and "| early stopping off |" in proc.stdout
