#!/usr/bin/env python
"""Masked-diffusion LM, measured: ESPO vs the d1 stand-in (and Mask-GRPO) on the noisy-prior tiny-mdm.

    flock /tmp/grpokit-heavy.lock python benchmarks/mdm.py --minutes 8          # tiny-mdm (built on first use)
    python benchmarks/mdm.py --dry-run                                            # random tiny MDM, seconds

Each method starts from the same tiny-mdm (``grpokit.families.masked_diffusion.pretrain``: LLaDA SFT on
noisy-prior data, right about half the time) and trains with its preset (``espo``,
``diffu_grpo``, ``mask_grpo``) on ``--task`` for ``--minutes`` of training wall clock, fixed seeds,
one torch thread. Held-out success = greedy exact match (``answer_word``) on the task's 256
held-out prompts, which the pretraining never saw, before and after. The last stdout line is
``task=<task> <method>=<before>,<after>,<steps> ...``; with ``--cogrpo-minutes`` also Co-GRPO on
the palette images (``co_grpo`` preset): held-out mean pixel reward of 8 sampled images per prompt
and the schedule's mean temperature, before and after.
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

PRESETS = {"espo": "espo", "stand_in": "diffu_grpo", "mask_grpo": "mask_grpo"}
TASKS = ("mdm_sort", "mdm_reverse", "mdm_add", "mdm_countdown")


def run_method(preset: str, model: str, out: Path, sets: list[str]) -> dict:
    from grpokit.config import load_config
    from grpokit.trainer.loop import Trainer

    cfg = load_config(preset=preset, overrides=[f"model.name={model}", f"logging.output_dir={out}", *sets])
    t0 = time.perf_counter()
    result = Trainer(cfg).train()
    after = result["after"]["accuracy"] if result["after"] else float("nan")
    return {"before": result["before"]["accuracy"], "after": after, "steps": result["steps"],
            "train_minutes": result["train_minutes"], "wall_minutes": (time.perf_counter() - t0) / 60}


def cogrpo(model: str, out: Path, sets: list[str], minutes: float, samples: int = 8) -> dict:
    """Co-GRPO on the palette images: held-out sampled reward and the schedule's mean knob values, before and after."""
    import torch

    from grpokit.config import load_config
    from grpokit.families.palette.cogrpo import Schedule
    from grpokit.families.palette.images import palette_exact, palette_match
    from grpokit.rollout.types import SamplingParams
    from grpokit.trainer.loop import Trainer

    cfg = load_config(preset="co_grpo", overrides=[f"model.name={model}", f"logging.output_dir={out}", *sets,
                                                   f"train.max_minutes={minutes}"])
    trainer = Trainer(cfg)
    rows = trainer.splits.heldout

    def measure() -> dict:
        torch.manual_seed(1234)  # the same evaluation draws before and after
        trainer.policy.calls, trainer.policy.step = 10**6, -1
        batch = trainer.policy.sample([r["prompt"] for r in rows], rows, samples, SamplingParams(temperature=1.0))
        labels = [r["label"] for r in batch.rows]
        values = Schedule.values(trainer.model.schedule.mean().detach())
        return {"reward": sum(palette_match([], batch.completions, labels)) / len(batch),
                "exact": sum(palette_exact([], batch.completions, labels)) / len(batch),
                **{k: [round(float(x), 4) for x in v] for k, v in values.items()}}

    before = measure()
    t0 = time.perf_counter()
    result = trainer.train()
    after = measure()
    return {"before": before, "after": after, "steps": result["steps"], "greedy_exact_before": result["before"]["accuracy"],
            "greedy_exact_after": result["after"]["accuracy"], "wall_minutes": (time.perf_counter() - t0) / 60}


def task_sets(task: str) -> list[str]:
    """The task and its exact-match reward: countdown checks the expression, the digit tasks the answer string."""
    reward = "countdown_equation" if task == "mdm_countdown" else "answer_word"
    return [f"data.task={task}", f"rewards=[{{name: {reward}, weight: 1.0}}]"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="mdm_sort", help="mdm_reverse, mdm_sort, mdm_add, mdm_countdown, or auto: the one "
                   "whose starting held-out success is nearest 50%% (probed first)")
    p.add_argument("--methods", default="espo,stand_in", help=f"comma-separated, of {', '.join(PRESETS)}")
    p.add_argument("--minutes", type=float, default=8.0, help="training wall clock per method")
    p.add_argument("--model", default="tiny-mdm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], help="extra config overrides of the text methods")
    p.add_argument("--out", default=None)
    p.add_argument("--cogrpo-minutes", type=float, default=0.0, help="then Co-GRPO on tiny-palette-mdm for this many minutes (0 = skip)")
    p.add_argument("--cogrpo-set", action="append", default=[], help="config overrides of the Co-GRPO run only")
    p.add_argument("--probe", action="store_true", help="first print the starting model's held-out success on every task")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="mdm-"))
    sets = ["logging.progress=false", "logging.log_samples_every=0", f"train.seed={a.seed}",
            f"train.max_minutes={a.minutes}", "logging.checkpoint_every=0", "model.threads=1", *a.set]
    model = a.model
    if a.dry_run:
        from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm, save_mdm

        tok = MDMTokenizer()
        model = str(save_mdm(build_mdm(len(tok), hidden=16, layers=1, heads=2), tok, out / "tiny"))
        sets += ["data.n_train=8", "data.n_heldout=4", "rollout.prompts_per_step=2", "rollout.group_size=2", "train.steps=1",
                 "train.max_minutes=0", "train.micro_batch_size=4"]
    results = {}
    if a.probe or a.task == "auto":  # base greedy success of the starting model on every task (which one leaves room to learn)
        base = {}
        for task in TASKS:
            probe = run_method("espo", model, out / f"probe_{task}", [*sets, *task_sets(task), "train.steps=1",
                                                                    "eval.after=false", "optim.lr=1e-12"])
            base[task] = probe["before"]
            print(json.dumps({"probe": task, "before": probe["before"]}), flush=True)
        results["probe"] = base
        if a.task == "auto":  # the task whose starting success is nearest one half (ties: the first listed)
            a.task = min(TASKS, key=lambda t: abs(base[t] - 0.5))
            print(json.dumps({"chosen_task": a.task}), flush=True)
    for method in a.methods.split(","):
        if method not in PRESETS:
            raise SystemExit(f"--methods: unknown method {method!r}; choose from {', '.join(PRESETS)}")
        results[method] = run_method(PRESETS[method], model, out / method, [*sets, *task_sets(a.task)])
        print(json.dumps({"method": method, **results[method]}), flush=True)
    if a.cogrpo_minutes > 0:
        palette = "tiny-palette-mdm"
        psets = sets[:2] + ["logging.checkpoint_every=0", f"train.seed={a.seed}", *a.cogrpo_set]
        if a.dry_run:
            from grpokit.families.masked_diffusion.model import save_mdm
            from grpokit.families.palette.images import PaletteTokenizer, build_palette_predictor

            palette = str(save_mdm(build_palette_predictor(hidden=16, layers=1), PaletteTokenizer(), out / "tiny_palette"))
            psets += ["data.n_train=8", "data.n_heldout=4", "rollout.prompts_per_step=2", "rollout.group_size=2",
                      "train.steps=1", "train.micro_batch_size=4"]
        results["co_grpo"] = cogrpo(palette, out / "co_grpo", psets, 0 if a.dry_run else a.cogrpo_minutes)
        print(json.dumps({"method": "co_grpo", **results["co_grpo"]}), flush=True)
    (out / "mdm_results.json").write_text(json.dumps({"task": a.task, "seed": a.seed, **results}, indent=1))
    text = {m: r for m, r in results.items() if m in PRESETS}
    line = f"task={a.task} " + " ".join(f"{m}={r['before']:.3f},{r['after']:.3f},{r['steps']}" for m, r in text.items())
    if "co_grpo" in results:
        c = results["co_grpo"]
        line += (f" co_grpo_reward={c['before']['reward']:.3f},{c['after']['reward']:.3f},{c['steps']}"
                 f" co_grpo_temperature={sum(c['before']['temperature']) / len(c['before']['temperature']):.3f},"
                 f"{sum(c['after']['temperature']) / len(c['after']['temperature']):.3f}")
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
