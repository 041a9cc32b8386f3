"""benchmarks/activevln.py --dry-run: imitation, then GRPO with and without early stopping, on the tiny model."""

import re


def test_activevln_dry_run_prints_the_three_success_rates_and_the_token_saving(dry_run, tmp_path):
    stdout = dry_run("benchmarks/activevln.py")
    last = stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"success_gain_pp=-?\d+\.\d training_minutes=\d+\.\d token_saving=-?\d+\.\d{3} success_on=\d\.\d{3} success_off=\d\.\d{3}", last), last
    assert (tmp_path / "sft" / "checkpoints").is_dir()  # stage 2 started from stage 1's run folder
    assert "| early stopping on |" in stdout and "| early stopping off |" in stdout
