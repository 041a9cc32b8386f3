#!/usr/bin/env python
"""ActiveVLN in miniature, measured: imitation + multi-turn GRPO, with and without dynamic early stopping.

    python benchmarks/activevln.py                       # SmolLM2: SFT, then GRPO twice (early stopping on / off)
    python benchmarks/activevln.py --budget-minutes 15   # stage 1 + stage 2 (on) in 15 min; the off arm takes as many steps
    python benchmarks/activevln.py --grpo-steps 10 --seed 0
    python benchmarks/activevln.py --dry-run             # tiny random model, seconds: the same code path

Zhang et al., "ActiveVLN: Towards Active Exploration via Multi-Turn RL in Vision-and-Language
Navigation", arXiv 2509.12618. Stage 1 is ``grpokit train --preset activevln_sft`` (imitation on
the expert episodes of 40 training worlds, action tokens only); stage 2 runs the ``activevln``
preset from that checkpoint twice with the same seed and the same number of steps: with the
paper's dynamic early stopping (an episode fails once its executed steps exceed
``min(floor(2 * N_gt), 120)``) and without it. Without it an episode that does not stop ends at
the preset's episode token cap (``environment.max_episode_tokens`` 1536 tokens after the prompt,
~54 a turn: near turn 28, when the next turn no longer fits), before the 40-turn budget
(``environment.max_turns``) is reached. Held-out
success rate (greedy episodes on 100 unseen worlds) is measured on the base model, after stage 1
and after each stage-2 arm, every time with early stopping off (one protocol for all four, so
neither arm is judged by the mechanism it trained with). Rollout tokens are every token after the
prompts that stage 2 sampled or appended (``completion_len/mean`` + ``env/observation_tokens``,
times the batch), summed over its steps. The last stdout line is::

    success_gain_pp=<after GRPO (on) - base> training_minutes=<stage 1 + stage 2 (on)>
    token_saving=<1 - tokens(on) / tokens(off)> success_on=<after GRPO, on> success_off=<after GRPO, off>
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


def heldout_eval(model: str, overrides: list[str], out: Path) -> dict:
    """Held-out evaluation of ``model``: greedy episodes on the ``activevln`` preset's held-out worlds.

    Returns ``accuracy`` (success rate) and the episodes' mean ``env/*`` info (``env/spl``,
    ``env/steps``, ``env/blocked``, ...).

    Every evaluation of the benchmark (base model, after imitation, after each GRPO arm) uses the
    same protocol: early stopping off, so an episode that does not stop ends at the preset's
    1536-token episode cap (near turn 28) or the 40-turn budget, whichever comes first, and
    neither arm is judged by the mechanism it trained with.
    """
    from grpokit.config import load_config
    from grpokit.trainer.loop import Trainer

    options = {**load_config(preset="activevln", overrides=overrides).environment.options, "early_stopping": False}
    cfg = load_config(preset="activevln", overrides=[*overrides, f"model.name={model}", f"logging.output_dir={out}",
                                                      "environment.options=" + json.dumps(options)])
    return Trainer(cfg).evaluate("heldout")


def stage2_stats(run_dir: Path, batch: int) -> dict:
    """Rollout tokens, minutes, mean turns and the pruned fraction of a GRPO run's episodes (metrics.jsonl)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    mean = lambda key: sum(r.get(key, 0.0) for r in rows) / max(len(rows), 1)  # noqa: E731
    return {"tokens": rollout_tokens(run_dir, batch), "minutes": train_minutes(run_dir), "turns": mean("env/turns"),
            "pruned": mean("env/pruned"), "reward": mean("reward/mean") if rows and "reward/mean" in rows[0] else float("nan"),
            "steps": len(rows)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sft-steps", type=int, default=30)
    p.add_argument("--grpo-steps", type=int, default=0,
                   help="stage-2 steps of both arms (0: the early-stopping arm trains for what is left of --budget-minutes "
                        "after stage 1, and the other arm takes as many steps)")
    p.add_argument("--budget-minutes", type=float, default=15.0, help="training minutes of stage 1 + stage 2 (with --grpo-steps 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--out", default=None, help="folder of the three runs (default: a temporary one)")
    p.add_argument("--sft-dir", default=None,
                   help="reuse this stage-1 run folder (same seed and settings) instead of training stage 1 again")
    p.add_argument("--arms", default="on,off", help="early-stopping arms of stage 2 to run (on,off)")
    p.add_argument("--dry-run", action="store_true", help="tiny random model and sizes")
    a = p.parse_args(argv)
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="activevln-"))
    sets = ["logging.progress=false", f"train.seed={a.seed}"]
    base_model = "smollm2-135m-instruct"
    if a.dry_run:
        from grpokit.testing import save_tiny_model

        base_model = save_tiny_model(out / "tiny")
        sets += ["data.n_train=8", "data.n_heldout=4", "rollout.prompts_per_step=2", "environment.max_turns=3"]
        a.sft_steps, a.grpo_steps = min(a.sft_steps, 2), 2
    cli = [x for kv in sets for x in ("--set", kv)]
    start = heldout_eval(base_model, sets, out / "eval_base")["accuracy"]
    sft = Path(a.sft_dir) if a.sft_dir else out / "sft"
    if not a.sft_dir:
        run(["--preset", "activevln_sft", *cli, "--set", f"model.name={base_model}", "--set", f"logging.output_dir={sft}",
             "--set", f"train.steps={a.sft_steps}", "--set", "eval.before=false", "--set", "eval.after=false"])
    imitation = heldout_eval(str(sft), sets, out / "eval_sft")["accuracy"]
    from grpokit.config import load_config

    cfg = load_config(preset="activevln", overrides=sets)
    batch = cfg.rollout.group_size * cfg.rollout.prompts_per_step
    results = {}
    sft_minutes = train_minutes(sft)
    steps, minutes = a.grpo_steps, 0.0
    if not steps:  # the first arm trains for the rest of the budget; the next arms take its step count
        # a started step always finishes (train.max_minutes), so a minute is kept for the one that crosses the budget
        steps, minutes = 10_000, max(a.budget_minutes - sft_minutes - 1.0, 0.5)
    for on in (arm == "on" for arm in a.arms.split(",")):
        run_dir = out / f"grpo_early_stopping_{'on' if on else 'off'}"
        options = {**cfg.environment.options, "early_stopping": on}
        run(["--preset", "activevln", *cli, "--set", f"model.name={sft}", "--set", f"logging.output_dir={run_dir}",
             "--set", f"train.steps={steps}", "--set", f"train.max_minutes={minutes}", "--set", "eval.before=false",
             "--set", "eval.after=false", "--set", "environment.options=" + json.dumps(options)])
        held = heldout_eval(str(run_dir), sets, out / f"eval_{run_dir.name}")
        results[on] = {**stage2_stats(run_dir, batch), "after": held["accuracy"], "spl": held.get("env/spl", float("nan")),
                       "eval_steps": held.get("env/steps", float("nan"))}
        steps, minutes = results[on]["steps"], 0.0
    print("Held-out success: greedy episodes on the held-out worlds, early stopping off in every evaluation.")
    print(f"base model {start:.1%}; after imitation ({sft_minutes:.1f} min) {imitation:.1%}")
    print("| stage 2 | after GRPO | held-out SPL | held-out moves | rollout tokens | mean turns | pruned episodes | train reward | minutes | steps |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for on, r in results.items():
        print(f"| early stopping {'on' if on else 'off'} | {r['after']:.1%} | {r['spl']:.3f} | {r['eval_steps']:.1f} | {r['tokens']:.0f} | {r['turns']:.2f} | "
              f"{r['pruned']:.1%} | {r['reward']:.2f} | {r['minutes']:.1f} | {r['steps']} |")
    on, off = results.get(True), results.get(False)
    line = f"success_gain_pp={100 * ((on or off)['after'] - start):.1f} training_minutes={sft_minutes + (on or off)['minutes']:.1f}"
    if on and off:
        line += (f" token_saving={1.0 - on['tokens'] / max(off['tokens'], 1.0):.3f} success_on={on['after']:.3f} "
                 f"success_off={off['after']:.3f}")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
