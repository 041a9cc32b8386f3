#!/usr/bin/env python
"""Seconds per GRPO step: grpokit vs TRL's ``GRPOTrainer`` on one identical config.

    python benchmarks/step_vs_trl.py                       # all four configs, 1 warm-up + 3 timed steps
    python benchmarks/step_vs_trl.py --configs full-b0 --steps 2 --warmup 1
    python benchmarks/step_vs_trl.py --eos-stops          # let completions end at EOS (work then differs)

Same work on both sides: by default every completion is exactly ``--max-new-tokens`` long
(EOS is banned before the cap: grpokit ``rollout.min_new_tokens``, TRL
``generation_kwargs.min_new_tokens``), so both sides sample, score and learn on the same number
of tokens; without it the two sides' sampled lengths differ from step to step and the
comparison measures luck as much as speed. Micro-batching is each side's own memory/speed knob
(grpokit: ``--micro-batch``, default 16, with activation checkpointing unless ``--no-checkpointing``;
TRL: ``per_device_train_batch_size`` = ``--trl-micro-batch``, default 16 with its default gradient
checkpointing); it does not change the work or the update. grpokit leaves rows whose advantage is
0 out of its learner (the update is provably the same; TRL computes them): the share is logged per
step.

Needs the ``bench`` extra (``pip install -e '.[bench]'``, i.e. ``trl``). Each (library, config)
pair runs in its own child process, so the peak RSS reported (``ru_maxrss``) belongs to that run
alone; the child reports JSON back to this parent, which prints a Markdown table on stdout
(progress goes to stderr). The last stdout line is machine-readable::

    speedup=<TRL s/step / grpokit s/step> memory_ratio=<grpokit peak RSS / TRL peak RSS>

(with several configs: the geometric mean of the per-config ratios).

FLOP utilisation = (the step's model FLOPs / step seconds) / (fp32 matmul rate measured here).
Model FLOPs, with N = parameter count of the base model and token counts per step summed over
the 32 sequences (prompt + completion; padding not counted, attention FLOPs ignored):
generation 2·N per token (prefill + sampled tokens), learner 6·N per token (forward+backward;
also used for LoRA, where it overstates: no weight gradients of the frozen base), 2·N per token
for each no-grad forward (the reference model when beta > 0). TRL's gradient-checkpointing
recomputation is not counted as useful work.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

CONFIGS = {
    "full-b0": {"lora": False, "beta": 0.0},
    "full-b0.04": {"lora": False, "beta": 0.04},
    "lora-b0": {"lora": True, "beta": 0.0},
    "lora-b0.04": {"lora": True, "beta": 0.04},
}
PROMPTS_PER_STEP = 4
GROUP_SIZE = 8
MICRO_BATCH = 16  # grpokit's train.micro_batch_size (as TRL's and the demo's); 2 trades speed for memory
TRL_MICRO_BATCH = 16  # TRL's per_device_train_batch_size (gradient accumulation makes up the 32)
MODEL = "smollm2-135m-instruct"
RESULT_TAG = "BENCH_RESULT_JSON:"

log = logging.getLogger("step_vs_trl")


# ---------------------------------------------------------------------------- shared helpers
def _grpokit_config(spec: dict, steps: int, max_new_tokens: int, output_dir: str, micro_batch: int = MICRO_BATCH,
                    fixed_length: bool = True, checkpointing: bool = False):
    from grpokit.config import load_config

    overrides = [
        f"model.name={MODEL}",
        f"rollout.max_new_tokens={max_new_tokens}",
        f"rollout.prompts_per_step={PROMPTS_PER_STEP}",
        f"rollout.group_size={GROUP_SIZE}",
        f"train.micro_batch_size={micro_batch}",
        f"rollout.min_new_tokens={max_new_tokens if fixed_length else 0}",
        f"train.activation_checkpointing={'true' if checkpointing else 'false'}",
        f"train.steps={steps}",
        "train.max_minutes=0",
        "eval.before=false",
        "eval.after=false",
        "logging.progress=false",
        "logging.checkpoint_every=0",
        "logging.log_samples_every=0",
        f"algorithm.beta={spec['beta']}",
        f"model.lora.enabled={'true' if spec['lora'] else 'false'}",
        f"logging.output_dir={output_dir}",
    ]
    return load_config(preset="demo", overrides=overrides)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _prompt_stats(cfg) -> dict[str, float]:
    """Parameter count of the base model and mean prompt length (tokens) of the training split."""
    from grpokit.model.loading import load_model
    from grpokit.trainer import setup

    model, tok = load_model(cfg.model.name, dtype=cfg.model.dtype)
    n_params = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    rows = setup.build_splits(cfg.data).train
    texts = setup.render_all(tok, rows, cfg.data.system_prompt)
    lens = [len(tok(t, add_special_tokens=False).input_ids) for t in texts]
    return {"n_params": float(n_params), "prompt_tokens_mean": statistics.fmean(lens)}


def _finish(result: dict) -> None:
    from grpokit.mkl_amd import active

    result["peak_rss_mib"] = _peak_rss_mib()
    result["mkl_amd"] = active()
    print(RESULT_TAG + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------- grpokit child
def child_grpokit(name: str, warmup: int, steps: int, max_new_tokens: int, a: argparse.Namespace) -> None:
    from grpokit.trainer.loop import Trainer

    spec = CONFIGS[name]
    with tempfile.TemporaryDirectory(prefix="bench-grpokit-") as tmp:
        cfg = _grpokit_config(spec, warmup + steps, max_new_tokens, tmp, a.micro_batch, not a.eos_stops, a.checkpointing)
        t0 = time.perf_counter()
        trainer = Trainer(cfg)
        setup_s = time.perf_counter() - t0
        records = []
        for i in range(warmup + steps):
            t = time.perf_counter()
            m = trainer.train_step()
            wall = time.perf_counter() - t
            rec = {
                "step_s": wall,
                "gen_s": m["time/generation_s"],
                "learn_s": m["time/learn_s"],
                "completion_len": m["completion_len/mean"],
                "completion_max": m["completion_len/max"],
                "warmup": i < warmup,
                # rows left out of the learner because their advantage is 0 (identical update; TRL computes them)
                "skipped_rows": m.get("learn/skipped_rows", 0.0),
            }
            records.append(rec)
            log.info("grpokit %s step %d/%d%s: %.1fs (gen %.1fs, learn %.1fs, len %.1f, zero-advantage rows skipped %.0f%%)",
                     name, i + 1, warmup + steps, " [warm-up]" if rec["warmup"] else "", wall, rec["gen_s"], rec["learn_s"],
                     rec["completion_len"], 100 * rec["skipped_rows"])
        trainer.logger.close()
    _finish({"side": "grpokit", "config": name, "setup_s": setup_s, "steps": records, "split": "grpokit metrics"})


# ---------------------------------------------------------------------------- TRL child
def child_trl(name: str, warmup: int, steps: int, max_new_tokens: int, a: argparse.Namespace) -> None:
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from _trl_side import grpo_config_kwargs, trl_dataset, trl_reward_funcs
    from grpokit.model.loading import load_model
    from grpokit.trainer import setup

    spec = CONFIGS[name]
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        gcfg = _grpokit_config(spec, warmup + steps, max_new_tokens, tmp)
        rows = setup.build_splits(gcfg.data).train
        dataset = trl_dataset(rows, gcfg.data.system_prompt)  # conversational prompts, as TRL users write them
        # grpokit's own answer_match, called through TRL's reward convention
        reward_funcs, reward_weights = trl_reward_funcs(setup.build_rewards(gcfg.rewards), [k for k in rows[0] if k != "prompt"])
        lora = gcfg.model.lora
        args = GRPOConfig(
            output_dir=tmp,
            use_cpu=True,
            bf16=False,
            fp16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            max_steps=warmup + steps,
            # one optimizer step = 4 prompts x 8 completions = 32 sequences, learned in micro-batches of 16
            per_device_train_batch_size=a.trl_micro_batch,
            gradient_accumulation_steps=PROMPTS_PER_STEP * GROUP_SIZE // a.trl_micro_batch,
            steps_per_generation=PROMPTS_PER_STEP * GROUP_SIZE // a.trl_micro_batch,
            generation_kwargs=None if a.eos_stops else {"min_new_tokens": max_new_tokens},
            reward_weights=reward_weights,
            # sampling, AdamW, constant lr, clip, beta, loss_type="grpo" (= seq_mean_token_mean), group scaling
            **grpo_config_kwargs(gcfg),
            # gradient_checkpointing: left at TRL's default (True)
        )
        model, tokenizer = load_model(MODEL, dtype=gcfg.model.dtype)
        peft_config = None
        if spec["lora"]:
            import peft

            peft_config = peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                          target_modules=list(lora.target_modules), task_type="CAUSAL_LM")

        records: list[dict[str, Any]] = []
        cur: dict[str, Any] = {}

        class Timer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                cur.clear()
                cur.update(gen_s=0.0, t0=time.perf_counter())

            def on_step_end(self, args, state, control, **kw):
                wall = time.perf_counter() - cur["t0"]
                rec = {"step_s": wall, "gen_s": cur["gen_s"], "learn_s": wall - cur["gen_s"],
                       "warmup": len(records) < warmup}
                records.append(rec)

            def on_log(self, args, state, control, logs=None, **kw):
                if records and logs and "completions/mean_length" in logs:
                    rec = records[-1]
                    rec["completion_len"] = float(logs["completions/mean_length"])
                    rec["completion_max"] = float(logs.get("completions/max_length", float("nan")))
                    rec["trl_step_time"] = logs.get("step_time")
                    log.info("TRL %s step %d/%d%s: %.1fs (gen+reward %.1fs, rest %.1fs, len %.1f)", name, len(records),
                             warmup + steps, " [warm-up]" if rec["warmup"] else "", rec["step_s"], rec["gen_s"],
                             rec["learn_s"], rec["completion_len"])

        t0 = time.perf_counter()
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[Timer()],
        )
        setup_s = time.perf_counter() - t0

        # TRL keeps its own phase timings (profiling_context) only for wandb/mlflow/trackio, so the
        # generation/learning split is measured by timing-only wrappers of two of its (private)
        # methods: sampling (_generate) and reward scoring (_calculate_rewards) = grpokit's
        # "generation" phase (collect_batch). Everything else in the step counts as learning.
        split = "wrapped TRL _generate + _calculate_rewards"
        for attr in ("_generate", "_calculate_rewards"):
            inner = getattr(trainer, attr, None)
            if inner is None:
                split = "total only (TRL method %s not found)" % attr
                continue

            def timed(*a, _inner=inner, **kw):
                t = time.perf_counter()
                try:
                    return _inner(*a, **kw)
                finally:
                    if "gen_s" in cur:
                        cur["gen_s"] += time.perf_counter() - t

            setattr(trainer, attr, timed)
        trainer.train()
        if split.startswith("total only"):
            for rec in records:
                rec["gen_s"] = rec["learn_s"] = float("nan")
    _finish({"side": "trl", "config": name, "setup_s": setup_s, "steps": records, "split": split})


# ---------------------------------------------------------------------------- parent
def matmul_gflops(n: int = 2048, reps: int = 10) -> float:
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def _mkl_amd_env(env: dict, on: bool) -> dict:
    """``env`` with grpokit's MKL-on-AMD shim preloaded (as ``grpokit train`` does) when ``on`` and it applies here."""
    from grpokit import mkl_amd

    env = {k: v for k, v in env.items() if k != mkl_amd.ENV_DONE}
    if not on or not mkl_amd.is_amd_cpu():  # also off when this process was itself started with the shim
        kept = [x for x in env.get("LD_PRELOAD", "").replace(":", " ").split() if "libgrpokit_mkl_amd" not in x]
        env["LD_PRELOAD"] = " ".join(kept)
        return env
    lib = mkl_amd.shim_path()
    return mkl_amd.preload_env(env, lib) if lib is not None else env


def shimmed_matmul_gflops() -> float:
    """The fp32 matmul rate in a child process with the MKL-on-AMD shim (nan where it does not apply)."""
    env = _mkl_amd_env(dict(os.environ), True)
    if env.get("LD_PRELOAD", "") == os.environ.get("LD_PRELOAD", ""):
        return float("nan")
    code = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); " \
           "from step_vs_trl import matmul_gflops; print(matmul_gflops())"
    out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    return float(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else float("nan")


def run_child(side: str, name: str, a: argparse.Namespace) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", side, "--configs", name, "--steps", str(a.steps),
           "--warmup", str(a.warmup), "--max-new-tokens", str(a.max_new_tokens), "--micro-batch", str(a.micro_batch),
           "--trl-micro-batch", str(a.trl_micro_batch)] + (["--eos-stops"] if a.eos_stops else []) + \
        (["--checkpointing"] if a.checkpointing else ["--no-checkpointing"])
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env = _mkl_amd_env(env, a.mkl_amd == "both" or (a.mkl_amd == "grpokit" and side == "grpokit"))
    log.info("running %s %s ...", side, name)
    t = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)  # stderr passes through
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{side} {name} failed (exit {proc.returncode}); stdout tail:\n{proc.stdout[-2000:]}")
    res = json.loads(lines[-1][len(RESULT_TAG):])
    log.info("%s %s done in %.0fs (peak RSS %.0f MiB, MKL-on-AMD shim %s)", side, name, time.perf_counter() - t,
             res["peak_rss_mib"], "on" if res.get("mkl_amd") else "off")
    return res


def summarise(res: dict, stats: dict, rate_gflops: float, beta: float) -> dict:
    timed = [r for r in res["steps"] if not r["warmup"]]
    mean = lambda k: statistics.fmean(r[k] for r in timed)  # noqa: E731
    n_seq = PROMPTS_PER_STEP * GROUP_SIZE
    comp = mean("completion_len") if all("completion_len" in r for r in timed) else float("nan")
    gen_tokens = comp * n_seq
    seq_tokens = (stats["prompt_tokens_mean"] + comp) * n_seq
    n = stats["n_params"]
    flops = 2 * n * seq_tokens + 6 * n * seq_tokens + (2 * n * seq_tokens if beta > 0 else 0.0)
    step_s = mean("step_s")
    return {
        "step_s": step_s,
        "step_s_min": min(r["step_s"] for r in timed),
        "gen_s": mean("gen_s"),
        "learn_s": mean("learn_s"),
        "completion_len": comp,
        "completion_max": statistics.fmean(r.get("completion_max", float("nan")) for r in timed),
        "tok_s": gen_tokens / step_s,
        "gen_tok_s": gen_tokens / mean("gen_s") if mean("gen_s") > 0 else float("nan"),
        "rss": res["peak_rss_mib"],
        "flop_util": flops / step_s / (rate_gflops * 1e9),
        "split": res["split"],
        "n_timed": len(timed),
    }


def floor_line(name: str, g: dict, t: dict | None, stats: dict, rate_gflops: float, beta: float, checkpointing: bool,
               lora: bool = False) -> str:
    """The fewest seconds the step's exact fp32 work can take here: its matmul FLOPs at the measured matmul rate.

    Generation 2·N per prompt and sampled token; learner 6·N per token (8·N when activation
    checkpointing recomputes the forward; 2·N less with LoRA, whose frozen base weights get no
    weight gradient), + 2·N per token for the reference when beta > 0.
    Element-wise work, attention and memory traffic are free in this bound, so no real step
    reaches it; TRL's s/step over it is the largest speedup any implementation doing the same
    fp32 work could show on this machine.
    """
    n, p, c = stats["n_params"], stats["prompt_tokens_mean"], g["completion_len"]
    seqs = PROMPTS_PER_STEP * GROUP_SIZE
    gen = 2 * n * (PROMPTS_PER_STEP * p + seqs * c)  # prefill once per prompt + one forward per sampled token
    per_token = (8 if checkpointing else 6) - (2 if lora else 0)
    tokens = PROMPTS_PER_STEP * p + seqs * c  # each prompt once per group, every completion token
    learn = per_token * n * tokens + (2 * n * tokens if beta > 0 else 0.0)
    gen_s, learn_s = gen / (rate_gflops * 1e9), learn / (rate_gflops * 1e9)
    line = (f"{name} floor (exact fp32 work at {rate_gflops:.1f} GFLOP/s, prompts encoded once per group, "
            f"learner {per_token}·N per token): generation {gen_s:.1f} s + learning {learn_s:.1f} s "
            f"= {gen_s + learn_s:.1f} s/step; grpokit reaches {(gen_s + learn_s) / g['step_s']:.0%} of it")
    if t is not None:
        line += f"; TRL's {t['step_s']:.1f} s allows at most speedup {t['step_s'] / (gen_s + learn_s):.2f}"
    return line


def fmt(x: float, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3, help="timed steps per run (after warm-up)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up steps per run")
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma list of " + ",".join(CONFIGS))
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--skip-trl", action="store_true", help="time grpokit only")
    p.add_argument("--micro-batch", type=int, default=MICRO_BATCH, help="grpokit train.micro_batch_size")
    p.add_argument("--trl-micro-batch", type=int, default=TRL_MICRO_BATCH, help="TRL per_device_train_batch_size (divides 32)")
    p.add_argument("--eos-stops", action="store_true", help="completions may end at EOS (default: exactly --max-new-tokens)")
    p.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=True,
                   help="grpokit train.activation_checkpointing (default on, as TRL's gradient checkpointing; --no-checkpointing: faster, more memory)")
    p.add_argument("--mkl-amd", choices=["both", "grpokit", "none"], default="both",
                   help="who runs with grpokit's MKL-on-AMD shim (MKL's AVX2 GEMMs on AMD CPUs; `grpokit train` "
                        "enables it itself): both (default: the same BLAS on both sides), grpokit (each library as it "
                        "ships: TRL with stock MKL), none")
    p.add_argument("--_child", choices=["grpokit", "trl"], help=argparse.SUPPRESS)
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    names = [c.strip() for c in a.configs.split(",") if c.strip()]
    bad = [c for c in names if c not in CONFIGS]
    if bad:
        p.error(f"unknown config(s) {bad}; choose from {list(CONFIGS)}")
    if a._child:
        (child_grpokit if a._child == "grpokit" else child_trl)(names[0], a.warmup, a.steps, a.max_new_tokens, a)
        return
    if a.steps < 1:
        p.error("--steps must be >= 1")

    import torch

    stock_rate = matmul_gflops()
    shim_rate = shimmed_matmul_gflops()
    rate = max(stock_rate, shim_rate) if not math.isnan(shim_rate) else stock_rate  # the machine's best: utilisation's denominator
    log.info("fp32 matmul (2048^3): %.1f GFLOP/s on %d torch threads (%s GFLOP/s with the MKL-on-AMD shim)",
             stock_rate, torch.get_num_threads(), fmt(shim_rate))
    with tempfile.TemporaryDirectory() as tmp:
        stats = _prompt_stats(_grpokit_config(CONFIGS[names[0]], 1, a.max_new_tokens, tmp))
    log.info("N = %.1fM parameters; mean prompt length %.1f tokens", stats["n_params"] / 1e6, stats["prompt_tokens_mean"])

    rows, speedups, mem_ratios = [], [], []
    for name in names:
        beta = CONFIGS[name]["beta"]
        g = summarise(run_child("grpokit", name, a), stats, rate, beta)
        t = None if a.skip_trl else summarise(run_child("trl", name, a), stats, rate, beta)
        rows.append((name, g, t))
        if t is not None:
            speedups.append(t["step_s"] / g["step_s"])
            mem_ratios.append(g["rss"] / t["rss"])

    cols = ["config", "side", "s/step", "min s/step", "gen s", "learn s", "peak RSS MiB", "compl. len", "max len",
            "tok/s (step)", "tok/s (gen)", "FLOP util"]
    out = [f"| {' | '.join(cols)} |", "|" + "---|" * len(cols)]
    for name, g, t in rows:
        for side, r in (("grpokit", g), ("TRL", t)):
            if r is None:
                continue
            out.append("| " + " | ".join([
                name, side, fmt(r["step_s"]), fmt(r["step_s_min"]), fmt(r["gen_s"]), fmt(r["learn_s"]),
                fmt(r["rss"], 0), fmt(r["completion_len"]), fmt(r["completion_max"]), fmt(r["tok_s"]), fmt(r["gen_tok_s"]),
                f"{100 * r['flop_util']:.1f}%" if not math.isnan(r["flop_util"]) else "n/a",
            ]) + " |")
        if t is not None:
            ratio = lambda k: g[k] / t[k] if t[k] else float("nan")  # noqa: E731
            out.append("| " + " | ".join([
                name, "grpokit/TRL", fmt(ratio("step_s"), 2), fmt(ratio("step_s_min"), 2), fmt(ratio("gen_s"), 2),
                fmt(ratio("learn_s"), 2), fmt(ratio("rss"), 2), fmt(ratio("completion_len"), 2), fmt(ratio("completion_max"), 2), fmt(ratio("tok_s"), 2),
                fmt(ratio("gen_tok_s"), 2), fmt(ratio("flop_util"), 2),
            ]) + " |")
    print()
    print("\n".join(out))
    print()
    print(f"fp32 matmul rate: {stock_rate:.1f} GFLOP/s stock MKL, {fmt(shim_rate)} with the MKL-on-AMD shim "
          f"(2048^3, {torch.get_num_threads()} threads; FLOP util is against {rate:.1f}); MKL-on-AMD shim for: {a.mkl_amd}; "
          f"N = {stats['n_params']:.0f}; "
          f"mean prompt {stats['prompt_tokens_mean']:.1f} tokens; {PROMPTS_PER_STEP} prompts x {GROUP_SIZE} completions, "
          f"max {a.max_new_tokens} new tokens ({'EOS allowed' if a.eos_stops else 'every completion exactly that long'}); "
          f"micro-batch grpokit {a.micro_batch} / TRL {a.trl_micro_batch}; activation checkpointing grpokit "
          f"{'on' if a.checkpointing else 'off'} / TRL on; {a.warmup} warm-up + {a.steps} timed steps per run")
    if rows and rows[0][2] is not None:
        print(f"TRL generation/learning split: {rows[0][2]['split']}")
    for name, g, t in rows:
        print(floor_line(name, g, t, stats, rate, CONFIGS[name]["beta"], a.checkpointing, CONFIGS[name]["lora"]))
    geo = lambda xs: math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")  # noqa: E731
    print(f"speedup={geo(speedups):.3f} memory_ratio={geo(mem_ratios):.3f}")


if __name__ == "__main__":
    main()
