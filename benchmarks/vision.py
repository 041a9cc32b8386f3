#!/usr/bin/env python
"""Vision-language policies, measured: GRPO, PAPO and DeepVideo-R1 on the tiny Qwen2-VL.

    python benchmarks/vision.py                    # all three studies (about an hour on 2 cores)
    python benchmarks/vision.py --only grpo        # GRPO on the image task, 10 training minutes
    python benchmarks/vision.py --dry-run          # a random tiny Qwen2-VL, seconds: the same code path

* ``grpo``: the ``vision_grpo`` preset (colour / count / shape questions about 56 px images),
  ``--grpo-minutes`` of training, held-out greedy accuracy before and after;
* ``papo``: PAPO ("Perception-Aware Policy Optimization for Multimodal Reasoning", arXiv
  2507.06448) against GRPO on the same image task, ``--seeds`` seeds each, ``--papo-minutes`` per
  run; the table goes to ``docs/efficacy.md`` (between its kept markers) whatever it shows;
* ``video``: ``deepvideo_r1`` (Reg-GRPO + difficulty-aware augmentation, arXiv 2506.07464) and
  plain GRPO on the 4-frame clips, ``--video-minutes`` each.

Every run starts from the embedded ``tiny-qwen2vl`` (noisy prior, built on first use). The last
stdout line is ``grpo_before=… grpo_after=… papo_mean=… grpo_mean=… video_before=… video_after=…``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def train(preset: str, out: Path, sets: list[str]) -> dict[str, float]:
    """One ``grpokit train`` run; returns held-out accuracy before / after and the training minutes."""
    from grpokit.cli import main

    args = ["train", "--preset", preset, "--set", f"logging.output_dir={out}"]
    for kv in sets:
        args += ["--set", kv]
    if main(args) != 0:
        raise SystemExit(f"grpokit {' '.join(args)} failed")
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines() if x.strip()]
    held = [e for e in evals if e.get("split") == "heldout" and "accuracy" in e]
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    minutes = metrics[-1]["time/elapsed_s"] / 60 if metrics else 0.0
    return {"before": held[0]["accuracy"], "after": held[-1]["accuracy"], "minutes": minutes, "steps": len(metrics)}


def mean_sd(xs: list[float]) -> str:
    return f"{100 * statistics.mean(xs):.1f} ± {100 * (statistics.stdev(xs) if len(xs) > 1 else 0.0):.1f}"


def efficacy_block(rows: dict[str, list[dict]], minutes: float, seeds: int) -> list[str]:
    """The PAPO-vs-GRPO section of docs/efficacy.md."""
    from _efficacy_report import KEPT_END, KEPT_START

    lines = [KEPT_START, "## Vision: PAPO against GRPO on the tiny Qwen2-VL (`benchmarks/vision.py --only papo`)", "",
             f"The `vision_qa` task (colour / count / shape of shapes in 56 px images: every answer depends on the image), "
             f"the embedded `tiny-qwen2vl` (noisy prior), {minutes:g} training minutes per run, {seeds} seeds, "
             "held-out greedy accuracy on 200 images.", "",
             "| method | held-out before | held-out after (mean ± sd) | per seed | steps |", "|---|---|---|---|---|"]
    for name, runs in rows.items():
        per = ", ".join(f"{100 * r['after']:.1f}" for r in runs)
        lines.append(f"| {name} | {100 * runs[0]['before']:.1f} | {mean_sd([r['after'] for r in runs])} | {per} | "
                     f"{statistics.mean(r['steps'] for r in runs):.0f} |")
    papo = [r["after"] for r in rows["papo"]]
    grpo = [r["after"] for r in rows["grpo"]]
    diff = statistics.mean(papo) - statistics.mean(grpo)
    se = (statistics.variance(papo) / len(papo) + statistics.variance(grpo) / len(grpo)) ** 0.5 if len(papo) > 1 else 0.0
    verdict = "beyond" if se and abs(diff) > 2 * se else "within"
    lines += ["", f"PAPO − GRPO = {100 * diff:+.1f} pp, {verdict} two standard errors ({100 * 2 * se:.1f} pp): "
              f"PAPO's claim (a better-perceiving policy at equal budget) is {'shown' if verdict == 'beyond' and diff > 0 else 'not shown'} here.",
              KEPT_END, ""]
    return lines


def write_efficacy(block: list[str], path: Path) -> None:
    from _efficacy_report import KEPT_END, KEPT_START

    text = path.read_text() if path.exists() else ""
    if KEPT_START in text:
        text = text[: text.index(KEPT_START)] + text[text.index(KEPT_END) + len(KEPT_END) :].lstrip("\n")
    path.write_text(text.rstrip("\n") + "\n\n" + "\n".join(block))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=["grpo", "papo", "video"], action="append")
    p.add_argument("--grpo-minutes", type=float, default=10.0)
    p.add_argument("--papo-minutes", type=float, default=3.0)
    p.add_argument("--video-minutes", type=float, default=5.0)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", default=None)
    p.add_argument("--efficacy", default=str(ROOT / "docs" / "efficacy.md"))
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="vision-"))
    studies = a.only or ["grpo", "papo", "video"]
    common = ["logging.progress=false"]
    if a.dry_run:
        from grpokit.vision.tiny_qwen2vl import save_tiny_qwen2vl

        common += [f"model.name={save_tiny_qwen2vl(out / 'tiny')}", "data.n_train=8", "data.n_heldout=4",
                   "rollout.prompts_per_step=2", "rollout.group_size=2", "train.steps=1"]
        a.grpo_minutes = a.papo_minutes = a.video_minutes = 0.0
        a.seeds = min(a.seeds, 2)
        a.efficacy = str(out / "efficacy.md")
    budget = lambda m: [f"train.max_minutes={m}"] if m else ["train.max_minutes=0"]  # noqa: E731
    summary: dict[str, float] = {}
    if "grpo" in studies:
        r = train("vision_grpo", out / "grpo", common + budget(a.grpo_minutes))
        print(f"| GRPO, image task | {100 * r['before']:.1f} | {100 * r['after']:.1f} | {r['minutes']:.1f} | {r['steps']} |")
        summary.update(grpo_before=r["before"], grpo_after=r["after"])
    if "papo" in studies:
        rows = {name: [train(name if name == "papo" else "vision_grpo", out / f"{name}_s{s}",
                             common + budget(a.papo_minutes) + [f"train.seed={s}"]) for s in range(a.seeds)]
                for name in ("papo", "grpo")}
        block = efficacy_block(rows, a.papo_minutes, a.seeds)
        write_efficacy(block, Path(a.efficacy))
        print("\n".join(block))
        summary.update(papo_mean=statistics.mean(r["after"] for r in rows["papo"]),
                       grpo_mean=statistics.mean(r["after"] for r in rows["grpo"]))
    if "video" in studies:
        for preset in ("deepvideo_r1", "vision_grpo"):
            extra = [] if preset == "deepvideo_r1" else ["data.task=video_qa", "data.task_options={kinds: [motion, first], frames: 4}"]
            r = train(preset, out / f"video_{preset}", common + budget(a.video_minutes) + extra)
            print(f"| {preset}, video task | {100 * r['before']:.1f} | {100 * r['after']:.1f} | {r['minutes']:.1f} | {r['steps']} |")
            if preset == "deepvideo_r1":
                summary.update(video_before=r["before"], video_after=r["after"])
    print(" ".join(f"{k}={v:.3f}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
