"""benchmarks/grpo_dip.py --dry-run: the study's GRPO row, coasting on zero gradients or not."""

import json


def test_grpo_dip_dry_run_runs_both_arms(dry_run, tmp_path):
    stdout = dry_run("benchmarks/grpo_dip.py")
    assert [line.split("|")[1].strip() for line in stdout.splitlines() if line.startswith("| c") or line.startswith("| s")] == [
        "coast", "skip", "coast", "skip"]
    runs = {arm: json.loads((tmp_path / f"grpo_dip_{arm}_seed{seed}.json").read_text()) for arm, seed in (("coast", 0), ("skip", 0))}
    assert [e["step"] for e in runs["skip"]["evals"]] == [0, 2, 4]
    zero = [s for s in runs["coast"]["steps"] if s["grad_norm"] == 0.0]  # a random tiny model solves nothing: no gradient
    assert zero and all(s["updates"] == 1.0 for s in zero)  # coast: AdamW stepped anyway
    assert all(runs["skip"]["steps"][s["step"] - 1]["updates"] == 0.0 for s in zero)  # skip: no update there
