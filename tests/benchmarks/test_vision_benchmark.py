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
