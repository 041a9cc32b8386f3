"""benchmarks/mdm_sampling.py --dry-run: grpokit's masked-diffusion sampler against the plain LLaDA loop."""

import re


def test_mdm_sampling_dry_run_prints_both_sides_per_canvas(dry_run):
    stdout = dry_run("benchmarks/mdm_sampling.py")
    row = next(line for line in stdout.splitlines() if line.startswith("| 8 |"))
    ours, plain = (float(x) for x in row.split("|")[2:4])
    assert ours > 0 and plain > 0
    assert re.fullmatch(r"ratio_8=\d+\.\d\d", stdout.strip().splitlines()[-1])
