#!/usr/bin/env python
"""GPU check: grpokit's GRPO step vs TRL's ``GRPOTrainer`` on one CUDA GPU, and a learning smoke test.

    bash benchmarks/gpu_check.sh               # on the GPU machine (installs .gpu_bundle/ first)
    bash benchmarks/gpu_check.sh --dry-run     # here: the same code on the CPU, tiny sizes, < 1 min

1. Throughput. The SmolLM2-135M architecture (``.gpu_bundle/smollm2-135m/config.json``) with
   random weights in bfloat16 and its real tokenizer, written once with ``save_pretrained`` to a
   temporary folder that both sides load (grpokit ``model.name=<folder>``, TRL ``model=<folder>``).
   The same step on both sides: 8 arithmetic prompts (the built-in task, chat template applied)
   x G = 8 completions, every completion exactly 128 new tokens (EOS banned before the cap:
   grpokit ``rollout.min_new_tokens``, TRL ``generation_kwargs.min_new_tokens``), temperature 1,
   reward = fraction of a completion's characters that are "e", group-std advantages, PPO-clip
   0.2, per-sequence token-mean aggregation (grpokit ``seq_mean_token_mean`` = TRL
   ``loss_type="grpo"``), beta 0, one fused AdamW step per rollout (lr 1e-6 constant, betas
   0.9/0.99, grad-norm clip 1), learner micro-batches of 16 (TRL: ``per_device_train_batch_size``
   16 x ``gradient_accumulation_steps`` 4 = ``steps_per_generation`` 4), activation / gradient
   checkpointing off on both unless ``--checkpointing``, sdpa attention, no vLLM, and grpokit's
   ``train.skip_zero_advantage`` off (it learns every row, as TRL does). 2 warm-up + 5 timed
   steps per side, each timed between ``torch.cuda.synchronize()`` calls (grpokit:
   ``Trainer.train_step()``; TRL: ``on_step_begin`` -> ``on_step_end`` of a callback). Peak GPU
   memory = ``torch.cuda.max_memory_allocated`` over the timed steps (reset after the warm-up;
   weights, gradients and optimizer state included).
2. Learning. grpokit's tiny random Llama (``grpokit.testing``) on CUDA in bfloat16 learns the
   reward "fraction of characters that are x" for 30 steps; the mean reward of the last 5 steps
   must exceed that of the first 5 by 0.3 (here on the CPU, bf16 and fp32: 0.02 -> 0.99).
3. Sharded learner. The throughput step again with ``distributed.learner=fsdp`` (FSDP2
   ``fully_shard`` over the decoder layers, then the root) under ``torchrun --nproc_per_node 1``:
   NCCL on the GPU (gloo in ``--dry-run``); its s/step and peak memory are a row of the table
   (one rank holds every shard, so its memory is the unsharded state plus FSDP's buffers).
4. The last line is ``gpu_speedup=<TRL s/step / grpokit s/step>`` (3 decimals; ``nan`` when the
   TRL side was skipped or failed, with the reason printed above it).

grpokit (then the learning run) and TRL run in two child processes with a time limit
(``--child-timeout``), so a crash or hang on the GPU still ends in the report and its last line;
the peak memory of the grpokit side is read before its learning run starts.

``--dry-run``: the same code path on the CPU in float32 with the tiny random Llama saved to a
folder for both sides, 2 prompts x G = 2, 8 tokens, 1 warm-up + 1 timed step, and a 3-step
learning run without the "rose" assertion; peak memory is then the child's peak RSS.
Exit status 1 when the grpokit side or its FSDP step fails, the policy is not on the asked device, or (on
the GPU) the reward did not rise; a TRL failure only makes the speedup nan.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

RESULT_TAG = "GPU_CHECK_RESULT:"
LR = 1e-6
LEARN_RISE = 0.3  # last-5 minus first-5 mean reward the 30-step run must exceed (CPU bf16 and fp32 here: 0.02 -> 0.99)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "vocab.json", "merges.txt")

log = logging.getLogger("gpu_check")


@dataclass(frozen=True)
class Sizes:
    """Everything that differs between the GPU run and the CPU dry run."""

    device: str
    dtype: str
    prompts: int  # prompts per step
    group: int  # G
    new_tokens: int  # every completion exactly this long
    micro_batch: int  # learner micro-batch, both sides
    warmup: int
    steps: int  # timed steps
    learn_steps: int
    learn_dtype: str
    learn_prompts: int
    learn_group: int
    learn_tokens: int


GPU = Sizes("cuda", "bfloat16", 8, 8, 128, 16, 2, 5, 30, "bfloat16", 2, 8, 8)
DRY = Sizes("cpu", "float32", 2, 2, 8, 2, 1, 1, 3, "float32", 2, 4, 6)


def letter_fraction(prompts: list, completions: list, letter: str = "e", **columns) -> list[float]:
    """Fraction of each completion's characters that are ``letter``; TRL's conversational completions too."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [t.count(letter) / max(len(t), 1) for t in texts]


# ---------------------------------------------------------------------------- shared helpers
def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def _peak_mib(device: str) -> float:
    """Peak CUDA memory allocated since the last reset; on the CPU the process's peak RSS."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _base_overrides(s: Sizes, out_dir: str, prompts: int, group: int, tokens: int, micro: int, steps: int) -> list[str]:
    return [
        f"logging.output_dir={out_dir}", "logging.progress=false", "logging.log_samples_every=0",
        "logging.checkpoint_every=0", "eval.before=false", "eval.after=false", "data.task=arithmetic",
        "data.n_train=64", "data.n_heldout=8", f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
        f"rollout.max_new_tokens={tokens}", f"train.micro_batch_size={micro}", f"train.steps={steps}",
        "rollout.temperature=1.0", "rollout.top_p=1.0", "rollout.top_k=0", "algorithm.beta=0.0",
        "optim.schedule=constant", "optim.warmup_steps=0", f"model.device={s.device}",
    ]


def grpokit_config(s: Sizes, folder: str, out_dir: str, checkpointing: bool, extra: list[str] = ()):
    """The throughput run's grpokit config: ``folder`` on ``s.device`` in ``s.dtype``, fixed-length completions."""
    from grpokit.config import load_config

    sets = _base_overrides(s, out_dir, s.prompts, s.group, s.new_tokens, s.micro_batch, s.warmup + s.steps) + [
        f"model.name={folder}", f"model.dtype={s.dtype}", f"rollout.min_new_tokens={s.new_tokens}",
        f"optim.lr={LR:.1e}", "optim.betas=[0.9, 0.99]", "optim.max_grad_norm=1.0",  # 1.0e-06: YAML reads 1e-06 as text
        f"train.activation_checkpointing={'true' if checkpointing else 'false'}",
        "train.skip_zero_advantage=false",  # learn every row, as TRL does: the same work whatever the rewards
        f"rewards=[{{name: '{os.path.abspath(__file__)}:letter_fraction', kwargs: {{letter: e}}}}]", *extra,
    ]
    return load_config(overrides=sets)


def write_model_folder(bundle: Path, folder: Path, dtype: str, tiny: bool) -> None:
    """The throughput model: SmolLM2-135M's architecture with random weights (``tiny``: grpokit's tiny Llama)."""
    import torch

    if tiny:
        from grpokit.testing import save_tiny_model

        save_tiny_model(folder, seed=0)
        return
    from transformers import AutoConfig, AutoModelForCausalLM

    source = bundle / "smollm2-135m"
    if not (source / "config.json").is_file():
        raise SystemExit(f"gpu_check: {source}/config.json is missing: run 'bash benchmarks/gpu_bundle.sh' and carry .gpu_bundle")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source)).to(getattr(torch, dtype))
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)


# ---------------------------------------------------------------------------- children
def child_grpokit(s: Sizes, folder: str, out_dir: str, checkpointing: bool) -> dict:
    """Time ``Trainer.train_step()`` on the throughput config."""
    from grpokit.trainer.loop import Trainer

    return _timed_steps(Trainer(grpokit_config(s, folder, out_dir, checkpointing)), s, "grpokit")


def _timed_steps(trainer, s: Sizes, label: str) -> dict:
    """``s.warmup`` untimed then ``s.steps`` timed ``trainer.train_step()`` calls; their records and the peak memory."""
    param = next(trainer.model.parameters())
    records = []
    for i in range(s.warmup + s.steps):
        if i == s.warmup:
            _reset_peak(s.device)
        _sync(s.device)
        t = time.perf_counter()
        m = trainer.train_step()
        _sync(s.device)
        records.append({"step_s": time.perf_counter() - t, "completion_len": m["completion_len/mean"],
                        "warmup": i < s.warmup})
        log.info("%s step %d/%d: %.2fs (len %.1f)", label, i + 1, s.warmup + s.steps, records[-1]["step_s"],
                 m["completion_len/mean"])
    trainer.logger.close()
    return {"steps": records, "peak_mib": _peak_mib(s.device), "placed": f"{param.device.type}/{str(param.dtype)[6:]}"}


def _trl_args(s: Sizes, out_dir: str, checkpointing: bool):
    from trl import GRPOConfig

    n = s.prompts * s.group
    init = {"dtype": s.dtype, **({"attn_implementation": "sdpa"} if s.device.startswith("cuda") else {})}
    return GRPOConfig(
        output_dir=out_dir, use_cpu=not s.device.startswith("cuda"), bf16=s.dtype == "bfloat16", fp16=False,
        report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, max_steps=s.warmup + s.steps, seed=0,
        model_init_kwargs=init, num_generations=s.group, per_device_train_batch_size=s.micro_batch,
        gradient_accumulation_steps=n // s.micro_batch, steps_per_generation=n // s.micro_batch,
        max_completion_length=s.new_tokens, generation_kwargs={"min_new_tokens": s.new_tokens},
        temperature=1.0, top_p=1.0, top_k=0, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.99, max_grad_norm=1.0, beta=0.0, num_iterations=1,
        epsilon=0.2, loss_type="grpo",  # = grpokit's seq_mean_token_mean aggregation
        scale_rewards="group", mask_truncated_completions=False, gradient_checkpointing=checkpointing,
    )


def child_trl(s: Sizes, folder: str, out_dir: str, checkpointing: bool) -> dict:
    """Time TRL's optimizer steps on the same model folder, prompts, lengths and hyper-parameters."""
    try:
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOTrainer
    except ImportError as e:
        return {"skipped": f"TRL is not importable here ({type(e).__name__}: {e})"}
    from grpokit.trainer import setup

    rows = setup.build_splits(grpokit_config(s, folder, out_dir, checkpointing).data).train
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}]} for r in rows])
    records: list[dict] = []
    start: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if len(records) == s.warmup:
                _reset_peak(s.device)
            _sync(s.device)
            start[:] = [time.perf_counter()]

        def on_step_end(self, args, state, control, **kw):
            _sync(s.device)
            records.append({"step_s": time.perf_counter() - start[0], "warmup": len(records) < s.warmup})

        def on_log(self, args, state, control, logs=None, **kw):
            if records and logs and "completions/mean_length" in logs:
                records[-1]["completion_len"] = float(logs["completions/mean_length"])
                log.info("TRL step %d/%d: %.2fs (len %.1f)", len(records), s.warmup + s.steps, records[-1]["step_s"],
                         records[-1]["completion_len"])

    trainer = GRPOTrainer(model=folder, reward_funcs=[letter_fraction], args=_trl_args(s, out_dir, checkpointing),
                          train_dataset=dataset, callbacks=[Timer()])
    param = next(trainer.model.parameters())
    trainer.train()
    return {"steps": records, "peak_mib": _peak_mib(s.device), "placed": f"{param.device.type}/{str(param.dtype)[6:]}"}


def child_fsdp(s: Sizes, folder: str, out_dir: str, checkpointing: bool) -> dict:
    """The throughput step with ``distributed.learner=fsdp`` (this child runs under torchrun, one rank)."""
    from grpokit.distributed.fsdp import fsdp_modules
    from grpokit.trainer.loop import Trainer

    trainer = Trainer(grpokit_config(s, folder, out_dir, checkpointing, extra=["distributed.learner=fsdp"]))
    units = len(fsdp_modules(trainer.model))
    if not units:
        raise RuntimeError("distributed.learner=fsdp left the policy unsharded")
    return {**_timed_steps(trainer, s, "grpokit fsdp"), "units": units}


def run_child(runs: tuple[str, ...], s: Sizes, folder: str, checkpointing: bool, timeout_s: float,
              torchrun: bool = False) -> dict[str, dict]:
    """Run ``runs`` one after another in a fresh process: each run's result, or ``{"skipped"|"failed": reason}``.

    Each finished run prints its result at once, so a crash or time-out in a later run keeps the earlier ones.
    ``torchrun``: the process is one torchrun rank (``torch.distributed.run --standalone --nproc_per_node 1``).
    """
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"] if torchrun else [sys.executable]
    cmd = [*launcher, os.path.abspath(__file__), "--_child", ",".join(runs), "--_sizes",
           json.dumps(dataclasses.asdict(s)), "--_folder", folder] + (["--checkpointing"] if checkpointing else [])
    log.info("running %s ...", " + ".join(runs))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout_s)
        out, err, why = proc.stdout, proc.stderr, f"exited {proc.returncode}" if proc.returncode else ""
    except subprocess.TimeoutExpired as e:
        out, err, why = e.stdout or "", e.stderr or "", f"did not finish within {timeout_s:.0f} s"
    out, err = [x.decode(errors="replace") if isinstance(x, bytes) else x for x in (out, err)]
    found = {}
    for line in out.splitlines():
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
            found[res.pop("run")] = res
    lines = err.splitlines()
    if why or len(found) < len(runs):
        sys.stderr.write("\n".join(lines[-30:]) + "\n")
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no output")
        why = f"{why or 'exited 0'}: {last[:300]}"
    else:
        sys.stderr.write("".join(ln + "\n" for ln in lines if ln.startswith("gpu_check")))
    return {run: found.get(run) or {"failed": f"{run} run {why}"} for run in runs}


# ---------------------------------------------------------------------------- learning smoke test
def child_learn(s: Sizes, folder: str, out_dir: str, checkpointing: bool) -> dict:
    """Mean reward of each step of the tiny Llama learning "fraction of x" on ``s.device`` (``folder`` unused)."""
    from grpokit.config import load_config
    from grpokit.testing import tiny_model_and_tokenizer
    from grpokit.trainer.loop import Trainer

    sets = _base_overrides(s, out_dir, s.learn_prompts, s.learn_group, s.learn_tokens, s.learn_prompts * s.learn_group,
                           s.learn_steps) + [
        f"model.dtype={s.learn_dtype}", "optim.lr=0.01",
        f"rewards=[{{name: '{os.path.abspath(__file__)}:letter_fraction', kwargs: {{letter: x}}}}]",
    ]
    trainer = Trainer(load_config(overrides=sets), *tiny_model_and_tokenizer(seed=0))
    param = next(trainer.model.parameters())
    rewards = [trainer.train_step()["reward/mean"] for _ in range(s.learn_steps)]
    trainer.logger.close()
    return {"rewards": rewards, "placed": f"{param.device.type}/{str(param.dtype)[6:]}"}


# ---------------------------------------------------------------------------- report
def summary(res: dict, s: Sizes) -> dict | None:
    timed = [r for r in res.get("steps", []) if not r["warmup"]]
    if not timed:
        return None
    step_s = statistics.fmean(r["step_s"] for r in timed)
    lens = [r["completion_len"] for r in timed if "completion_len" in r]
    length = statistics.fmean(lens) if lens else float("nan")
    return {"step_s": step_s, "min_s": min(r["step_s"] for r in timed), "len": length,
            "tok_s": length * s.prompts * s.group / step_s, "peak": res["peak_mib"], "placed": res["placed"],
            "n": len(timed)}


def table(rows: list[tuple[str, dict | None, str]], mem: str) -> str:
    out = [f"| side | placed | s/step | min s/step | completion tok/s | compl. len | {mem} |", "|---|---|---|---|---|---|---|"]
    for side, r, note in rows:
        if r is None:
            out.append(f"| {side} | {note} | | | | | |")
        else:
            out.append(f"| {side} | {r['placed']} | {r['step_s']:.3f} | {r['min_s']:.3f} | {r['tok_s']:.0f} | "
                       f"{r['len']:.1f} | {r['peak']:.0f} |")
    return "\n".join(out)


CHILDREN = {"grpokit": child_grpokit, "trl": child_trl, "learn": child_learn, "fsdp": child_fsdp}


def check(a: argparse.Namespace) -> int:
    """The whole check: both throughput sides, the learning run, the report; 1 when grpokit failed."""
    import torch

    s = DRY if a.dry_run else GPU
    s = dataclasses.replace(s, warmup=s.warmup if a.warmup is None else a.warmup, steps=s.steps if a.steps is None else a.steps)
    if s.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: torch {torch.__version__} sees no CUDA device; use --dry-run on a CPU machine")
        print("gpu_speedup=nan")
        return 1
    with tempfile.TemporaryDirectory(prefix="gpu-check-model-") as folder:
        write_model_folder(Path(a.bundle), Path(folder), s.dtype, tiny=a.dry_run)
        results = run_child(("grpokit", "learn"), s, folder, a.checkpointing, a.child_timeout)
        results.update(run_child(("trl",), s, folder, a.checkpointing, a.child_timeout))
        results.update(run_child(("fsdp",), s, folder, a.checkpointing, a.child_timeout, torchrun=True))
    g_res, t_res, l_res, f_res = results["grpokit"], results["trl"], results["learn"], results["fsdp"]
    g, t, f = summary(g_res, s), summary(t_res, s), summary(f_res, s)
    failures = []
    if g is None:
        failures.append(g_res.get("failed", "grpokit side reported no timed step"))
    elif not g["placed"].startswith(s.device):
        failures.append(f"model.device={s.device} left grpokit's policy on {g['placed']}")
    if f is None:
        failures.append("fsdp step: " + f_res.get("failed", "reported no timed step"))
    t_note = t_res.get("skipped") or t_res.get("failed") or "no timed step"

    mem = "peak GPU MiB (timed steps)" if s.device == "cuda" else "peak RSS MiB"
    print()
    print(table([("grpokit", g, g_res.get("failed", "")), ("TRL", t, f"skipped: {t_note}"),
                 ("grpokit fsdp", f, f"failed: {f_res.get('failed', '')}")], mem))
    print()
    print(f"{s.prompts} prompts x G={s.group}, {s.new_tokens} new tokens each (min_new_tokens = max), {s.dtype} on "
          f"{s.device}, micro-batch {s.micro_batch}, checkpointing {'on' if a.checkpointing else 'off'}, beta 0, "
          f"lr {LR:g} constant; {s.warmup} warm-up + {s.steps} timed steps per side; model: "
          f"{'tiny random Llama' if a.dry_run else 'SmolLM2-135M architecture, random weights'}")
    if t is None:
        print(f"TRL side: {t_note}")
    failures += report_learning(l_res, s, a.dry_run)
    for f in failures:
        print(f"FAILED: {f}")
    speedup = t["step_s"] / g["step_s"] if g is not None and t is not None else float("nan")
    print(f"gpu_speedup={speedup:.3f}" if math.isfinite(speedup) else "gpu_speedup=nan")
    return 1 if failures else 0


def report_learning(res: dict, s: Sizes, dry_run: bool) -> list[str]:
    """Print the learning run's first and last mean rewards; the failures it shows."""
    if "rewards" not in res:
        print(f"learning: {res.get('failed', 'no result')}")
        return [f"learning run: {res.get('failed', 'no result')}"]
    rewards = res["rewards"]
    k = min(5, max(1, len(rewards) // 3))
    first, last = statistics.fmean(rewards[:k]), statistics.fmean(rewards[-k:])
    rose = last > first + LEARN_RISE
    print(f"learning ({len(rewards)} steps, tiny Llama, {res['placed']}, reward = fraction of 'x'): "
          f"reward {first:.3f} (first {k}) -> {last:.3f} (last {k}): "
          f"{'rose' if rose else 'did not rise'}{' (not asserted in --dry-run)' if dry_run else ''}")
    failures = []
    if not res["placed"].startswith(s.device):
        failures.append(f"model.device={s.device} left the learning run's policy on {res['placed']}")
    if not dry_run and not rose:
        failures.append(f"reward did not rise by {LEARN_RISE} in {len(rewards)} steps ({first:.3f} -> {last:.3f})")
    return failures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dry-run", action="store_true", help="CPU, float32, tiny sizes (< 1 min)")
    p.add_argument("--bundle", default=str(Path(__file__).resolve().parent.parent / ".gpu_bundle"),
                   help="folder written by benchmarks/gpu_bundle.sh (its smollm2-135m/ config + tokenizer)")
    p.add_argument("--warmup", type=int, help="untimed steps per side (default 2; dry run 1)")
    p.add_argument("--steps", type=int, help="timed steps per side (default 5; dry run 1)")
    p.add_argument("--checkpointing", action="store_true", help="activation / gradient checkpointing on both sides")
    p.add_argument("--child-timeout", type=float, default=180.0,
                   help="seconds each child (grpokit + learning, TRL, FSDP) may take: 3 x 180 s fit one 10-minute device call")
    p.add_argument("--_child", help=argparse.SUPPRESS)  # comma list of CHILDREN names
    p.add_argument("--_sizes", help=argparse.SUPPRESS)
    p.add_argument("--_folder", help=argparse.SUPPRESS)
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="gpu_check %(asctime)s %(message)s", datefmt="%H:%M:%S")
    for name in ("transformers", "datasets", "trl", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # save_pretrained's shard bar
    import torch

    if a._child is None:
        if a.dry_run:
            torch.set_num_threads(1)  # CPU, tiny models: extra intra-op threads only spin on a 2-core machine
        return check(a)
    s = Sizes(**json.loads(a._sizes))
    if s.device == "cpu":
        torch.set_num_threads(1)
    for run in a._child.split(","):
        with tempfile.TemporaryDirectory(prefix=f"gpu-check-{run}-") as out_dir:
            res = CHILDREN[run](s, a._folder, out_dir, a.checkpointing)
        print(RESULT_TAG + json.dumps({"run": run, **res}), flush=True)
        gc.collect()  # the run's trainer and model, before the next run allocates
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
