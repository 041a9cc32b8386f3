#!/usr/bin/env python
"""Study steps under two settings of one speed knob, each arm in its own process: seconds, page faults, peak RSS.

    python benchmarks/step_arms.py --compare pack --steps 8        # train.pack_completions false -> true
    python benchmarks/step_arms.py --compare cpu_memory --steps 8  # train.cpu_memory release -> reuse
    python benchmarks/step_arms.py --compare pack --task hard --steps 8
    python benchmarks/step_arms.py --compare pack --steps 3 --dry-run   # tiny random model, seconds

Knobs (the reference arm first):

* ``pack``: ``train.pack_completions`` false -> true. True runs each group's completions as one
  padding-free row after the group's prompt (:mod:`grpokit.model.packed_completions`); false
  pads them to ``[B, T]``, the micro-batch's longest.
* ``cpu_memory``: ``train.cpu_memory`` release -> reuse. Release hands freed pages back to the
  OS twice a step (``malloc_trim``), so the next step faults them in again; reuse keeps them
  (:mod:`grpokit.trainer.memory`).

Each arm runs the efficacy study's METHOD row on ``--task`` (4 prompts x 8 completions of at most
32 tokens, micro-batches of 16) for ``--steps`` steps from the same seed, in its own child process
(in one process the second arm ran 5-15% slower whichever it was; a fresh process also gives each
arm its own peak RSS). Both arms compute the same updates, so they sample the same completions
until float rounding flips a token (the first step whose mean reward differs is printed). Prints
each arm's learner and whole-step seconds, minor page faults and system seconds a step, peak RSS,
and the speed-ups; CPU only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from skip_rows import first_divergence  # noqa: E402  (shared with the zero-gradient benchmark)

KNOBS = {  # knob -> (config field, reference value, candidate value)
    "pack": ("train.pack_completions", "false", "true"),
    "cpu_memory": ("train.cpu_memory", "release", "reuse"),
}


def run_arm(method: str, task: str, seed: int, steps: int, setting: str, dry_run: bool, tmp: str) -> list[dict]:
    """Per-step metrics (plus wall seconds, minor faults, system seconds) of ``steps`` study steps with ``setting``."""
    import time

    from efficacy import DRY, METHODS, STUDY, TASKS, build_config
    from grpokit.config.loading import apply_set, from_dict, to_dict
    from grpokit.config.schema import Config
    from grpokit.testing import save_tiny_model
    from grpokit.trainer.loop import Trainer

    sizes = dataclasses.replace(DRY, model=save_tiny_model(Path(tmp) / "tiny"), max_new_tokens=STUDY.max_new_tokens) if dry_run else STUDY
    data = to_dict(build_config(METHODS[method], TASKS[task], seed, sizes, str(Path(tmp) / "run"), "cpu"))
    trainer = Trainer(from_dict(Config, apply_set(data, setting), ""))
    out = []
    for _ in range(steps):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        m = trainer.train_step()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        out.append({**m, "wall_s": time.perf_counter() - t0, "minor_faults": r1.ru_minflt - r0.ru_minflt,
                    "sys_s": r1.ru_stime - r0.ru_stime, "peak_rss_gb": r1.ru_maxrss / 1e6})
    trainer.logger.close()
    return out


def summary(steps: list[dict]) -> dict:
    mean = lambda key: statistics.fmean(s.get(key, 0.0) for s in steps)  # noqa: E731
    return {"learn_s": mean("time/learn_s"), "wall_s": mean("wall_s"), "len": mean("completion_len/mean"),
            "faults": mean("minor_faults"), "sys_s": mean("sys_s"), "peak": max(s["peak_rss_gb"] for s in steps)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", choices=list(KNOBS), default="pack")
    p.add_argument("--method", default="grpo", help="a row of benchmarks/efficacy.py METHODS")
    p.add_argument("--task", default="demo")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="tiny random model, seconds")
    p.add_argument("--_arm", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._arm:  # a child: one arm, its per-step metrics as JSON on the last line
        with tempfile.TemporaryDirectory(prefix="step-arms-") as tmp:
            steps = run_arm(a.method, a.task, a.seed, a.steps, a._arm, a.dry_run, tmp)
        print(json.dumps([{k: v for k, v in s.items() if isinstance(v, (int, float))} for s in steps]))
        return 0
    field, before, after = KNOBS[a.compare]
    args = [sys.executable, __file__, "--method", a.method, "--task", a.task, "--steps", str(a.steps), "--seed", str(a.seed)]
    args += ["--dry-run"] if a.dry_run else []
    arm = lambda value: json.loads(subprocess.run(  # noqa: E731
        args + ["--_arm", f"{field}={value}"], check=True, stdout=subprocess.PIPE, text=True).stdout.splitlines()[-1])
    ref, new = arm(before), arm(after)
    sr, sn = summary(ref), summary(new)
    for name, s in ((f"{field}={before} (reference)", sr), (f"{field}={after}", sn)):
        print(f"{name:36s} learner {s['learn_s']:.2f} s/step, step {s['wall_s']:.2f} s, minor faults {s['faults']:.0f}/step, "
              f"system {s['sys_s']:.2f} s/step, peak RSS {s['peak']:.2f} GB, completion length {s['len']:.1f}")
    div = first_divergence(ref, new)
    print(f"samples identical through step {a.steps if div is None else div - 1} of {a.steps}")
    print(f"step_speedup={sr['wall_s'] / sn['wall_s']:.3f}")
    print(f"learner_speedup={sr['learn_s'] / sn['learn_s'] if sn['learn_s'] > 0 else float('nan'):.3f}")
    print(f"peak_rss_ratio={sn['peak'] / sr['peak']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
