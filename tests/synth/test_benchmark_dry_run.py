"""benchmarks/synth_longcontext.py --dry-run: synth -> SFT -> held-out accuracy, on the tiny random model."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_synth_benchmark_dry_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("synth_longcontext", ROOT / "benchmarks" / "synth_longcontext.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--dry-run", "--out", str(tmp_path)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    fields = dict(kv.split("=", 1) for kv in last.split())
    assert fields["n_train"] == "6" and fields["n_heldout"] == "3" and fields["steps"] == "1"
    assert 0.0 <= float(fields["heldout_accuracy_before"]) <= 1.0 and 0.0 <= float(fields["heldout_accuracy_after"]) <= 1.0
