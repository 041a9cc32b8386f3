#!/usr/bin/env python
"""Edit-then-Consolidate, measured: plain SFT vs TPSFT vs TPSFT + GRPO on procedural counterfactual edits.

    python benchmarks/etcon.py --edits 50            # SmolLM2-135M-Instruct, the three arms
    python benchmarks/etcon.py --dry-run             # tiny random model, seconds: the same code path

Li et al., "EtCon: Edit-then-Consolidate for Reliable Knowledge Editing", arXiv 2512.04753.
The edits (``grpokit.editing.facts.make_facts``: fictional subjects, 2 paraphrases, 1
neighbour each) are written sequentially, in order, into the same FFN window (``mlp.down_proj``
of layers 4-8) by plain SFT (token NLL) and by TPSFT (trust region, one pi_old snapshot per edit
refreshed every ``--refresh-every`` updates), with the same steps and learning rate; the TPSFT
model is then consolidated by grpokit's GRPO trainer (preset ``etcon``, full model). Every stage
is evaluated under greedy free generation on the ``direct`` question and on the ``cot``
question with the authors' instruction: reliability, generalisation, locality (neighbour
answers unchanged vs the pre-edit model). The last stdout line is
``<stage>_<style>_<metric>=value ...`` for every cell of the table.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--edits", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=10, help="updates per edit (both arms)")
    p.add_argument("--lr", type=float, default=5e-4, help="Adam lr of the FFN window (both arms)")
    p.add_argument("--epsilon", type=float, default=0.2)
    p.add_argument("--refresh-every", type=int, default=0, help="TPSFT pi_old refresh period inside an edit (0 = per edit)")
    p.add_argument("--layers", default="4,5,6,7,8")
    p.add_argument("--paraphrases", type=int, default=2, help="paraphrases per edit (generalisation), 0-2")
    p.add_argument("--cot-tokens", type=int, default=96, help="greedy tokens of a cot-style answer")
    p.add_argument("--direct-tokens", type=int, default=24, help="greedy tokens of a direct answer")
    p.add_argument("--grpo-steps", type=int, default=6)
    p.add_argument("--format-steps", type=int, default=0,
                   help="SFT steps on format demonstrations of unrelated facts between TPSFT and GRPO (0 = none), evaluated as its own row")
    p.add_argument("--grpo-set", action="append", default=[], metavar="a.b=value", help="extra override of the GRPO stage")
    p.add_argument("--styles", default="direct,cot")
    p.add_argument("--arms", default="sft,tpsft,grpo", help="subset of sft,tpsft,grpo (grpo needs tpsft)")
    p.add_argument("--out", default=None)
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)

    import torch

    from grpokit.editing.editor import EditConfig, apply_edits
    from grpokit.editing.evaluate import evaluate
    from grpokit.editing.facts import make_facts, write_jsonl
    from grpokit.editing.pipeline import MAX_NEW_TOKENS, consolidation_stages, edit_prompts, save_model, table
    from grpokit.model.loading import load_model

    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="etcon-"))
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(a.seed)
    model_name, layers = "smollm2-135m-instruct", [int(x) for x in a.layers.split(",")]
    tokens = {**MAX_NEW_TOKENS, "direct": a.direct_tokens, "cot": a.cot_tokens}
    grpo = ["logging.progress=false", "logging.log_samples_every=0", "eval.before=false", "eval.after=false",
            f"train.steps={a.grpo_steps}", *a.grpo_set]
    if a.dry_run:
        from grpokit.testing import save_tiny_model

        model_name, layers, a.edits, a.steps, a.grpo_steps = save_tiny_model(out / "tiny"), [0, 1], 4, 2, 1
        tokens = {"direct": 6, "cot": 8}
        grpo += ["train.steps=1", "rollout.group_size=2", "rollout.prompts_per_step=2", "rollout.max_new_tokens=8", "train.micro_batch_size=4"]
    styles, arms = tuple(a.styles.split(",")), a.arms.split(",")
    edits = make_facts(a.edits, seed=a.seed, n_paraphrases=a.paraphrases)
    write_jsonl(edits, out / "facts.jsonl")
    base, tokenizer = load_model(model_name)
    prompts = edit_prompts(tokenizer, edits)
    t0 = time.time()
    stages, baseline = {}, None
    stages["pre-edit"], baseline = evaluate(base, tokenizer, edits, styles, max_new_tokens=tokens)
    minutes = {"eval": (time.time() - t0) / 60}
    print(f"pre-edit eval {minutes['eval']:.1f} min", flush=True)
    edit_stats = {}
    for method in [m for m in ("sft", "tpsft") if m in arms]:
        cfg = EditConfig(method=method, layers=layers, steps=a.steps, lr=a.lr, epsilon=a.epsilon, refresh_every=a.refresh_every)
        model = copy.deepcopy(base)
        t0 = time.time()
        rows = apply_edits(model, tokenizer, edits, prompts, cfg, progress=False)
        minutes[f"edit_{method}"] = (time.time() - t0) / 60
        edit_stats[method] = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
        stages[method], _ = evaluate(model, tokenizer, edits, styles, baseline, max_new_tokens=tokens)
        print(f"{method}: edit {minutes[f'edit_{method}']:.1f} min, {edit_stats[method]}", flush=True)
        if method == "tpsft" and "grpo" in arms:
            edited = save_model(model, tokenizer, out / "edited")

            def measure(folder: Path) -> dict:
                return evaluate(load_model(folder)[0], tokenizer, edits, styles, baseline, max_new_tokens=tokens)[0]

            rows = consolidation_stages(edited, edits, out, grpo, 1 if a.dry_run and a.format_steps else a.format_steps, measure, minutes)
            stages.update({f"tpsft+{name}": metrics for name, metrics in rows.items()})
            print(f"grpo: {minutes['grpo']:.1f} min", flush=True)
        del model
    (out / "results.json").write_text(json.dumps({"stages": stages, "edit_stats": edit_stats, "minutes": minutes,
                                                 "args": vars(a)}, indent=1))
    print(f"{a.edits} edits, steps/edit {a.steps}, lr {a.lr}, layers {layers}, epsilon {a.epsilon}, "
          f"refresh_every {a.refresh_every}, grpo steps {a.grpo_steps}; minutes {json.dumps({k: round(v, 1) for k, v in minutes.items()})}")
    print(table(stages))
    print(" ".join(f"{s.replace('+', '_').replace('-', '_')}_{st}_{m[:3]}={v:.3f}"
                   for s, by in stages.items() for st, ms in by.items() for m, v in ms.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
