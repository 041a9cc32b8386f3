"""On-policy in-process runs (k = 0, HF sampling) give the metrics of d3cb0f9, the release before the seam, to float32 noise.

tests/trainer/data/golden_metrics_d3cb0f9.json was written by make_golden.py at d3cb0f9 (same seed,
one thread): plain GRPO, mu = 2 with a k3 KL, DisCO's constraint at mu = 2, DAPO's dynamic sampling.
Another x86 CPU sums in another order (AVX2 / AVX-512 / scalar kernels in ATen, oneDNN and the BLAS),
so the comparison is not bitwise but at the tolerances below.
"""

import json
import runpy
from pathlib import Path

DATA = Path(__file__).parent / "data"
# A value that is 0 in exact arithmetic (adv/mean of group-normalised advantages; plain GRPO's on-policy
# loss, -mean(adv)) comes out as the float32 residue of a sum of 8 terms of size <= 1: at most about
# 8 * eps32 (1.2e-7) ~ 1e-6. Measured: -5.96e-08 where the golden file was written, -7.45e-08 on an
# AVX-512 machine. Such values are compared absolutely: |got| < ABS.
ABS = 1e-6
# Every other value is compared relatively. Measured spread against the golden file: <= 3.2e-7 (native
# AVX-512 kernels) and <= 3.0e-6 (ATEN_CPU_CAPABILITY=default, ONEDNN_MAX_CPU_ISA=SSE41, MKL SSE4_2), the
# largest on the mu = 2 loss at step 2 (-0.0313, a mean of terms of size ~0.75 that cancel). 1e-5 leaves
# 3x headroom and still catches a real change: DisCO's normalisation fix moved grad_norm by 5e-4.
REL = 1e-5

# Cases whose d3cb0f9 metrics are wrong on purpose now, with the fix that changed them and its test.
CHANGED = {
    "dapo": "dynamic sampling judges a group on the outcome reward (answer_match), no longer on the length-shaped "
            "total, and a step without an informative group takes no update (tests/trainer/test_fidelity_trainer.py)",
    "disco": "the constraint penalty is normalised by the whole batch's counts, not each micro-batch's, so its gradient "
             "no longer depends on the micro-batch size (tests/trainer/test_fidelity_accumulation.py); "
             "step 2 grad_norm 9.1337 -> 9.1293",
}


def close(want: float, have: float) -> bool:
    """``have`` equals ``want`` up to float32 noise: absolutely for a value near 0, relatively elsewhere."""
    if abs(want) < ABS:
        return abs(have) < ABS
    return abs(have - want) <= REL * abs(want)


def test_close_is_tight():
    assert close(-5.96e-08, -7.45e-08) and close(0.0, 9e-07) and not close(0.0, 2e-06)  # residues of zero
    assert close(-0.0313143, -0.0313143 * (1 + 3e-6)) and not close(-0.0313143, -0.0313143 * (1 + 2e-5))
    assert not close(9.1337, 9.1293)  # DisCO's fix: 4.8e-4 relative


def test_metrics_equal_the_previous_release():
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
                assert close(value, have[key]), (case, step, key, value, have[key])
