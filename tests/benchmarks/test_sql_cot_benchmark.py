"""benchmarks/sql_cot.py --dry-run: stage 2 again from one SFT model, with its own overrides."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    proc = subprocess.run([sys.executable, "benchmarks/sql_cot.py", "--dry-run", *args], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_grpo_after_sft_takes_its_overrides_and_reuses_an_sft_run(tmp_path):
    overrides = ["--grpo-set", "optim.lr=2e-6", "--grpo-set", "algorithm.beta=0.05",
                 "--grpo-set", "rewards=[{name: sql_execution, weight: 1.0}]"]
    out = run("--arms", "sft,sft_grpo", "--out", str(tmp_path / "a"), *overrides)
    assert "(b) CoT SFT + GRPO" in out and "(a) GRPO" not in out and "steps_sft_grpo=" in out, out
    cfg = yaml.safe_load((tmp_path / "a" / "sft_grpo" / "config.yaml").read_text())
    # the GRPO stage starts from the SFT model (its KL reference with beta > 0), execution reward alone, lower lr
    assert cfg["model"]["name"] == str(tmp_path / "a" / "sft")
    assert cfg["optim"]["lr"] == 2e-6 and cfg["algorithm"]["beta"] == 0.05
    assert [r["name"] for r in cfg["rewards"]] == ["sql_execution"]
    # a second variant from the same SFT model: no SFT stage is trained again
    out = run("--arms", "sft_grpo", "--sft-dir", str(tmp_path / "a" / "sft"), "--out", str(tmp_path / "b"), *overrides)
    assert f"(reused {tmp_path / 'a' / 'sft'})" in out and not (tmp_path / "b" / "sft").exists(), out


def test_options_that_would_change_nothing_are_refused():
    for args, field in ((["--arms", "sft", "--grpo-set", "optim.lr=1e-6"], "--grpo-set"),
                        (["--arms", "grpo", "--sft-dir", "somewhere"], "--sft-dir")):
        proc = subprocess.run([sys.executable, "benchmarks/sql_cot.py", *args], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        assert proc.returncode == 2 and field in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "benchmarks/vision.py", "--only", "grpo", "--caption", "0.8,0"], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2 and "--caption" in proc.stderr, proc.stderr
