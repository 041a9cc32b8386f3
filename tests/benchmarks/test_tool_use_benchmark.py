"""benchmarks/tool_use.py --dry-run: imitation of expert calculator episodes, then GRPO, on the tiny model."""

import re


def test_tool_use_dry_run_prints_accuracy_and_well_formed_calls_per_stage(dry_run, tmp_path):
    last = dry_run("benchmarks/tool_use.py").strip().splitlines()[-1]
    assert re.fullmatch(r"accuracy=(\d\.\d{3},){2}\d\.\d{3} well_formed=(\d\.\d{3},){2}\d\.\d{3}", last), last
    assert (tmp_path / "sft" / "checkpoints").is_dir()
