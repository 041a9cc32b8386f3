#!/usr/bin/env python
"""GRPO's mid-run dip on the efficacy study's demo settings: held-out greedy accuracy by step, coasting or not.

    python benchmarks/grpo_dip.py --seeds 0,1 --steps 30 --eval-every 10            # coast and skip
    python benchmarks/grpo_dip.py --seeds 0 --arms skip --steps 30 --dry-run         # tiny model, seconds

Each run is the study's ``grpo`` row (``benchmarks/efficacy.py``: SmolLM2-135M-Instruct, 4 x 8
completions, 32 new tokens, lr 2e-5, PPO-clip, token-mean, beta 0) driven step by step, with arms
(``ARMS``): ``coast`` applies AdamW's update on a batch whose gradient is exactly 0 (every group
solved or failed; the weights move on the momentum alone, as TRL and verl do), ``skip`` does not
(grpokit's default), ``mask`` is ``skip`` with DAPO's overlong filtering (a completion cut at the
token cap gives no gradient; TRL's ``mask_truncated_completions``). At every evaluation the greedy
held-out completions are judged (``answer_match``) and described: how many hit the token cap
without EOS, the accuracy among those, and the first wrong ones, so a dip can be told apart from
truncation or a format change. Prints one Markdown table; ``--out`` keeps each run's JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# arm -> the config overrides it adds to the study's ``grpo`` row
ARMS = {
    "coast": ("optim.step_without_gradient=true",),
    "skip": ("optim.step_without_gradient=false",),
    # DAPO's overlong filtering (TRL's mask_truncated_completions): a completion cut at the token cap
    # keeps its place in its group's statistics but gives no gradient, so no free tail is reinforced
    "mask": ("optim.step_without_gradient=false", "algorithm.mask_truncated=true"),
}


def run(seed: int, arm: str, steps: int, every: int, dry_run: bool) -> dict:
    """One run: the study's GRPO config with ``arm`` 's overrides (``ARMS``); evaluations and steps."""
    from efficacy import DRY, METHODS, STUDY, TASKS, build_config
    from grpokit.config.loading import apply_set, from_dict, to_dict
    from grpokit.config.schema import Config
    from grpokit.rewards.builtin import answer_match
    from grpokit.rollout.types import SamplingParams
    from grpokit.testing import save_tiny_model
    from grpokit.trainer.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="grpo-dip-") as tmp:
        sizes = dataclasses.replace(DRY, model=save_tiny_model(Path(tmp) / "tiny")) if dry_run else STUDY
        data = to_dict(build_config(METHODS["grpo"], TASKS["demo"], seed, sizes, tmp, "cpu"))
        for override in ARMS[arm]:
            data = apply_set(data, override)
        trainer = Trainer(from_dict(Config, data, ""))
        rows = trainer.splits.heldout
        texts = trainer._prompt_texts(rows)
        record: dict = {"seed": seed, "arm": arm, "evals": [], "steps": []}
        for step in range(steps + 1):
            if step % every == 0 or step == steps:
                completions, truncated = [], []
                for i in range(0, len(rows), sizes.eval_batch):
                    batch = trainer.backend.generate(texts[i:i + sizes.eval_batch], rows[i:i + sizes.eval_batch], 1,
                                                     SamplingParams(sizes.max_new_tokens, greedy=True))
                    completions += batch.completions
                    truncated += batch.truncated.tolist()
                right = answer_match([""] * len(rows), completions, answer=[r["answer"] for r in rows])
                cut = [r for r, t in zip(right, truncated) if t]
                record["evals"].append({
                    "step": step, "n": len(rows), "accuracy": sum(right) / len(rows), "truncated": sum(truncated),
                    "accuracy_truncated": sum(cut) / len(cut) if cut else None,
                    "wrong": [c for c, r in zip(completions, right) if r < 1][:5],
                })
            if step == steps:
                break
            m = trainer.train_step()
            record["steps"].append({"step": trainer.step, "reward": m.get("reward/mean"), "completion_len": m.get("completion_len/mean"),
                                    "updates": m.get("learn/updates"), "grad_norm": m.get("grad_norm")})
        return record


def table(records: list[dict]) -> str:
    steps = sorted({e["step"] for r in records for e in r["evals"]})
    lines = ["| arm | seed | " + " | ".join(f"step {s}" for s in steps) + " | steps with a zero gradient | truncated at the last evaluation |",
             "|---|---|" + "---|" * len(steps) + "---|---|"]
    for r in records:
        acc = {e["step"]: f"{100 * e['accuracy']:.1f}%" for e in r["evals"]}
        idle = sum(1 for s in r["steps"] if not s["updates"] or s["grad_norm"] == 0.0)
        lines.append(f"| {r['arm']} | {r['seed']} | " + " | ".join(acc.get(s, "") for s in steps)
                     + f" | {idle} of {len(r['steps'])} | {r['evals'][-1]['truncated']} of {r['evals'][-1]['n']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--arms", default="coast,skip", help="comma list of " + ",".join(ARMS))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--out", default="", help="folder for each run's JSON")
    p.add_argument("--dry-run", action="store_true", help="tiny random model and the study's dry-run sizes")
    a = p.parse_args(argv)
    if a.dry_run:
        a.steps, a.eval_every = min(a.steps, 4), 2
    records = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        for arm in a.arms.split(","):
            record = run(seed, arm, a.steps, a.eval_every, a.dry_run)
            records.append(record)
            if a.out:
                Path(a.out).mkdir(parents=True, exist_ok=True)
                (Path(a.out) / f"grpo_dip_{arm}_seed{seed}.json").write_text(json.dumps(record, indent=1))
            print(f"seed {seed} {arm}: " + ", ".join(f"{e['step']}: {e['accuracy']:.3f}" for e in record["evals"]), file=sys.stderr)
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
