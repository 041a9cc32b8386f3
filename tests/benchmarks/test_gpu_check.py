"""benchmarks/gpu_check.sh --dry-run: the GPU check's whole code path on the CPU, tiny sizes."""

import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run_prints_both_sides_and_the_speedup_last():
    proc = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--dry-run"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    match = re.fullmatch(r"gpu_speedup=(nan|\d+\.\d{3})", lines[-1])
    assert match, lines[-1]
    rows = {ln.split("|")[1].strip(): ln for ln in lines if ln.startswith("| grpokit") or ln.startswith("| TRL")}
    assert "cpu/float32" in rows["grpokit"]  # model.device=cpu, model.dtype=float32 reached the policy
    assert "cpu/float32" in rows["grpokit fsdp"]  # the sharded learner's step ran under torchrun (gloo, one rank)
    assert re.search(r"learning \(3 steps, .*reward \d\.\d{3} .* -> \d\.\d{3}", proc.stdout)
    if importlib.util.find_spec("trl") is not None:  # the dev extra installs it: the TRL side must then run
        assert "cpu/float32" in rows["TRL"], rows["TRL"]
        assert math.isfinite(float(match.group(1))) and float(match.group(1)) > 0
    else:
        assert "skipped" in rows["TRL"] and match.group(1) == "nan"
