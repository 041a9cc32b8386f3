#!/usr/bin/env python
"""DPP-GRPO in the paper's setting, measured: a prompt rewriter before and after SFT and GRPO.

    OMP_NUM_THREADS=2 python benchmarks/dpp_rewrite.py --sft-steps 30 --grpo-minutes 4   # SmolLM2, ~20 min on 2 free cores
    OMP_NUM_THREADS=2 python benchmarks/dpp_rewrite.py --sft-steps 5 --grpo-steps 3 --group-size 4 \
        --prompts-per-step 2 --n-eval 8 --k 2 --arms rq                                  # the miniature of docs/rewards.md
    python benchmarks/dpp_rewrite.py --dry-run                                           # tiny random model, seconds

Kazimi, Dunlop, Yanardag, "Diverse Video Generation with Determinantal Point Process-Guided
Policy Optimization", arXiv 2511.20647: SFT warm-up (preset ``dpp_rewrite_sft``), then GRPO with
r = 0.5 Δ(p | R_q) + 0.5 R_rel(p) against each query's curated reference set (``dpp_rewrite``).
Arms: the base model; after SFT; SFT then GRPO against R_q; SFT then GRPO with the
leave-one-out group as the reference set (the ``dpp_grpo`` preset's reward, ``reference:
group``), the same GRPO wall budget. Held-out metrics (the task's held-out queries, greedy):

- per row (the prompt shows the row's R_q): ``reward`` (the paper's r), ``gain`` Δ(p | R_q),
  ``rel`` R_rel(p), ``copy`` (share of rewrites equal to the query);
- per query, a set of ``--k`` rewrites built one at a time from R = ∅ (the paper's inference,
  :func:`grpokit.rewards.dpp_sets.build_rewrite_sets`): ``set_div`` = log det(L_S + I) / K
  (log 2 = orthogonal), ``set_rel`` = mean cos(p, q), ``set_distinct`` = share of distinct rewrites.

The last stdout line is one JSON object {arm: metrics}.
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


def train(preset: str, sets: list[str]) -> float:
    """``grpokit train --preset PRESET --set ...``; its wall seconds."""
    from grpokit.cli import main

    t0 = time.perf_counter()
    if main(["train", "--preset", preset, *[a for s in sets for a in ("--set", s)]]) != 0:
        raise SystemExit(f"grpokit train --preset {preset} failed")
    return time.perf_counter() - t0


def generator(source: str, max_new_tokens: int):
    """``generate(prompts, n) -> [[completion]]`` (greedy, n = 1) of the model at ``source`` (a name or a run folder)."""
    import torch

    from grpokit.config import load_config
    from grpokit.data.chat import render_prompt
    from grpokit.trainer.setup import load_policy

    cfg = load_config(preset="dpp_rewrite", overrides=[f"model.name={source}", "model.family=causal_lm"])
    model, tok = load_policy(cfg)
    model.eval()

    @torch.no_grad()
    def generate(prompts: list[str], n: int) -> list[list[str]]:
        texts = [render_prompt(tok, p) for p in prompts]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        return [[tok.decode(row[enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()] for row in out]

    return generate


def measure(source: str, rows: list[dict], k: int, max_new_tokens: int, embed) -> dict[str, float]:
    """The held-out metrics of the module docstring for the model at ``source``."""
    from grpokit.rewards.builtin import REWARDS
    from grpokit.rewards.dpp_sets import build_rewrite_sets, set_metrics

    generate = generator(source, max_new_tokens)
    outs = [c[0] for c in generate([r["prompt"] for r in rows], 1)]
    n, queries = len(rows), [r["query"] for r in rows]
    cols = dict(group_ids=list(range(n)), embed=embed, reference="column",
                reference_set=[r["reference_set"] for r in rows], query=queries)
    dpp = REWARDS.get("dpp")
    reward = dpp(queries, outs, **cols)
    gain = dpp(queries, outs, lambda_div=1.0, lambda_rel=0.0, **cols)
    rel = dpp(queries, outs, lambda_div=0.0, lambda_rel=1.0, **cols)
    sets = build_rewrite_sets(generate, queries, k, embed)
    per_set = [set_metrics(q, s, embed) for q, s in zip(queries, sets)]
    mean = lambda xs: sum(xs) / max(len(xs), 1)  # noqa: E731
    return {"reward": mean(reward), "gain": mean(gain), "rel": mean(rel),
            "copy": mean([float(o.strip().lower().rstrip(".") == q.lower()) for o, q in zip(outs, queries)]),
            "set_div": mean([m["diversity"] for m in per_set]), "set_rel": mean([m["relevance"] for m in per_set]),
            "set_distinct": mean([m["distinct"] for m in per_set]), "example": sets[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sft-steps", type=int, default=30)
    ap.add_argument("--grpo-minutes", type=float, default=4.0, help="GRPO training wall budget per arm")
    ap.add_argument("--grpo-steps", type=int, default=0, help="> 0: this many GRPO steps per arm instead of the wall budget")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--arms", default="rq,loo", help="GRPO arms after SFT: rq (reference R_q), loo (leave-one-out group)")
    ap.add_argument("--n-eval", type=int, default=16, help="held-out queries")
    ap.add_argument("--k", type=int, default=3, help="rewrites per sequentially built set")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--out", default=None, help="folder for the runs (default: a temporary one)")
    ap.add_argument("--dry-run", action="store_true", help="tiny random model and hashing embeddings: the code path in seconds")
    args = ap.parse_args()
    from grpokit.data.tasks import TASKS

    out = Path(args.out or tempfile.mkdtemp(prefix="dpp_rewrite_"))
    model, embed, extra = "smollm2-135m-instruct", "minilm", []
    if args.dry_run:
        from grpokit.testing import save_tiny_model

        model, embed = save_tiny_model(out / "tiny"), "hashing"
        args.sft_steps, args.grpo_minutes, args.n_eval, args.max_new_tokens = 2, 0.0, 4, 8
        extra = ["model.lora.target_modules=[q_proj, v_proj]", "rollout.max_new_tokens=8", "train.steps=2"]
    common = ["logging.progress=false", "logging.log_samples_every=0", *extra]
    grpo = [*common, "model.family=causal_lm", f"model.name={out / 'sft'}", f"rollout.group_size={args.group_size}",
            f"rollout.prompts_per_step={args.prompts_per_step}", f"train.micro_batch_size={args.group_size * args.prompts_per_step}"]
    if args.grpo_steps > 0:
        grpo += ["train.max_minutes=0", f"train.steps={args.grpo_steps}"]
    elif not args.dry_run:
        grpo += [f"train.max_minutes={args.grpo_minutes}", "train.steps=1000"]  # the wall budget ends the run
    rewards = "rewards=[{{name: dpp, weight: 1.0, kwargs: {{reference: {ref}, embed: {embed}, lambda_div: 0.5, lambda_rel: 0.5}}}}]"
    secs = {"sft": train("dpp_rewrite_sft", [*common, f"model.name={model}", f"logging.output_dir={out / 'sft'}",
                                             f"train.steps={args.sft_steps}", f"logging.checkpoint_every={args.sft_steps}",
                                             rewards.format(ref="column", embed=embed)])}
    arms = [a for a in (("grpo_rq", "column"), ("grpo_loo", "group")) if a[0][5:] in args.arms.split(",")]
    for arm, ref in arms:
        secs[arm] = train("dpp_rewrite", [*grpo, f"logging.output_dir={out / arm}", rewards.format(ref=ref, embed=embed)])
    rows = TASKS.get("prompt_rewrites")(seed=0, n_train=0, n_heldout=args.n_eval).heldout
    results = {}
    for arm, source in [("base", model), ("sft", out / "sft")] + [(f"sft+{a}", out / a) for a, _ in arms]:
        results[arm] = measure(str(source), rows, args.k, args.max_new_tokens, embed)
        steps = out / arm.split("+")[-1] / "metrics.jsonl"
        if arm != "base" and steps.is_file():
            results[arm]["steps"] = sum(1 for x in steps.read_text().splitlines() if x.strip())
        print(arm, json.dumps(results[arm]), flush=True)
    print("train_seconds", json.dumps(secs))
    print(json.dumps({a: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in m.items() if k != "example"}
                      for a, m in results.items()}))


if __name__ == "__main__":
    main()
