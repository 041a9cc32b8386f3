"""benchmarks/tool_use.py --dry-run: imitation of expert calculator episodes, then GRPO, on the tiny model."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tool_use_dry_run_prints_accuracy_and_well_formed_calls_per_stage(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/tool_use.py", "--dry-run", "--out", str(tmp_path)], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"accuracy=(\d\.\d{3},){2}\d\.\d{3} well_formed=(\d\.\d{3},){2}\d\.\d{3}", last), last
    assert (tmp_path / "sft" / "checkpoints").is_dir()
