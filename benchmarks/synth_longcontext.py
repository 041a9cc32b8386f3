#!/usr/bin/env python
"""Synthetic long-context data, measured: `grpokit synth` makes train / held-out sets, SFT on SmolLM2 learns them.

    python benchmarks/synth_longcontext.py                   # multi_hop, 1024-token contexts, SFT, SmolLM2
    python benchmarks/synth_longcontext.py --dry-run         # tiny random model, seconds: the same code path

Both sets come from ``grpokit synth`` with different seeds (disjoint invented worlds); training
reads ``train/sft.jsonl`` (``stage: sft``), the held-out metric is greedy accuracy on
``heldout/sft.jsonl`` scored by the rows' own verifiers (reward ``synth_verify``: the final
``Answer:`` equals the gold entity for multi_hop), before and after training. The last stdout
line is ``heldout_accuracy_before=<b> heldout_accuracy_after=<a> ... train_minutes=<m>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CONFIG = """\
stage: sft
model: {{name: {model}}}
data: {{task: null, path: {train}, heldout_path: {heldout}, seed: 0}}
rewards: [{{name: synth_verify}}]
offline: {{loss: sft, batch_size: {batch}, max_prompt_tokens: {max_prompt}, max_completion_tokens: 128}}
optim: {{lr: {lr}, schedule: constant, max_grad_norm: 1.0}}
train: {{steps: {steps}, micro_batch_size: {micro}, max_minutes: {minutes}, seed: 0}}
eval: {{batch_size: 8, max_new_tokens: {new_tokens}, accuracy_reward: synth_verify}}
logging: {{output_dir: {run}, checkpoint_every: 0, log_samples_every: 0, progress: false}}
"""


def synth(paradigm: str, out: Path, n: int, seed: int, target: int, tokenizer: str, writer: str, gap: int) -> dict:
    from grpokit.cli import main

    args = ["synth", "--paradigm", paradigm, "--out", str(out), "--n", str(n), "--seed", str(seed), "--target-tokens", str(target),
            "--tokenizer", tokenizer, "--writer", writer, "--min-gap-tokens", str(gap), "--no-progress"]
    if main(args) != 0:
        raise SystemExit(f"grpokit {' '.join(args)} failed")
    return json.loads((out / "manifest.json").read_text())


def heldout(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(x) for x in (run_dir / "eval.jsonl").read_text().splitlines() if x.strip()]
    return {r["label"]: r["accuracy"] for r in rows if r.get("split") == "heldout" and "accuracy" in r}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--paradigm", default="multi_hop")
    p.add_argument("--n-train", type=int, default=96)
    p.add_argument("--n-heldout", type=int, default=40)
    p.add_argument("--target-tokens", type=int, default=1024)
    p.add_argument("--min-gap-tokens", type=int, default=256)
    p.add_argument("--writer", default="none", help="writer of the training data (none = procedural drafts; smollm2-135m-instruct = the LM)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--max-minutes", type=float, default=11.0)
    p.add_argument("--out", default=None)
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="synth-lc-"))
    model = tokenizer = "smollm2-135m-instruct"
    batch, micro, new_tokens = 8, 4, 96
    if a.dry_run:
        from grpokit.testing import save_tiny_model

        model = tokenizer = save_tiny_model(out / "tiny")
        a.n_train, a.n_heldout, a.target_tokens, a.min_gap_tokens, a.steps = 6, 3, 300, 64, 1
        batch, micro, new_tokens = 2, 2, 8
    t0 = time.perf_counter()
    train = synth(a.paradigm, out / "train", a.n_train, 1, a.target_tokens, tokenizer, a.writer, a.min_gap_tokens)
    held = synth(a.paradigm, out / "heldout", a.n_heldout, 2, a.target_tokens, tokenizer, "none", a.min_gap_tokens)
    synth_s = time.perf_counter() - t0
    run = out / "sft"
    config = out / "sft.yaml"
    config.write_text(CONFIG.format(model=model, train=out / "train" / "sft.jsonl", heldout=out / "heldout" / "sft.jsonl", batch=batch,
                                    max_prompt=a.target_tokens + 512, lr=a.lr, steps=a.steps, micro=micro, minutes=a.max_minutes,
                                    new_tokens=new_tokens, run=run))
    from grpokit.cli import main as cli

    if cli(["train", str(config)]) != 0:
        raise SystemExit("grpokit train failed")
    acc = heldout(run)
    minutes = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1]).get("time/elapsed_s", 0.0) / 60
    tokens = train["context_tokens"]
    print(f"paradigm={a.paradigm} n_train={train['accepted']} n_heldout={held['accepted']} rejected_train={train['rejected']} "
          f"context_tokens={tokens['min']}-{tokens['max']} synth_s={synth_s:.1f} steps={a.steps} "
          f"heldout_accuracy_before={acc.get('before', float('nan')):.4f} heldout_accuracy_after={acc.get('after', float('nan')):.4f} "
          f"train_minutes={minutes:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
