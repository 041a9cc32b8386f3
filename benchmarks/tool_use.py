#!/usr/bin/env python
"""Tool use, measured: imitation of a few expert calculator episodes, then multi-turn GRPO, on SmolLM2.

    python benchmarks/tool_use.py                      # base -> tool_use_sft -> tool_use
    python benchmarks/tool_use.py --dry-run            # tiny random model, seconds: the same code path

Held-out accuracy (``answer_match`` on the final turn, greedy episodes, 100 word problems with
3-digit operands) and the share of well-formed calls (``env/well_formed``: 1 - malformed / calls
per episode, 0 without a call) are measured on the base model, after stage 1 (SFT on 40 expert
episodes, assistant tokens only) and after stage 2 (GRPO with the calculator in the loop). The
last stdout line is ``accuracy=<base>,<sft>,<grpo> well_formed=<base>,<sft>,<grpo>``.
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

    if main(["train", *args]) != 0:
        raise SystemExit(f"grpokit train {' '.join(args)} failed")


def heldout(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "eval.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("split") == "heldout" and "accuracy" in r]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sft-steps", type=int, default=15)
    p.add_argument("--grpo-steps", type=int, default=10)
    p.add_argument("--out", default=None)
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="tool-use-"))
    sets = ["logging.progress=false", "logging.log_samples_every=0"]
    model = "smollm2-135m-instruct"
    if a.dry_run:
        from grpokit.testing import save_tiny_model

        model = save_tiny_model(out / "tiny")
        sets += ["data.n_train=8", "data.n_heldout=4", "rollout.prompts_per_step=2", "rollout.group_size=2",
                 "rollout.max_new_tokens=8", "eval.max_new_tokens=8", "environment.max_episode_tokens=64"]
        a.sft_steps, a.grpo_steps = 1, 1
    cli = [x for kv in sets for x in ("--set", kv)]
    sft, grpo = out / "sft", out / "grpo"
    run(["--preset", "tool_use_sft", *cli, "--set", f"model.name={model}", "--set", f"logging.output_dir={sft}",
         "--set", f"train.steps={a.sft_steps}", "--set", f"logging.checkpoint_every={a.sft_steps}"])
    from grpokit.config import load_config
    from grpokit.trainer.loop import Trainer

    base = Trainer(load_config(preset="tool_use", overrides=[*sets, f"model.name={model}",
                                                          f"logging.output_dir={out / 'base'}"])).evaluate("before")
    run(["--preset", "tool_use", *cli, "--set", f"model.name={sft}", "--set", f"logging.output_dir={grpo}",
         "--set", f"train.steps={a.grpo_steps}", "--set", "train.max_minutes=0"])
    stages = heldout(grpo)
    points = [base, stages[0], stages[-1]]
    print("| held-out (100 problems, greedy) | base SmolLM2 | after imitation | after GRPO |")
    print("|---|---|---|---|")
    print("| accuracy | " + " | ".join(f"{p['accuracy']:.1%}" for p in points) + " |")
    print("| well-formed calls | " + " | ".join(f"{p.get('env/well_formed', 0.0):.1%}" for p in points) + " |")
    print("| calls per episode | " + " | ".join(f"{p.get('env/tool_calls', 0.0):.2f}" for p in points) + " |")
    print("accuracy=" + ",".join(f"{p['accuracy']:.3f}" for p in points)
          + " well_formed=" + ",".join(f"{p.get('env/well_formed', 0.0):.3f}" for p in points))
    return 0


if __name__ == "__main__":
    sys.exit(main())
