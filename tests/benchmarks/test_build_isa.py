"""benchmarks/build_isa.py --dry-run: one pinned build of tiny-flow natively (the emulated builds need qemu-x86_64)."""

import re


def test_build_isa_dry_run_builds_natively_and_prints_the_count(dry_run):
    stdout = dry_run("benchmarks/build_isa.py")
    assert re.search(r"^flow +native +[0-9a-f]{12} ", stdout, flags=re.M), stdout
    assert stdout.strip().splitlines()[-1] == "identical=0/0 steps=1"
