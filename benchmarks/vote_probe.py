"""How often the starting model's majority vote is right: the precondition of label-free RL (TTRL, SPINE).

TTRL rewards agreement with the group's majority answer, so it can only raise accuracy where that
majority is mostly the true answer ("TTRL: Test-Time Reinforcement Learning", arXiv 2504.16084,
whose discussion names a lack of prior knowledge of the task as a failure case). This probe samples
the efficacy study's groups (G completions per training prompt, the study's temperature and token
cap) from the untrained model and reports, per task:

* ``sample accuracy``: the share of sampled completions the judge scores correct (mean@G);
* ``majority right``: the share of prompts whose majority answer (the TTRL vote grpokit's
  ``majority_vote`` reward takes, stated answers only) is the true answer; ``no majority``: no
  completion states an answer;
* ``reward agrees``: the share of completions whose pseudo-reward equals their true correctness.

    python benchmarks/vote_probe.py                       # demo and hard, 100 training prompts each
    python benchmarks/vote_probe.py --tasks hard --prompts 40 --seed 1
    python benchmarks/vote_probe.py --dry-run             # tiny random model, seconds (the code path only)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def probe_task(task_name: str, prompts: int, seed: int, dry: bool, out_dir: str) -> dict:
    """One task's vote statistics (see the module doc) over its first ``prompts`` training prompts."""
    import efficacy
    from grpokit.data.answers import extract_stated_number
    from grpokit.model.loading import load_model
    from grpokit.rewards.scoring import score_completions
    from grpokit.rollout.hf import HFBackend
    from grpokit.rollout.types import SamplingParams
    from grpokit.trainer import setup

    sizes = efficacy.STUDY
    if dry:
        import dataclasses

        from grpokit.testing import save_tiny_model

        save_tiny_model(Path(out_dir) / "dry-model", seed=0)
        sizes = dataclasses.replace(efficacy.DRY, model=str(Path(out_dir) / "dry-model"))
    cfg = efficacy.build_config(efficacy.METHODS["ttrl"], efficacy.TASKS[task_name], seed, sizes, out_dir, "cpu")
    torch.manual_seed(seed)
    model, tokenizer = load_model(cfg.model.name, dtype="float32")
    tokenizer.padding_side = "left"
    backend = HFBackend(model, tokenizer, fused_decode=cfg.rollout.fused_decode)
    judge = setup.accuracy_judge(cfg, setup.build_rewards(cfg.rewards))
    rows = setup.build_splits(cfg.data).train[:prompts]
    texts = setup.render_all(tokenizer, rows, cfg.data.system_prompt)
    r = cfg.rollout
    params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k)
    g = r.group_size
    groups, correct, truths = [], [], []
    for s in range(0, len(rows), 4):
        batch = backend.generate(texts[s : s + 4], rows[s : s + 4], g, params)
        scores = score_completions([judge], batch.prompts, batch.completions, batch.columns(), on_error="zero")
        correct += (scores.per_reward[judge.name].nan_to_num(0.0) >= 1.0).view(-1, g).tolist()
        answers = [extract_stated_number(c) for c in batch.completions]
        groups += [answers[i * g : (i + 1) * g] for i in range(len(rows[s : s + 4]))]
        truths += [row["answer"] for row in rows[s : s + 4]]
    return {"task": task_name, "group": g, **tally(groups, correct, truths)}


def tally(groups: list[list], correct: list[list[bool]], truths: list) -> dict:
    """The vote statistics of the module doc from each prompt's G stated answers (None: none stated), the judge's
    verdict on each completion and each prompt's true answer; the vote is ``majority_vote``'s (ties: first)."""
    from grpokit.data.answers import numbers_equal
    from grpokit.rewards.group import majority_answer

    same = lambda a, b: numbers_equal(str(a), str(b))  # noqa: E731 (the reward's own equality)
    right = none = agrees = hits = total = 0
    for answers, ok, truth in zip(groups, correct, truths):
        label = majority_answer(answers, same, "first")
        none += label is None
        right += label is not None and same(label, truth)
        for a, c in zip(answers, ok):
            pseudo = a is not None and label is not None and same(a, label)
            total += 1
            hits += bool(c)
            agrees += pseudo == bool(c)
    n, c = max(len(groups), 1), max(total, 1)
    return {"prompts": len(groups), "sample_accuracy": hits / c, "majority_right": right / n, "no_majority": none / n,
            "reward_agrees": agrees / c}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="demo,hard", help="comma-separated efficacy tasks (default: demo,hard)")
    p.add_argument("--prompts", type=int, default=100, help="training prompts per task (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="the tiny random model of the efficacy dry run: the code path only")
    a = p.parse_args(argv)
    print("| task | prompts x G | sample accuracy (mean@G) | majority right | no majority | reward agrees with truth |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.tasks.split(","):
            r = probe_task(name.strip(), a.prompts, a.seed, a.dry_run, tmp)
            print(f"| {r['task']} | {r['prompts']} x {r['group']} | {r['sample_accuracy']:.1%} | {r['majority_right']:.1%} | "
                  f"{r['no_majority']:.1%} | {r['reward_agrees']:.1%} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
