#!/usr/bin/env python
"""What a loss's zero-gradient declaration saves: one method's study steps with and without it.

    python benchmarks/skip_rows.py --method disco --steps 12          # the efficacy study's hard task, SmolLM2
    python benchmarks/skip_rows.py --method disco --steps 3 --dry-run # tiny model, seconds
    python benchmarks/skip_rows.py --method kdrl --steps 12 --teacher benchmarks/efficacy_results/teachers/study__hard__teacher__seed1000__10min__2dd55a6

A loss registered with ``zero_advantage_zero_gradient`` lets the learner leave rows without
gradient out of the forward and backward, and turn an update with none into an update of size 0
(PPO-clip, SAPO, CISPO, humanline: rows with advantage 0; DisCO: tied groups, in each update whose KL
constraint is slack; KDRL: tied rows its reward-guided distillation mask excludes, since issue 28).
A row that distils (KDRL) needs ``--teacher``: the study's cached teacher run folder (a dry run
saves a tiny random teacher). This runs the efficacy study's row METHOD on its ``--task``
(the row's preset; the task's data, sampling and lr 2e-5; 4 prompts x 8 completions) for
``--steps`` steps, twice from the same seed and prompt order in this one process: first with the
declaration withdrawn (every row of every update runs, as for a loss that declares nothing: the
reference), then as registered. It prints each arm's learner seconds per step (``time/learn_s``,
sampling excluded), rows left out and optimizer updates, and the ratio. Both arms compute the same
updates, so they sample the same completions until float rounding flips a sampled token; the first
step whose mean reward differs is printed (from there on their batches, and their work, differ).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def run_arm(method: str, task: str, seed: int, steps: int, declared: bool, dry_run: bool, tmp: str,
            teacher: str | None = None) -> list[dict]:
    """Per-step metrics of ``steps`` training steps of the study's row ``method``, its loss's zero-gradient declaration
    as registered (``declared``) or withdrawn."""
    from efficacy import DRY, METHODS, STUDY, TASKS, build_config
    from grpokit.config.loading import apply_set, from_dict, to_dict
    from grpokit.config.schema import Config
    from grpokit.testing import save_tiny_model
    from grpokit.trainer.loop import Trainer

    sizes = dataclasses.replace(DRY, model=save_tiny_model(Path(tmp) / "tiny")) if dry_run else STUDY
    if dry_run and METHODS[method].needs_teacher:
        teacher = save_tiny_model(Path(tmp) / "teacher", seed=1)  # a teacher that differs from the student
    data = to_dict(build_config(METHODS[method], TASKS[task], seed, sizes, str(Path(tmp) / f"run-{declared}"), "cpu", teacher))
    if dry_run:  # the study's 4 prompts a step (the dry run's 2 are fewer than DisCO's 4 mini-batches of whole groups)
        data = apply_set(data, f"rollout.prompts_per_step={STUDY.prompts}")
    trainer = Trainer(from_dict(Config, data, ""))
    if not declared:  # the reference: a loss that declares no zero gradient (every row, every update)
        spec = trainer.loss_spec
        trainer.loss_spec = dataclasses.replace(spec, props={**spec.props, "zero_advantage_zero_gradient": False})
    return timed_steps(trainer, steps)


def timed_steps(trainer, steps: int) -> list[dict]:
    """``steps`` training steps of ``trainer``: each step's metrics plus its wall seconds (``wall_s``); closes its logger."""
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        m = trainer.train_step()
        out.append({**m, "wall_s": time.perf_counter() - t0})
    trainer.logger.close()
    return out


def summary(steps: list[dict]) -> dict:
    mean = lambda key: statistics.fmean(s.get(key, 0.0) for s in steps)
    return {"learn_s": mean("time/learn_s"), "wall_s": mean("wall_s"), "skipped": mean("learn/skipped_rows"),
            "updates": mean("learn/updates"), "len": mean("completion_len/mean")}


def first_divergence(a: list[dict], b: list[dict]) -> int | None:
    """The first step (1-based) whose mean reward differs between the arms, or None."""
    for i, (x, y) in enumerate(zip(a, b), 1):
        if x.get("reward/mean") != y.get("reward/mean"):
            return i
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", default="disco", help="a row of benchmarks/efficacy.py METHODS")
    p.add_argument("--task", default="hard")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--teacher", help="a distilling row's teacher: a grpokit run folder (the study caches one per task)")
    p.add_argument("--dry-run", action="store_true", help="tiny random model, seconds")
    a = p.parse_args(argv)
    from efficacy import METHODS

    if METHODS[a.method].needs_teacher and not (a.teacher or a.dry_run):
        p.error(f"--method {a.method} distils from a teacher: pass --teacher RUN_FOLDER (the efficacy study's, under "
                "benchmarks/efficacy_results/teachers/, trained by its first run of the row)")
    with tempfile.TemporaryDirectory(prefix="skip-rows-") as tmp:
        off = run_arm(a.method, a.task, a.seed, a.steps, False, a.dry_run, tmp, a.teacher)
        on = run_arm(a.method, a.task, a.seed, a.steps, True, a.dry_run, tmp, a.teacher)
    so, sn = summary(off), summary(on)
    for name, s in (("undeclared (reference)", so), ("as registered", sn)):
        print(f"{name:22s} learner {s['learn_s']:.2f} s/step, step {s['wall_s']:.2f} s, rows left out {s['skipped']:.0%}, "
              f"updates/step {s['updates']:.2f}, completion length {s['len']:.1f}")
    div = first_divergence(off, on)
    print(f"samples identical through step {a.steps if div is None else div - 1} of {a.steps}")
    ratio = so["learn_s"] / sn["learn_s"] if sn["learn_s"] > 0 else float("nan")
    print(f"learner_speedup={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
