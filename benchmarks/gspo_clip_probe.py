#!/usr/bin/env python
"""How far one update moves GSPO's sequence ratio at the efficacy study's settings, against its clip range.

    python benchmarks/gspo_clip_probe.py --steps 8 --seed 0            # the study's hard task, SmolLM2
    python benchmarks/gspo_clip_probe.py --steps 2 --dry-run           # tiny model, seconds

GSPO (Group Sequence Policy Optimization, arXiv 2507.18071, Sec. 4) clips the sequence ratio
s_i = exp(mean_t(log pi(y_t) - log pi_old(y_t))) to [1 - eps_low, 1 + eps_high] with
eps = 3e-4 / 4e-4 (Sec. 5.1), and reports that it clips about two orders of magnitude more tokens
than GRPO (~15% against ~0.13%). Whether its clip acts like that here depends on how far one optimizer
update moves log s at this learning rate. This probe runs the study's ``gspo`` row on the ``hard``
task (SmolLM2-135M-Instruct, 4 x 8 completions, lr 2e-5) with one update per batch. Before and after
each update it scores the batch under the policy (the learner's own forward, no sampling noise), and
prints the quantiles of |log s_i| over the rows that carry an advantage. It also prints the fraction of
those rows a second update would clip at the paper's range and at wider ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

RANGES = [(3e-4, 4e-4), (3e-3, 4e-3), (0.03, 0.04), (0.1, 0.133), (0.2, 0.27)]


def probe(seed: int, steps: int, dry_run: bool) -> list[tuple[float, float, bool]]:
    """(log s_i after one update, A_i, whether row i was in that update) for rows with a non-zero advantage.

    Each step's update trains on its first group with an advantage only (a quarter of the batch: one of the paper's four
    mini-batches); the other groups' rows show what the later mini-batches of the same generation
    would see, the trained rows what a second pass over the same data (``num_iterations`` 2) sees.
    """
    import torch

    from efficacy import DRY, METHODS, STUDY, TASKS, build_config
    from grpokit.config.loading import apply_set, from_dict, to_dict
    from grpokit.config.schema import Config
    from grpokit.testing import save_tiny_model
    from grpokit.trainer.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="gspo-probe-") as tmp:
        sizes = dataclasses.replace(DRY, model=save_tiny_model(Path(tmp) / "tiny")) if dry_run else STUDY
        data = to_dict(build_config(METHODS["gspo"], TASKS["hard"], seed, sizes, tmp, "cpu"))
        data = apply_set(data, "algorithm.num_iterations=1")  # the movement of one update, nothing clipped yet
        trainer = Trainer(from_dict(Config, data, ""))
        moved: list[tuple[float, float, bool]] = []
        learn = trainer._learn

        def measured(lb):
            with torch.no_grad():
                before = trainer.policy.score(lb.rollout, "current")
            gids, adv = lb.rollout.group_ids, lb.row_adv()[: len(lb.rollout.group_ids)]
            live = gids[adv != 0]
            if len(live) == 0:  # every group tied: no update to measure
                return learn(lb)
            trained = gids == live[0]  # the first group with an advantage
            out = learn(lb.select(trained.nonzero().squeeze(-1)))
            with torch.no_grad():
                after = trainer.policy.score(lb.rollout, "current")
            mask = lb.mask.to(after.dtype)
            log_s = ((after - before) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
            moved.extend((ls, a, t) for ls, a, t in zip(log_s.tolist(), adv.tolist(), trained.tolist()) if a != 0)
            return out

        trainer._learn = measured
        for _ in range(steps):
            trainer.train_step()
        return moved


def would_clip(log_s: float, adv: float, low: float, high: float) -> bool:
    """Whether a sequence with log-ratio ``log_s`` and advantage ``adv`` is clipped (no gradient) at [1 - low, 1 + high].

    PPO-style clipping stops the gradient only on the side the advantage pushes: past 1 + high for A > 0,
    below 1 - low for A < 0 (GSPO, arXiv 2507.18071, Eq. 5).
    """
    return (adv > 0 and log_s > math.log(1 + high)) or (adv < 0 and log_s < math.log(1 - low))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    moved = probe(a.seed, a.steps, a.dry_run)
    print(f"{a.steps} steps (seed {a.seed}); each update on one group of the batch")
    for name, rows in (("rows in the update (a second pass over them)", [m for m in moved if m[2]]),
                       ("rows of the other groups (later mini-batches)", [m for m in moved if not m[2]])):
        if not rows:
            print(f"{name}: none with an advantage")
            continue
        size = sorted(abs(ls) for ls, _, _ in rows)
        q = lambda f: size[min(len(size) - 1, int(f * len(size)))]  # noqa: E731
        along = sum((ls > 0) == (adv > 0) for ls, adv, _ in rows) / len(rows)
        print(f"{name}: {len(rows)} with an advantage, {along:.0%} moved along it; |log s| median "
              f"{statistics.median(size):.2e}, p10 {q(0.1):.2e}, p90 {q(0.9):.2e}, max {size[-1]:.2e}")
        for low, high in RANGES:
            clipped = sum(would_clip(ls, adv, low, high) for ls, adv, _ in rows)
            print(f"  eps {low:g} / {high:g}: the next update would clip {clipped / len(rows):.0%} of them")


if __name__ == "__main__":
    main()
