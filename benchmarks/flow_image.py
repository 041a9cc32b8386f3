"""Flow-GRPO on the tiny flow-matching image model, and Pref-GRPO's claim in miniature.

1. ``flow_grpo``: held-out mean ``colour_fraction`` (fixed held-out conditions and noise seeds,
   the ODE with ``flow.eval_steps``) before and after ``--minutes`` of training.
2. Pref-GRPO miniature (arXiv 2508.20751): the same policy trained for ``--pref-steps`` steps under
   one reward model read two ways. Its hidden score is colour_fraction + ``--bias`` · brightness
   (mean pixel): a systematic preference for brighter images, the over-saturation hack the paper
   reports for pointwise rewards. (a) ``pointwise``: ``tiny_score`` = 0.5 + 0.01 · hidden score
   (tiny differences), group-normalised; (b) ``win_rate``: the pairwise ``image_judge`` on the
   same hidden score with a tie margin (``--tie-margin``), as Pref-GRPO's win rate; with
   ``--control``, (c) ``unbiased``: the pointwise score without the bias (the true objective).
   Per run: held-out colour fraction (the true quality), brightness and lit-pixel fraction
   before and after (the hack), the training curves' first-10% and last-25% means, mean
   |advantage| and the share of zero-variance groups late in training. Before training, a probe
   batch of the initial policy is rewarded both ways: the advantage gap |A_i − A_j| of pairs
   whose colour fractions differ by less than 0.02 (images a judge calls equal) shows how much
   group normalisation amplifies differences that are not quality.

    .venv/bin/python benchmarks/flow_image.py --minutes 6                                   # flow_grpo + the miniature
    .venv/bin/python benchmarks/flow_image.py --minutes 0 --pref-steps 200 --seeds 2 --control   # the miniature alone
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


def heldout_stats(trainer) -> dict:
    """Of the held-out rows' ODE images (each row's fixed noise seed): mean colour_fraction, brightness (mean pixel) and lit fraction."""
    from grpokit.families.flow_matching.rewards import colour_fraction

    rows = trainer.splits.heldout
    batch = trainer.policy.sample([r["prompt"] for r in rows], rows, 1, SamplingParams(greedy=True))
    return {"cf": statistics.fmean(colour_fraction(batch.prompts, batch.completions, colour=[r["colour"] for r in rows])),
            "bright": statistics.fmean(float(c.pixels.mean()) for c in batch.completions),
            "lit": statistics.fmean(float((c.pixels.max(-1) > 0.3).mean()) for c in batch.completions)}


def run(preset: str, out: Path, overrides: list[str]) -> dict:
    from grpokit.trainer.loop import Trainer

    cfg = load_config(preset=preset, overrides=[f"logging.output_dir={out}", "logging.progress=false", "eval.before=false",
                                                "eval.after=false", "logging.checkpoint_every=0", *overrides])
    trainer = Trainer(cfg)
    before = heldout_stats(trainer)
    t0 = time.perf_counter()
    result = trainer.train()
    minutes = (time.perf_counter() - t0) / 60
    after = heldout_stats(trainer)
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"reward' in line]
    return {"before": before["cf"], "after": after["cf"], "held_before": before, "held_after": after, "minutes": result["train_minutes"],
            "wall_minutes": minutes, "steps": steps}


def reward_specs(bias: float, noise: float, margin: float) -> dict[str, str]:
    """The ``rewards=`` overrides of the miniature: the same hidden score read pointwise or pairwise, and the control
    ``unbiased`` (the pointwise score without bias or noise: group-normalised colour fraction)."""
    hidden = f"brightness: {bias}, noise: {noise}"
    return {"pointwise": f"rewards=[{{name: tiny_score, weight: 1.0, kwargs: {{scale: 0.01, {hidden}}}}}, {{name: colour_fraction, weight: 0.0}}]",
            "unbiased": ("rewards=[{name: tiny_score, weight: 1.0, kwargs: {scale: 0.01, brightness: 0.0, noise: 0.0}}, "
                         "{name: colour_fraction, weight: 0.0}]"),
            "win_rate": (f"rewards=[{{name: win_rate, weight: 1.0, kwargs: {{prefer: 'grpokit.families.flow_matching.rewards:image_judge', "
                         f"tie_margin: {margin}, {hidden}}}}}, {{name: colour_fraction, weight: 0.0}}]")}


def advantage_probe(policy, rows: list[dict], bias: float, noise: float, margin: float, group: int = 8) -> dict:
    """One batch of the policy, rewarded both ways: mean |A|, and the advantage gap |A_i − A_j| of near-equal pairs (|Δ colour fraction| < 0.02).

    A = (r − group mean) / (unbiased std + 1e-8), the authors' normalisation, for r = tiny_score
    (pointwise) and r = the image judge's win rate (tie margin ``margin``), on the same images and
    the same hidden score (colour fraction + ``bias`` · brightness + noise).
    """
    from grpokit.families.flow_matching.rewards import colour_fraction, tiny_score
    from grpokit.rewards import resolve_reward

    batch = policy.sample([r["prompt"] for r in rows], rows, group, SamplingParams())
    colours = [r["colour"] for r in batch.rows]
    gids = batch.group_ids.tolist()
    cf = torch.tensor(colour_fraction(batch.prompts, batch.completions, colour=colours)).view(-1, group)
    point = torch.tensor(tiny_score(batch.prompts, batch.completions, colour=colours, scale=0.01, noise=noise, brightness=bias)).view(-1, group)
    win = torch.tensor(resolve_reward("win_rate")(batch.prompts, batch.completions, group_ids=gids, colour=colours, noise=noise, brightness=bias,
                                                  prefer="grpokit.families.flow_matching.rewards:image_judge", tie_margin=margin)).view(-1, group)
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


def window(steps: list[dict], key: str, lo: float, hi: float) -> float:
    """Mean of ``key`` over the logged steps in the fraction [lo, hi) of the run."""
    n = len(steps)
    part = [s[key] for s in steps[int(lo * n):max(int(hi * n), int(lo * n) + 1)] if key in s]
    return statistics.fmean(part) if part else float("nan")


def summary(steps: list[dict]) -> dict:
    """The training curves of a miniature run: first-10% and last-25% means of the keys the table prints."""
    return {"adv_late": window(steps, "adv/abs_mean", 0.75, 1.0),
            "zero_var_late": window(steps, "adv/zero_var_frac", 0.75, 1.0),
            "cf_early": window(steps, "reward/colour_fraction/mean", 0.0, 0.1), "cf_late": window(steps, "reward/colour_fraction/mean", 0.75, 1.0),
            "bright_early": window(steps, "flow/brightness", 0.0, 0.1), "bright_late": window(steps, "flow/brightness", 0.75, 1.0)}


AUTHORS_SAMPLER: list[str] = []  # pref_grpo_image as shipped: same noise per group, shift 3, a random 60% of the steps
FLOW_GRPO_SAMPLER = ["flow.same_noise=false", "flow.shift=1.0", "flow.train_order=first", "flow.train_fraction=0.99"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="a random tiny model and a few steps (seconds)")
    p.add_argument("--out", default="/tmp/flow_image_bench")
    p.add_argument("--minutes", type=float, default=8.0, help="flow_grpo training budget (0: skip the flow_grpo run)")
    p.add_argument("--pref-steps", type=int, default=200, help="steps of each Pref-GRPO miniature run")
    p.add_argument("--seeds", type=int, default=2, help="seeds of the miniature")
    p.add_argument("--bias", type=float, default=1.0, help="the hidden score's brightness weight: the reward model's bias for brighter images")
    p.add_argument("--noise", type=float, default=0.0, help="std of the hidden score's seeded per-image error")
    p.add_argument("--tie-margin", type=float, default=0.05, help="the judge's tie margin on the hidden score")
    p.add_argument("--control", action="store_true", help="a third arm: the pointwise score without bias (the true objective)")
    p.add_argument("--sampler", choices=("flow_grpo", "authors"), default="flow_grpo",
                   help="flow_grpo: independent noise, shift 1, the first 9 of 10 steps; authors: pref_grpo_image as shipped")
    a = p.parse_args(argv)
    out = Path(a.out)
    torch.set_num_threads(1)
    common: list[str] = []
    if a.dry_run:
        from grpokit.families.flow_matching.pretrain import build

        folder = build(out / "tiny-random", steps=0, channels=(8, 16))
        common = [f"model.name={folder}", "data.n_heldout=12", "rollout.prompts_per_step=2", "rollout.group_size=4", "flow.eval_steps=4",
                  "flow.steps=4"]
        a.minutes, a.pref_steps = 0.01, 2
    if a.minutes > 0:
        steps = ["train.steps=3", "train.max_minutes=0"] if a.dry_run else [f"train.max_minutes={a.minutes}"]
        flow = run("flow_grpo", out / "flow_grpo", common + steps)
        print(f"| flow_grpo | held-out colour_fraction {flow['before']:.3f} -> {flow['after']:.3f} | {flow['minutes']:.1f} min, "
              f"{len(flow['steps'])} steps |")
    from grpokit.families.flow_matching.procedural import flow_images
    from grpokit.trainer.loop import Trainer

    sampler = FLOW_GRPO_SAMPLER if a.sampler == "flow_grpo" else AUTHORS_SAMPLER
    probe_cfg = load_config(preset="pref_grpo_image", overrides=[*common, *sampler, f"logging.output_dir={out / 'probe'}"])
    probe = advantage_probe(Trainer(probe_cfg).policy, flow_images(1, 0, 8 if a.dry_run else 48).heldout, a.bias, a.noise, a.tie_margin)
    print(f"| probe (initial policy, groups of 8) | pointwise score range in a group {probe['pointwise_score_range']:.4f} | "
          f"mean abs adv: pointwise {probe['pointwise_abs_adv']:.3f}, win rate {probe['win_rate_abs_adv']:.3f} | advantage gap of near-equal "
          f"pairs ({probe['tied_pairs']:.2f} of pairs): pointwise {probe['pointwise_abs_adv_tied']:.3f}, win rate {probe['win_rate_abs_adv_tied']:.3f} |")
    specs = reward_specs(a.bias, a.noise, a.tie_margin)
    arms = ("pointwise", "win_rate", "unbiased") if a.control else ("pointwise", "win_rate")
    rows: dict[str, list[dict]] = {name: [] for name in arms}
    print("| run | held-out cf before -> after | held-out brightness before -> after | held-out lit fraction before -> after | "
          "training cf first 10% -> last 25% | training brightness first 10% -> last 25% | mean abs A, last 25% | zero-variance groups, last 25% |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in range(a.seeds):
        fixed = common + sampler + [f"train.steps={a.pref_steps}", "train.max_minutes=0", f"train.seed={seed}"]
        for name in arms:
            r = run("pref_grpo_image", out / f"pref_{name}_{seed}", fixed + [specs[name]])
            hb, ha = r["held_before"], r["held_after"]
            rows[name].append({**summary(r["steps"]), "before": hb["cf"], "after": ha["cf"], "bright_before": hb["bright"],
                               "bright_after": ha["bright"], "lit_before": hb["lit"], "lit_after": ha["lit"]})
            s = rows[name][-1]
            print(f"| {name}, seed {seed} | {s['before']:.3f} -> {s['after']:.3f} | {s['bright_before']:.3f} -> {s['bright_after']:.3f} | "
                  f"{s['lit_before']:.3f} -> {s['lit_after']:.3f} | {s['cf_early']:.3f} -> {s['cf_late']:.3f} | "
                  f"{s['bright_early']:.3f} -> {s['bright_late']:.3f} | {s['adv_late']:.3f} | {s['zero_var_late']:.2f} |", flush=True)
    mean = lambda name, key: statistics.fmean(x[key] for x in rows[name])  # noqa: E731
    flow_part = (f"flow_before={flow['before']:.3f} flow_after={flow['after']:.3f} flow_minutes={flow['minutes']:.1f} " if a.minutes > 0 else "")
    print(f"probe_pointwise_tied={probe['pointwise_abs_adv_tied']:.3f} probe_winrate_tied={probe['win_rate_abs_adv_tied']:.3f} {flow_part}"
          f"pointwise_after={mean('pointwise', 'after'):.3f} winrate_after={mean('win_rate', 'after'):.3f} "
          f"pointwise_bright_after={mean('pointwise', 'bright_after'):.3f} winrate_bright_after={mean('win_rate', 'bright_after'):.3f} "
          f"pointwise_adv_late={mean('pointwise', 'adv_late'):.3f} winrate_adv_late={mean('win_rate', 'adv_late'):.3f}"
          + (f" unbiased_after={mean('unbiased', 'after'):.3f} unbiased_bright_after={mean('unbiased', 'bright_after'):.3f}" if a.control else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
