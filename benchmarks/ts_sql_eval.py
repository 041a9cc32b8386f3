#!/usr/bin/env python
"""Thinkquel in miniature, measured: greedy held-out completions of a model on ``ts_sql``, every reward and the spans.

    python benchmarks/ts_sql_eval.py --model smollm2-135m-instruct --n 40 --max-new-tokens 160
    python benchmarks/ts_sql_eval.py --model runs/ts_sql                 # after `grpokit train --preset ts_sql`
    python benchmarks/ts_sql_eval.py --dry-run                           # tiny random model, seconds

The ``ts_sql`` preset's held-out evaluation logs execution accuracy only; at 135M parameters that
is 0 before and after a short run, so this script also reports what moves: the share of
completions with a ```sql block (``sql_format``), of queries that run (``sql_executes``), the
schema-linking F1, the exact result match (``sql_execution``), and how much of each completion
the planning span covers (text through the first ```sql, as ``algorithm.plan_delimiter``), with
the share whose plan has a numbered step. Prompts are the task's held-out rows (seed 0, the
preset's data), rendered with the model's chat template; one greedy completion each. The last
stdout line is ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

REWARDS_MEASURED = ("sql_execution", "sql_executes", "sql_schema_f1", "sql_format")


def evaluate(model_name: str, n: int, max_new_tokens: int, batch_size: int) -> dict[str, float]:
    import torch

    from grpokit.builtins import load_plugins
    from grpokit.config import load_config
    from grpokit.data.chat import render_prompt
    from grpokit.data.tasks import TASKS
    from grpokit.model.loading import load_model
    from grpokit.rewards import REWARDS

    load_plugins()
    cfg = load_config(preset="ts_sql")
    rows = TASKS.get("ts_sql")(cfg.data.seed, cfg.data.n_train, cfg.data.n_heldout, **cfg.data.task_options).heldout[:n]
    model, tok = load_model(model_name)
    model.eval()
    tok.padding_side = "left"
    completions: list[str] = []
    for start in range(0, len(rows), batch_size):
        texts = [render_prompt(tok, r["prompt"]) for r in rows[start : start + batch_size]]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        completions += tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    columns = {"answer": [r["answer"] for r in rows], "db_path": [r["db_path"] for r in rows]}
    result = {}
    for name in REWARDS_MEASURED:
        scores = REWARDS.get(name)([r["prompt"] for r in rows], completions, **columns)
        result[name] = sum(s or 0.0 for s in scores) / len(scores)
    delimiter = cfg.algorithm.plan_delimiter
    plans = [c[: c.find(delimiter)] if delimiter in c else None for c in completions]
    result["has_plan_span"] = sum(p is not None for p in plans) / len(plans)
    result["plan_char_frac"] = sum(len(p) / max(len(c), 1) for p, c in zip(plans, completions) if p is not None) / len(plans)
    result["numbered_plan"] = sum(bool(p and re.search(r"^\s*1\.", p, re.M)) for p in plans) / len(plans)
    result["n"] = float(len(rows))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--n", type=int, default=40, help="held-out prompts (the first n)")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--dry-run", action="store_true", help="tiny random model, 4 prompts, 16 tokens")
    ap.add_argument("--out", type=Path, default=None, help="also write the numbers to OUT/ts_sql_eval.json")
    args = ap.parse_args()
    if args.dry_run:
        from grpokit.testing import save_tiny_model

        args.model, args.n, args.max_new_tokens = save_tiny_model(tempfile.mkdtemp()), 4, 16
    result = evaluate(args.model, args.n, args.max_new_tokens, args.batch_size)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ts_sql_eval.json").write_text(json.dumps({"model": args.model, **result}, indent=1))
    print(" ".join(f"{k}={v:.3f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
