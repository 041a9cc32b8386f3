#!/usr/bin/env python
"""What packing a group's completions into one row saves the learner: study steps with and without it.

    python benchmarks/packed_rows.py --steps 8              # the efficacy study's demo task, SmolLM2
    python benchmarks/packed_rows.py --task hard --steps 8
    python benchmarks/packed_rows.py --steps 3 --dry-run    # tiny random model, seconds

``train.pack_completions`` runs each group's completions as one padding-free row after the
group's prompt (:mod:`grpokit.model.packed_completions`); off, they are ``[B, T]`` rows padded
to the micro-batch's longest. This runs the efficacy study's METHOD row on ``--task`` (4 prompts
x 8 completions of at most 32 tokens, micro-batches of 16) for ``--steps`` steps, twice from the
same seed, each arm in its own child process (in one process the second arm ran 5-15% slower
whichever it was): padded rows first (the reference), then packed. Both compute the same
updates, so they sample the same completions until float rounding flips a token (the first step
whose mean reward differs is printed). Prints each arm's learner and whole-step seconds and the
learner's speed-up; no GPU path is timed here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from skip_rows import first_divergence, timed_steps  # noqa: E402  (shared with the zero-gradient benchmark)


def run_arm(method: str, task: str, seed: int, steps: int, pack: bool, dry_run: bool, tmp: str) -> list[dict]:
    """Per-step metrics of ``steps`` study steps of row ``method`` with ``train.pack_completions=pack``."""
    from efficacy import DRY, METHODS, STUDY, TASKS, build_config
    from grpokit.config.loading import apply_set, from_dict, to_dict
    from grpokit.config.schema import Config
    from grpokit.testing import save_tiny_model
    from grpokit.trainer.loop import Trainer

    sizes = dataclasses.replace(DRY, model=save_tiny_model(Path(tmp) / "tiny"), max_new_tokens=STUDY.max_new_tokens) if dry_run else STUDY
    data = to_dict(build_config(METHODS[method], TASKS[task], seed, sizes, str(Path(tmp) / f"run-{pack}"), "cpu"))
    data = apply_set(data, f"train.pack_completions={str(pack).lower()}")
    trainer = Trainer(from_dict(Config, data, ""))
    return timed_steps(trainer, steps)


def summary(steps: list[dict]) -> dict:
    mean = lambda key: statistics.fmean(s.get(key, 0.0) for s in steps)  # noqa: E731
    return {"learn_s": mean("time/learn_s"), "wall_s": mean("wall_s"), "len": mean("completion_len/mean")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", default="grpo", help="a row of benchmarks/efficacy.py METHODS")
    p.add_argument("--task", default="demo")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="tiny random model, seconds")
    p.add_argument("--_arm", choices=["padded", "packed"], help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._arm:  # a child: one arm, its per-step metrics as JSON on the last line
        with tempfile.TemporaryDirectory(prefix="packed-rows-") as tmp:
            steps = run_arm(a.method, a.task, a.seed, a.steps, a._arm == "packed", a.dry_run, tmp)
        print(json.dumps([{k: v for k, v in s.items() if isinstance(v, (int, float))} for s in steps]))
        return 0
    args = [sys.executable, __file__, "--method", a.method, "--task", a.task, "--steps", str(a.steps), "--seed", str(a.seed)]
    args += ["--dry-run"] if a.dry_run else []
    arm = lambda name: json.loads(subprocess.run(args + ["--_arm", name], check=True, stdout=subprocess.PIPE, text=True).stdout.splitlines()[-1])  # noqa: E731
    padded, packed = arm("padded"), arm("packed")
    sp, sk = summary(padded), summary(packed)
    for name, s in (("padded rows (reference)", sp), ("packed rows", sk)):
        print(f"{name:24s} learner {s['learn_s']:.2f} s/step, step {s['wall_s']:.2f} s, completion length {s['len']:.1f}")
    div = first_divergence(padded, packed)
    print(f"samples identical through step {a.steps if div is None else div - 1} of {a.steps}")
    print(f"step_speedup={sp['wall_s'] / sk['wall_s']:.3f}")
    print(f"learner_speedup={sp['learn_s'] / sk['learn_s'] if sk['learn_s'] > 0 else float('nan'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
