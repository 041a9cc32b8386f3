"""Flow-GRPO on the tiny flow-matching image model, and Pref-GRPO's claim in miniature.

1. ``flow_grpo``: held-out mean ``colour_fraction`` (fixed held-out conditions and noise seeds,
   the ODE with ``flow.eval_steps``) before and after ``--minutes`` of training.
2. Pref-GRPO miniature (arXiv 2508.20751): the same policy trained for ``--pref-steps`` steps on
   (a) a pointwise ``tiny_score`` (0.5 + 0.01·colour_fraction + seeded noise of std 0.002: tiny
   differences), group-normalised, and (b) the ``win_rate`` of the pairwise ``image_judge`` on the
   same hidden score with a tie margin. Per run: mean |advantage|, the fraction of steps whose
   mean advantage magnitude exceeds 0.5, the training colour fraction's step-to-step spread and
   the held-out colour fraction after. Before training, a probe batch of the initial policy is
   rewarded both ways: the advantage gap |A_i − A_j| of pairs whose colour fractions differ by
   less than 0.02 (images a judge calls equal) shows how much group normalisation amplifies
   differences that are noise.

    flock /tmp/grpokit-heavy.lock .venv/bin/python benchmarks/flow_image.py --minutes 8 --pref-steps 40 > /tmp/flow.log 2>&1
    .venv/bin/python benchmarks/flow_image.py --dry-run      # same path, a random tiny model, seconds

Last stdout line: ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from grpokit.config.loading import load_config  # noqa: E402
from grpokit.rollout.types import SamplingParams  # noqa: E402


def heldout_reward(trainer) -> float:
    """Mean colour_fraction of the held-out rows' ODE images (each row's fixed noise seed)."""
    from grpokit.diffusion.flow.rewards import colour_fraction

    rows = trainer.splits.heldout
    batch = trainer.policy.sample([r["prompt"] for r in rows], rows, 1, SamplingParams(greedy=True))
    return statistics.fmean(colour_fraction(batch.prompts, batch.completions, colour=[r["colour"] for r in rows]))


def run(preset: str, out: Path, overrides: list[str]) -> dict:
    from grpokit.trainer.loop import Trainer

    cfg = load_config(preset=preset, overrides=[f"logging.output_dir={out}", "logging.progress=false", "eval.before=false",
                                                "eval.after=false", "logging.checkpoint_every=0", *overrides])
    trainer = Trainer(cfg)
    before = heldout_reward(trainer)
    t0 = time.perf_counter()
    result = trainer.train()
    minutes = (time.perf_counter() - t0) / 60
    after = heldout_reward(trainer)
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"reward' in line]
    return {"before": before, "after": after, "minutes": result["train_minutes"], "wall_minutes": minutes, "steps": steps}


def advantage_probe(policy, rows: list[dict], group: int = 8) -> dict:
    """One batch of the policy, rewarded both ways: mean |A|, and the advantage gap |A_i − A_j| of near-equal pairs (|Δ colour fraction| < 0.02).

    A = (r − group mean) / (unbiased std + 1e-8), the authors' normalisation, for r = tiny_score
    (pointwise) and r = the image judge's win rate (tie margin 0.05), on the same images.
    """
    from grpokit.diffusion.flow.rewards import colour_fraction, tiny_score
    from grpokit.rewards import resolve_reward

    batch = policy.sample([r["prompt"] for r in rows], rows, group, SamplingParams())
    colours = [r["colour"] for r in batch.rows]
    gids = batch.group_ids.tolist()
    cf = torch.tensor(colour_fraction(batch.prompts, batch.completions, colour=colours)).view(-1, group)
    point = torch.tensor(tiny_score(batch.prompts, batch.completions, colour=colours, scale=0.01, noise=0.002)).view(-1, group)
    win = torch.tensor(resolve_reward("win_rate")(batch.prompts, batch.completions, group_ids=gids, colour=colours, noise=0.002,
                                                  prefer="grpokit.diffusion.flow.rewards:image_judge", tie_margin=0.05)).view(-1, group)
    norm = lambda r: (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-8)  # noqa: E731
    close = (cf[:, :, None] - cf[:, None, :]).abs() < 0.02  # [groups, G, G] pairs the judge sees as equal
    close &= ~torch.eye(group, dtype=torch.bool)[None]
    out = {"tied_pairs": float(close.float().sum() / (cf.shape[0] * group * (group - 1)))}
    for name, r in (("pointwise", point), ("win_rate", win)):
        a = norm(r)
        out[f"{name}_abs_adv"] = float(a.abs().mean())
        gap = (a[:, :, None] - a[:, None, :]).abs()  # [groups, G, G] advantage gap of each pair
        out[f"{name}_abs_adv_tied"] = float(gap[close].mean()) if bool(close.any()) else float("nan")
    out["pointwise_score_range"] = float((point.max(1).values - point.min(1).values).mean())
    return out


def summary(steps: list[dict]) -> dict:
    adv = [s.get("adv/abs_mean", 0.0) for s in steps]
    train = [s.get("reward/colour_fraction/mean", float("nan")) for s in steps]
    jumps = [abs(b - a) for a, b in zip(train, train[1:])]
    return {"adv_abs_mean": statistics.fmean(adv), "big_adv_frac": sum(a > 0.5 for a in adv) / max(len(adv), 1),
            "train_jump_mean": statistics.fmean(jumps) if jumps else 0.0, "train_last": train[-1] if train else float("nan")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="a random tiny model and a few steps (seconds)")
    p.add_argument("--out", default="/tmp/flow_image_bench")
    p.add_argument("--minutes", type=float, default=8.0, help="flow_grpo training budget")
    p.add_argument("--pref-steps", type=int, default=40, help="steps of each Pref-GRPO miniature run")
    p.add_argument("--seeds", type=int, default=1, help="seeds of the miniature")
    a = p.parse_args(argv)
    out = Path(a.out)
    torch.set_num_threads(1)
    common: list[str] = []
    if a.dry_run:
        from grpokit.diffusion.flow.pretrain import build

        folder = build(out / "tiny-random", steps=0, channels=(8, 16))
        common = [f"model.name={folder}", "data.n_heldout=12", "rollout.prompts_per_step=2", "rollout.group_size=4", "flow.eval_steps=4",
                  "flow.steps=4"]
        a.minutes, a.pref_steps = 0.0, 2
    steps = ["train.steps=3", "train.max_minutes=0"] if a.dry_run else [f"train.max_minutes={a.minutes}"]
    flow = run("flow_grpo", out / "flow_grpo", common + steps)
    print(f"| flow_grpo | held-out colour_fraction {flow['before']:.3f} -> {flow['after']:.3f} | {flow['minutes']:.1f} min, "
          f"{len(flow['steps'])} steps |")
    from grpokit.diffusion.flow.procedural import flow_images
    from grpokit.trainer.loop import Trainer

    probe_cfg = load_config(preset="pref_grpo_image", overrides=[*common, f"logging.output_dir={out / 'probe'}"])
    probe = advantage_probe(Trainer(probe_cfg).policy, flow_images(1, 0, 8 if a.dry_run else 48).heldout)
    print(f"| probe (initial policy, same-noise groups of 8) | pointwise score range in a group {probe['pointwise_score_range']:.4f} | "
          f"mean abs adv: pointwise {probe['pointwise_abs_adv']:.3f}, win rate {probe['win_rate_abs_adv']:.3f} | advantage gap of near-equal "
          f"pairs ({probe['tied_pairs']:.2f} of pairs): pointwise {probe['pointwise_abs_adv_tied']:.3f}, win rate {probe['win_rate_abs_adv_tied']:.3f} |")
    rows = {"pointwise": [], "win_rate": []}
    for seed in range(a.seeds):
        fixed = common + [f"train.steps={a.pref_steps}", "train.max_minutes=0", f"train.seed={seed}"]
        pointwise = ["rewards=[{name: tiny_score, weight: 1.0, kwargs: {scale: 0.01, noise: 0.002}}, {name: colour_fraction, weight: 0.0}]"]
        judge = ("rewards=[{name: win_rate, weight: 1.0, kwargs: {prefer: 'grpokit.diffusion.flow.rewards:image_judge', "
                 "tie_margin: 0.05, noise: 0.002}}, {name: colour_fraction, weight: 0.0}]")
        for name, extra in (("pointwise", pointwise), ("win_rate", [judge])):
            r = run("pref_grpo_image", out / f"pref_{name}_{seed}", fixed + extra)
            rows[name].append({**summary(r["steps"]), "before": r["before"], "after": r["after"]})
            s = rows[name][-1]
            print(f"| {name} seed {seed} | mean abs adv {s['adv_abs_mean']:.3f} | steps with mean abs adv > 0.5: {s['big_adv_frac']:.2f} | "
                  f"train colour step-to-step change {s['train_jump_mean']:.3f} | held-out {s['before']:.3f} -> {s['after']:.3f} |")
    mean = lambda name, key: statistics.fmean(x[key] for x in rows[name])  # noqa: E731
    print(f"probe_pointwise_tied={probe['pointwise_abs_adv_tied']:.3f} probe_winrate_tied={probe['win_rate_abs_adv_tied']:.3f} "
          f"flow_before={flow['before']:.3f} flow_after={flow['after']:.3f} flow_minutes={flow['minutes']:.1f} "
          f"pointwise_adv={mean('pointwise', 'adv_abs_mean'):.3f} winrate_adv={mean('win_rate', 'adv_abs_mean'):.3f} "
          f"pointwise_after={mean('pointwise', 'after'):.3f} winrate_after={mean('win_rate', 'after'):.3f} "
          f"pointwise_jump={mean('pointwise', 'train_jump_mean'):.3f} winrate_jump={mean('win_rate', 'train_jump_mean'):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
