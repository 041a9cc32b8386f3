"""The embedded ``tiny-mdm``: a small masked-diffusion LM given a "noisy prior" by LLaDA's SFT loss.

Supervised training with :func:`~grpokit.families.masked_diffusion.likelihoods.llada_sft_loss` on the
masked-diffusion tasks (``mdm_reverse``, ``mdm_sort``, ``mdm_add``, ``mdm_countdown``), in two
phases as grpokit's tiny VLM: ``clean_steps`` with the right answers (the model learns the
tasks), then noisy steps where the target canvas is the answer with probability ``p_correct``
(0.5) and otherwise the row's fixed *partner* (e.g. the digits unreversed), so the model learns
both readings and GRPO with the exact reward has room to move it. The fixed partner (rather than
a uniform random label, whose per-position mode would still be the answer) and the clean first
phase are grpokit's choices [inferred], following the research recipe of a prior that is right
about half the time. Training prompts never include the tasks' held-out prompts (seed 0,
``HELDOUT`` rows), so held-out success is measured on unseen prompts.

    python -m grpokit.families.masked_diffusion.pretrain                 # builds and caches the embedded tiny-mdm
    python -m grpokit.families.masked_diffusion.pretrain --out DIR --steps 600

Deterministic in ``seed`` with one torch thread; the cache folder is written atomically, with its
fingerprint (``grpokit-build.json``), by a child process with the CPU numerics pinned
(:mod:`grpokit.model.fingerprint`), so that it is meant to be the same model on any x86 CPU.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import time
from pathlib import Path
from typing import Optional

import torch

from grpokit.families.masked_diffusion.likelihoods import llada_sft_loss
from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm, is_mdm_folder, mdm_logits, save_mdm

log = logging.getLogger(__name__)
VERSION = "v3"  # v3: fused AdamW (the same floats on every x86 CPU); v2: numerics pinned, weights fingerprinted
CANVAS = 8  # answer + [EOS] padding: every task's answer fits (countdown's longest is 7 characters)
HELDOUT = 256
SIZES = {"hidden": 64, "layers": 4, "heads": 4}
TASK_MIX = ("mdm_reverse", "mdm_sort", "mdm_add", "mdm_countdown")


def cache_dir() -> Path:
    root = os.environ.get("GRPOKIT_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "grpokit")
    return Path(root).expanduser() / f"tiny-mdm-{VERSION}"


def encode_rows(tok: MDMTokenizer, prompts: list[str], answers: Optional[list[str]], canvas: int, device=None):
    """``(prompt_ids [n, P] left-padded, prompt_mask [n, P], answer canvases [n, canvas] or None)``."""
    enc = [tok.encode(p, "prompt") for p in prompts]
    width = max(len(e) for e in enc)
    ids = torch.full((len(enc), width), tok.pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(enc), width, dtype=torch.long, device=device)
    for i, e in enumerate(enc):
        ids[i, width - len(e):] = torch.tensor(e, dtype=torch.long, device=device)
        mask[i, width - len(e):] = 1
    target = None
    if answers is not None:
        target = torch.full((len(answers), canvas), tok.eos_id, dtype=torch.long, device=device)
        for i, a in enumerate(answers):
            e = tok.encode(a, "answer")[:canvas - 1]
            target[i, : len(e)] = torch.tensor(e, dtype=torch.long, device=device)
    return ids, mask, target


def _pools(seed: int) -> dict[str, list[dict]]:
    """Training rows per task: the task's own generator, its held-out prompts (seed 0) removed."""
    from grpokit.data.tasks import TASKS

    pools = {}
    for name in TASK_MIX:
        held = {r["prompt"] for r in TASKS.get(name)(seed=0, n_train=0, n_heldout=HELDOUT).heldout}
        rows = TASKS.get(name)(seed=1000 + seed, n_train=3000, n_heldout=0).train
        pools[name] = [r for r in rows if r["prompt"] not in held]
    return pools


def train(model: torch.nn.Module, tok: MDMTokenizer, *, steps: int, clean_steps: int, batch: int = 64, lr: float = 2e-3,
          seed: int = 0, p_correct: float = 0.5) -> dict[str, float]:
    """Noisy-prior SFT of ``model`` in place; returns the last losses and the minutes taken."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a sub-million-parameter model: one thread is faster than two here
    try:
        rng = random.Random(f"grpokit/mdm/pretrain/{seed}")
        gen = torch.Generator().manual_seed(seed)
        pools = _pools(seed)
        from grpokit.model.fingerprint import build_optimizer
        opt = build_optimizer(model.parameters(), lr=lr, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100) * max(0.05, 1 - s / steps))
        model.train()
        t0, losses = time.perf_counter(), []
        for step in range(steps):
            rows = [rng.choice(pools[rng.choice(TASK_MIX)]) for _ in range(batch)]
            noisy = step >= clean_steps
            answers = [r["answer"] if not noisy or rng.random() < p_correct else r["partner"] for r in rows]
            p_ids, p_mask, target = encode_rows(tok, [r["prompt"] for r in rows], answers, CANVAS)
            loss = llada_sft_loss(lambda i, a: mdm_logits(model, i, a), p_ids, p_mask, target, tok.mask_id, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if step % 200 == 0:
                log.info("tiny-mdm step %d/%d loss %.3f (%s)", step, steps, loss, "noisy" if noisy else "clean")
        model.eval()
        return {"loss": sum(losses[-50:]) / max(len(losses[-50:]), 1), "minutes": (time.perf_counter() - t0) / 60}
    finally:
        torch.set_num_threads(threads)


def build(out: Path, *, steps: int = 3200, clean_steps: int = 2400, seed: int = 0) -> Path:
    """The tiny-mdm at ``out``: built with seed ``seed``, noisy-prior trained, saved with its fingerprint; atomic."""
    from grpokit.model.fingerprint import record
    from grpokit.model.loading import atomic_folder

    tok = MDMTokenizer()
    model = build_mdm(len(tok), seed=seed, **SIZES)
    stats = train(model, tok, steps=steps, clean_steps=clean_steps, seed=seed)
    log.info("tiny-mdm: %s", stats)
    settings = {"version": VERSION, "steps": steps, "clean_steps": clean_steps, "seed": seed, "canvas": CANVAS, **SIZES}
    with atomic_folder(out) as tmp:
        save_mdm(model, tok, tmp, extra={**settings, **stats})
        record(tmp, "tiny-mdm", settings)
    return Path(out)


def ensure_tiny_mdm() -> Path:
    """The cached embedded model's folder, built on first use in a child process with the numerics pinned
    (:func:`grpokit.model.fingerprint.pinned_build`, a few CPU minutes); its fingerprint is logged."""
    from grpokit.model.fingerprint import log_fingerprint, pinned_build

    folder = cache_dir()
    if not is_mdm_folder(folder):
        log.warning("building the embedded tiny-mdm into %s (once, a few minutes on one CPU thread)", folder)
        pinned_build("grpokit.families.masked_diffusion.pretrain:build", folder)
    log_fingerprint(folder, "tiny-mdm")
    return folder


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="folder to write (default: the grpokit cache's tiny-mdm)")
    parser.add_argument("--steps", type=int, default=3200)
    parser.add_argument("--clean-steps", type=int, default=2400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from grpokit.model.fingerprint import pinned_build

    out = pinned_build("grpokit.families.masked_diffusion.pretrain:build", Path(args.out) if args.out else cache_dir(), steps=args.steps,
                       clean_steps=args.clean_steps, seed=args.seed)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
