"""benchmarks/vision.py --dry-run: GRPO, PAPO vs GRPO and the video runs on a random tiny Qwen2-VL."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_vision_dry_run_runs_every_study_and_writes_the_efficacy_section(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/vision.py", "--dry-run", "--out", str(tmp_path)], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"(\w+=\d\.\d{3} ?){6}", last), last
    report = (tmp_path / "efficacy.md").read_text()
    assert "<!-- kept:start -->" in report and "| papo |" in report and "| grpo |" in report
    assert "| deepvideo_r1, video task |" in proc.stdout
