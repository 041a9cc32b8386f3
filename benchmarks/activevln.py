#!/usr/bin/env python
"""ActiveVLN in miniature, measured: imitation + multi-turn GRPO, with and without dynamic early stopping.

    python benchmarks/activevln.py                       # SmolLM2: SFT, then GRPO twice (early stopping on / off)
    python benchmarks/activevln.py --grpo-steps 40 --seed 0
    python benchmarks/activevln.py --dry-run             # tiny random model, seconds: the same code path

Zhang et al., "ActiveVLN: Towards Active Exploration via Multi-Turn RL in Vision-and-Language
Navigation", arXiv 2509.12618. Stage 1 is ``grpokit train --preset activevln_sft`` (imitation on
the expert episodes of 40 training worlds, action tokens only); stage 2 runs the ``activevln``
preset from that checkpoint twice with the same seed and the same number of steps: with the
paper's dynamic early stopping (an episode fails once its executed steps exceed
``min(floor(2 * N_gt), 120)``) and without it (only the 40-turn budget ends an episode). Held-out
success rate (greedy episodes on 100 unseen worlds) is measured before stage 1, after it and after
stage 2; rollout tokens are every token after the prompts that stage 2 sampled or appended
(``completion_len/mean`` + ``env/observation_tokens``, times the batch), summed over its steps.
The last stdout line is::

    success_gain_pp=<after GRPO - before SFT, early stopping on> token_saving=<1 - tokens(on) / tokens(off)>
    success_on=<final success, on> success_off=<final success, off>
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def run(args: list[str]) -> None:
    from grpokit.cli import main

    code = main(["train", *args])
    if code != 0:
        raise SystemExit(f"grpokit train {' '.join(args)} exited {code}")


def evals(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines() if line.strip()]


def rollout_tokens(run_dir: Path, batch: int) -> float:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return sum((r["completion_len/mean"] + r.get("env/observation_tokens", 0.0)) * batch for r in rows)


def train_minutes(run_dir: Path) -> float:
    """Training wall minutes of a run (its last step's ``time/elapsed_s``; evaluations excluded)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return rows[-1]["time/elapsed_s"] / 60 if rows else 0.0


def base_success(overrides: list[str]) -> float:
    """Held-out success of the model before imitation: greedy episodes of the ``activevln`` preset, no training."""
    from grpokit.config import load_config
    from grpokit.trainer.loop import Trainer

    return Trainer(load_config(preset="activevln", overrides=overrides)).evaluate("before")["accuracy"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sft-steps", type=int, default=30)
    p.add_argument("--grpo-steps", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="folder of the three runs (default: a temporary one)")
    p.add_argument("--sft-dir", default=None,
                   help="reuse this stage-1 run folder (same seed and settings) instead of training stage 1 again")
    p.add_argument("--dry-run", action="store_true", help="tiny random model and sizes")
    a = p.parse_args(argv)
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="activevln-"))
    sets = ["logging.progress=false", f"train.seed={a.seed}"]
    base_model = "smollm2-135m-instruct"
    if a.dry_run:
        from grpokit.testing import save_tiny_model

        base_model = save_tiny_model(out / "tiny")
        sets += ["data.n_train=8", "data.n_heldout=4", "rollout.prompts_per_step=2", "environment.max_turns=3"]
        a.sft_steps, a.grpo_steps = min(a.sft_steps, 2), min(a.grpo_steps, 2)
    cli = [x for kv in sets for x in ("--set", kv)]
    start = base_success([*sets, f"model.name={base_model}", f"logging.output_dir={out / 'base'}"])
    sft = Path(a.sft_dir) if a.sft_dir else out / "sft"
    if not a.sft_dir:
        run(["--preset", "activevln_sft", *cli, "--set", f"model.name={base_model}", "--set", f"logging.output_dir={sft}",
             "--set", f"train.steps={a.sft_steps}", "--set", "eval.before=false", "--set", "eval.after=false"])
    from grpokit.config import load_config

    cfg = load_config(preset="activevln", overrides=sets)
    batch = cfg.rollout.group_size * cfg.rollout.prompts_per_step
    results = {}
    minutes = {}
    for on in (True, False):
        run_dir = out / f"grpo_early_stopping_{'on' if on else 'off'}"
        options = {**cfg.environment.options, "early_stopping": on}
        run(["--preset", "activevln", *cli, "--set", f"model.name={sft}", "--set", f"logging.output_dir={run_dir}",
             "--set", f"train.steps={a.grpo_steps}", "--set", "train.max_minutes=0",
             "--set", "environment.options=" + json.dumps(options)])
        e = [r for r in evals(run_dir) if "accuracy" in r]
        results[on] = {"before": e[0]["accuracy"], "after": e[-1]["accuracy"], "tokens": rollout_tokens(run_dir, batch),
                       "minutes": train_minutes(run_dir)}
    print("| run | held-out success: base model | after imitation | after GRPO | stage-2 rollout tokens | stage-2 minutes |")
    print("|---|---|---|---|---|---|")
    for on in (True, False):
        r = results[on]
        print(f"| early stopping {'on' if on else 'off'} | {start:.1%} | {r['before']:.1%} | {r['after']:.1%} | {r['tokens']:.0f} | "
              f"{r['minutes']:.1f} |")
    print(f"stage-1 minutes: {train_minutes(sft):.1f}")
    saving = 1.0 - results[True]["tokens"] / max(results[False]["tokens"], 1.0)
    print(f"success_gain_pp={100 * (results[True]['after'] - start):.1f} token_saving={saving:.3f} "
          f"success_on={results[True]['after']:.3f} success_off={results[False]['after']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
