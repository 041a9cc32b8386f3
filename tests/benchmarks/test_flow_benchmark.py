"""benchmarks/flow_image.py --dry-run: flow_grpo before/after and the Pref-GRPO miniature on a random tiny flow model."""

import re


def test_flow_benchmark_dry_run_prints_the_held_out_rewards_and_the_advantage_magnitudes(dry_run, tmp_path):
    stdout = dry_run("benchmarks/flow_image.py")
    last = stdout.strip().splitlines()[-1]
    number = r"-?\d+\.\d{3}"
    assert re.fullmatch(
        rf"probe_pointwise_tied=(?:{number}|nan) probe_winrate_tied=(?:{number}|nan) flow_before={number} flow_after={number} flow_minutes=\d+\.\d "
        rf"pointwise_after={number} winrate_after={number} pointwise_bright_after={number} winrate_bright_after={number} "
        rf"pointwise_adv_late={number} winrate_adv_late={number}", last), last
    assert "| pointwise, seed 0 |" in stdout and "| win_rate, seed 0 |" in stdout
    assert (tmp_path / "flow_grpo" / "checkpoints").is_dir()  # the run saved a loadable flow folder
