"""benchmarks/mdm.py --dry-run: ESPO and the d1 stand-in on a random tiny masked-diffusion LM, the same code path."""

import json
import re


def test_mdm_dry_run_prints_before_after_and_steps_per_method(dry_run, tmp_path):
    last = dry_run("benchmarks/mdm.py").strip().splitlines()[-1]
    assert re.fullmatch(r"task=mdm_sort espo=\d\.\d{3},\d\.\d{3},1 stand_in=\d\.\d{3},\d\.\d{3},1", last), last
    saved = json.loads((tmp_path / "mdm_results.json").read_text())
    assert saved["espo"]["steps"] == 1 and (tmp_path / "espo" / "checkpoints").is_dir()
