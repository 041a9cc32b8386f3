"""benchmarks/vision.py --dry-run: GRPO, PAPO vs GRPO and the video runs on a random tiny Qwen2-VL."""

import re


def test_vision_dry_run_runs_every_study_and_writes_the_efficacy_section(dry_run, tmp_path):
    stdout = dry_run("benchmarks/vision.py", timeout=600)
    last = stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"(\w+=\d\.\d{3} ?){6}", last), last
    report = (tmp_path / "efficacy.md").read_text()
    assert "<!-- kept:start:vision -->" in report and "<!-- kept:end:vision -->" in report and "| papo |" in report and "| grpo |" in report
    assert "| deepvideo_r1, video task |" in stdout
    assert re.search(r"curriculum of deepvideo_r1: \d+ rows hinted, \d+ noised, \d+ hard rows without a hint", stdout), stdout


def test_vision_dry_run_with_a_misleading_caption_writes_its_own_section(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "benchmarks/vision.py", "--dry-run", "--only", "papo", "--caption", "0.8,0",
                           "--out", str(tmp_path)], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (tmp_path / "efficacy.md").read_text()
    assert "<!-- kept:start:vision_caption -->" in report and "<!-- kept:start:vision -->" not in report
    assert "true on 80% of the training rows and 0% of the held-out rows" in report
    options = yaml.safe_load((tmp_path / "papo_caption_s0" / "config.yaml").read_text())["data"]["task_options"]
    assert (options["caption_train"], options["caption_heldout"]) == (0.8, 0.0)
