#!/usr/bin/env python
"""Text-to-SQL, measured: GRPO from the base model vs clause-level CoT SFT then GRPO, same wall budget.

    python benchmarks/sql_cot.py --minutes 10 --sft-minutes 3   # SmolLM2, ~30 min with evaluations
    python benchmarks/sql_cot.py --dry-run                      # tiny random model, seconds: the same code path

"Sparks of Tabular Reasoning via Text2SQL Reinforcement Learning" (Stoisser et al., arXiv
2505.00016) trains in two stages: SFT on clause-by-clause chain-of-thought traces written from
gold SQL, then GRPO with the execution reward. Two arms on the ``text_to_sql`` task with
``templates: all`` (basic + compositional questions), 192 new tokens:

  (a) GRPO from the base model for ``--minutes`` of training wall time, with the ``sql`` recipe's
      composite reward (execution, clause F1, string match, judge, format) and lr 2e-5;
  (b) ``sql_cot_sft`` for ``--sft-minutes``, then ``sql_after_cot`` (execution reward, lr 2e-6, a KL
      to the SFT model) for ``minutes - sft_minutes``.

Stage 2 alone, from one SFT model (the run behind the ``sql_after_cot`` setting, whose first
version, the composite reward at lr 2e-5, took the SFT model from 15% to 1.7%)::

    python benchmarks/sql_cot.py --arms sft,sft_grpo --minutes 24 --sft-minutes 8 --heldout 60

``--grpo-set`` overrides both GRPO stages (e.g. another learning rate, reward or
a KL to the starting model: with ``algorithm.beta > 0`` the reference is the stage's starting
model, i.e. the SFT model in arm b); ``--sft-dir`` reuses a finished SFT run folder instead of
training one (its minutes are then not re-spent, and the report says so).

The budget is the same training wall time for both arms, the SFT stage counted against (b)
(evaluations and model loading excluded; each stage finishes the step it is in when its time
runs out, so the steps done are reported too). Held-out execution accuracy (``sql_execution``,
greedy, the task's held-out questions) is measured on the base model, after (a), after (b)'s
SFT and after (b). The last stdout line is
``accuracy_base=.. accuracy_grpo=.. accuracy_sft=.. accuracy_sft_grpo=.. steps_grpo=.. steps_sft=.. steps_sft_grpo=..``.
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


def train(args: list[str]) -> float:
    """Run ``grpokit train`` with ``args``; its wall seconds (loading and evaluations included)."""
    from grpokit.cli import main

    t0 = time.perf_counter()
    if main(["train", *args]) != 0:
        raise SystemExit(f"grpokit train {' '.join(args)} failed")
    return time.perf_counter() - t0


def heldout(run_dir: Path) -> list[dict]:
    """The held-out accuracy rows of a run's eval.jsonl, in order (before, ..., after)."""
    rows = [json.loads(x) for x in (run_dir / "eval.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("split", "heldout") == "heldout" and "accuracy" in r]


def steps(run_dir: Path) -> int:
    """Optimizer steps a run did (the rows of its metrics.jsonl)."""
    path = run_dir / "metrics.jsonl"
    return sum(1 for x in path.read_text().splitlines() if x.strip()) if path.is_file() else 0


def last_mean(run_dir: Path, key: str, k: int = 5) -> float:
    """Mean of ``key`` over a run's last ``k`` logged steps (nan if absent)."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    values = [r[key] for r in rows[-k:] if key in r]
    return sum(values) / len(values) if values else float("nan")


# arm (a): the `sql` recipe (the paper's composite reward, lr 2e-5, no KL) on the stage-2 questions and lengths
ARM_A = ["optim.lr=2e-5", "algorithm.beta=0.0",
         "rewards=[{name: sql_execution, weight: 1.0, kwargs: {timeout_s: 1.0, max_rows: 1000}}, "
         "{name: sql_clause_f1, weight: 0.3}, {name: sql_string_match, weight: 0.1}, {name: sql_judge, weight: 0.2}, "
         "{name: sql_format, weight: 0.1}]"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="training wall minutes of each arm")
    p.add_argument("--sft-minutes", type=float, default=3.0, help="of (b)'s minutes, those spent on CoT SFT")
    p.add_argument("--heldout", type=int, default=100, help="held-out questions")
    p.add_argument("--out", default=None)
    p.add_argument("--arms", default="grpo,sft,sft_grpo", help="subset of grpo,sft,sft_grpo (sft_grpo needs sft or --sft-dir)")
    p.add_argument("--grpo-set", action="append", default=[], metavar="a.b=value", help="extra override of both GRPO stages")
    p.add_argument("--sft-dir", default=None, help="a finished sql_cot_sft run folder to start arm b from (skips the SFT stage)")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if set(arms) - {"grpo", "sft", "sft_grpo"} or not arms:
        p.error(f"--arms: choose from grpo,sft,sft_grpo (got {a.arms!r})")
    if "sft_grpo" in arms and "sft" not in arms and not a.sft_dir:
        p.error("--arms sft_grpo needs the sft arm or --sft-dir (the model it starts from)")
    if a.sft_dir and "sft_grpo" not in arms:
        p.error("--sft-dir is the start of arm sft_grpo, which --arms leaves out: add sft_grpo or drop --sft-dir")
    if a.grpo_set and not {"grpo", "sft_grpo"} & set(arms):
        p.error("--grpo-set overrides the GRPO stages, which --arms leaves out: add grpo or sft_grpo, or drop --grpo-set")
    if not 0 < a.sft_minutes < a.minutes:
        p.error("--sft-minutes must be > 0 and below --minutes (arm b needs time for GRPO too)")
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="sql-cot-"))
    common = ["logging.progress=false", "logging.log_samples_every=0", f"data.n_heldout={a.heldout}"]
    model, limit = "smollm2-135m-instruct", []
    if a.dry_run:
        from grpokit.testing import save_tiny_model

        model = save_tiny_model(out / "tiny")
        common += ["data.n_train=8", "data.n_heldout=4", "eval.max_new_tokens=8"]
        limit = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8"]
        a.minutes, a.sft_minutes = 0.02, 0.01
    sets = lambda *kv: [x for s in (*common, *kv) for x in ("--set", s)]  # noqa: E731
    grpo, sft, sft_grpo = out / "grpo", Path(a.sft_dir) if a.sft_dir else out / "sft", out / "sft_grpo"
    grpo_min = a.minutes - a.sft_minutes
    wall, acc, n, nq = {}, {}, {}, a.heldout

    def grpo_stage(key: str, start: str | Path, folder: Path, minutes: float) -> tuple[float, float]:
        """A GRPO stage from ``start`` into ``folder``: (held-out accuracy before, after); its wall time and steps recorded.

        Arm (b) is ``sql_after_cot`` (execution reward, lr 2e-6, KL to the SFT model); arm (a) starts from
        the base model, which never executes a right query (0%), so it keeps the paper's composite reward
        and lr: ``sql_after_cot`` with the ``sql`` recipe's rewards, lr and beta (ARM_A).
        """
        nonlocal nq
        recipe = ARM_A if key == "grpo" else []
        wall[key] = train(["--preset", "sql_after_cot", *sets(*recipe, *limit, *a.grpo_set, f"model.name={start}",
                                                               f"logging.output_dir={folder}", "train.steps=100000",
                                                               f"train.max_minutes={minutes}")])
        evals = heldout(folder)
        n[key], nq = steps(folder), int(evals[0].get("n", nq))
        return evals[0]["accuracy"], evals[-1]["accuracy"]

    if "grpo" in arms:
        acc["base"], acc["grpo"] = grpo_stage("grpo", model, grpo, a.minutes)
    if "sft" in arms and not a.sft_dir:
        wall["sft"] = train(["--preset", "sql_cot_sft", *sets(f"model.name={model}", f"logging.output_dir={sft}",
                                                                "train.steps=100000", f"train.max_minutes={a.sft_minutes}",
                                                                "logging.checkpoint_every=0")])
    if "sft" in arms or a.sft_dir:
        n["sft"] = steps(sft)
        sft_evals = heldout(sft) if (sft / "eval.jsonl").is_file() else []
        if sft_evals:
            acc["sft"] = sft_evals[-1]["accuracy"]
    if "sft_grpo" in arms:
        acc["sft"], acc["sft_grpo"] = grpo_stage("sft_grpo", sft, sft_grpo, grpo_min)
    reused = f" (reused {a.sft_dir})" if a.sft_dir else ""
    print(f"| held-out execution accuracy ({nq} questions, greedy) | accuracy | steps | wall s |")
    print("|---|---|---|---|")
    if "base" in acc:
        print(f"| base SmolLM2 | {acc['base']:.1%} | - | - |")
    if "grpo" in acc:
        print(f"| (a) GRPO, {a.minutes:g} min | {acc['grpo']:.1%} | {n['grpo']} GRPO | {wall['grpo']:.0f} |")
    if "sft" in acc:
        print(f"| (b) CoT SFT only, {a.sft_minutes:g} min{reused} | {acc['sft']:.1%} | {n.get('sft', 0)} SFT | "
              f"{wall.get('sft', float('nan')):.0f} |")
    if "sft_grpo" in acc:
        print(f"| (b) CoT SFT + GRPO, {a.sft_minutes:g} + {grpo_min:g} min{reused} | {acc['sft_grpo']:.1%} | "
              f"{n.get('sft', 0)} SFT + {n['sft_grpo']} GRPO | {wall.get('sft', 0.0) + wall['sft_grpo']:.0f} |")
    if a.grpo_set:
        print("GRPO stage overrides: " + " ".join(a.grpo_set))
    for k in ("grpo", "sft_grpo"):
        if k in n:
            print(f"training sql_format reward, last 5 steps ({k}): {last_mean(out / k, 'reward/sql_format/mean'):.2f}; "
                  f"sql_execution: {last_mean(out / k, 'reward/sql_execution/mean'):.2f}; "
                  f"completion length: {last_mean(out / k, 'completion_len/mean'):.0f}")
    print(" ".join(f"accuracy_{k}={v:.3f}" for k, v in acc.items()) + " "
          + " ".join(f"steps_{k}={v}" for k, v in n.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
