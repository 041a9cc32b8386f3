"""benchmarks/learner_memory.py: the --fit-budget search (checkpointing alone vs StreamBP layer) and its --dry-run."""

import importlib.util
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("learner_memory", ROOT / "benchmarks" / "learner_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_prints_both_modes_for_sft_dpo_and_grpo(dry_run):
    out = dry_run("benchmarks/learner_memory.py").strip().splitlines()
    rows = {line.split("|")[1].strip(): line for line in out if line.startswith("| ") and "objective" not in line}
    assert set(rows) == {"sft", "dpo", "grpo"}
    assert [w.split("=")[0] for w in out[-1].split()] == [f"layer_vs_checkpoint_{o}" for o in ("sft", "dpo", "grpo")]


def test_longest_fit_doubles_then_bisects_to_the_resolution(monkeypatch):
    module = _module()
    calls = []

    def probe(mode, length, rows, objective, a, budget=0.0):  # learner memory 0.3 MiB per token: 1000 MiB fit 3333 tokens
        calls.append(length)
        extra = 0.3 * length
        return None if extra > 1.5 * budget else {"extra_mib": extra, "seconds": 0.0}  # far over: the child stopped itself

    monkeypatch.setattr(module, "_probe", probe)
    a = types.SimpleNamespace(fit_budget=1000.0, start=256, max_len=65536, resolution=0.125)
    longest, probes = module.longest_fit("layer", "sft", a)
    # doubling 256 .. 2048 fit, 4096 is over (1229 MiB); bisection: 3072 fits, 3584 over, 3328 fits (bracket 256 <= 0.125 * 3328)
    assert calls == [256, 512, 1024, 2048, 4096, 3072, 3584, 3328]
    assert longest == 3328 and [p["fits"] for p in probes] == [True] * 4 + [False, True, False, True]
