"""On-policy in-process runs (k = 0, HF sampling) give exactly the metrics of d3cb0f9, the release before the seam.

tests/trainer/data/golden_metrics_d3cb0f9.json was written by make_golden.py at d3cb0f9 (same seed,
one thread): plain GRPO, mu = 2 with a k3 KL, DisCO's constraint at mu = 2, DAPO's dynamic sampling.
"""

import json
import runpy
from pathlib import Path

DATA = Path(__file__).parent / "data"
# Cases whose d3cb0f9 metrics are wrong on purpose now, with the fix that changed them and its test.
CHANGED = {
    "dapo": "dynamic sampling judges a group on the outcome reward (answer_match), no longer on the length-shaped "
            "total, and a step without an informative group takes no update (tests/trainer/test_fidelity_trainer.py)",
    "disco": "the constraint penalty is normalised by the whole batch's counts, not each micro-batch's, so its gradient "
             "no longer depends on the micro-batch size (tests/trainer/test_fidelity_accumulation.py); "
             "step 2 grad_norm 9.1337 -> 9.1293",
}


def test_metrics_equal_the_previous_release_exactly():
    import torch

    threads = torch.get_num_threads()
    try:
        got = runpy.run_path(str(DATA / "make_golden.py"))["run_cases"]()
    finally:
        torch.set_num_threads(threads)
    expected = json.loads((DATA / "golden_metrics_d3cb0f9.json").read_text())
    assert got.keys() == expected.keys()
    for case, steps in expected.items():
        if case in CHANGED:
            continue
        for step, (want, have) in enumerate(zip(steps, got[case])):
            for key, value in want.items():
                assert have[key] == value, (case, step, key, value, have[key])  # bitwise
