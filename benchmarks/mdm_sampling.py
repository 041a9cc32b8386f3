#!/usr/bin/env python
"""Masked-diffusion sampling: grpokit's LLaDA sampler against the plain loop, tokens per second.

    .venv/bin/python benchmarks/mdm_sampling.py                       # the presets' canvases (8), and 16, 32
    .venv/bin/python benchmarks/mdm_sampling.py --canvas 8 --batch 128 --repeats 5
    .venv/bin/python benchmarks/mdm_sampling.py --dry-run             # tiny sizes, seconds

Both sides sample the same canvases with the same mask predictor (the ``tiny-mdm`` architecture:
BERT, hidden 64, 4 layers, randomly initialised here, so nothing is built or cached) and the same
prompts: ``--batch`` rows of the ``mdm_sort`` task (the ``espo`` / ``diffu_grpo`` / ``mask_grpo``
presets sample 16 prompts x G 8 = 128 rows on a canvas of 8 with 8 steps in one block).

* **grpokit**: :func:`grpokit.families.masked_diffusion.sampler.generate`, which also records what
  the step-level likelihoods need (each position's commit step and each step's log-probability).
* **plain loop**: the LLaDA authors' ``generate.py`` written out (Nie et al., "Large Language
  Diffusion Models", arXiv 2502.09992, Appendix B): per step one forward, Gumbel-max proposals,
  softmax confidence, ``topk`` of the masked positions, commit; nothing recorded.

Both use low-confidence remasking at temperature 1 and run ``--repeats`` timed batches after one
warm-up, on ``--threads`` torch threads. Tokens/s counts canvas positions sampled (``batch x
canvas`` per batch). The last line is ``ratio_<canvas>=<grpokit tokens/s / plain tokens/s>`` for
each canvas.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def plain_generate(model, prompt_ids, prompt_mask, length: int, steps: int, mask_id: int, generator):
    """The straightforward LLaDA loop (one block, low-confidence remasking, temperature 1): ``[B, length]``."""
    import torch

    from grpokit.families.masked_diffusion.model import mdm_logits

    b, p = prompt_ids.shape
    x = torch.cat([prompt_ids, torch.full((b, length), mask_id, dtype=prompt_ids.dtype, device=prompt_ids.device)], dim=1)
    attention = torch.cat([prompt_mask, torch.ones_like(x[:, p:])], dim=1)
    per_step = [length // steps + (i < length % steps) for i in range(steps)]
    for k in per_step:
        logits = mdm_logits(model, x, attention)[:, p:]
        u = torch.rand(logits.shape, dtype=torch.float64, device=logits.device, generator=generator)
        x0 = (logits.double() - torch.log(-torch.log(u.clamp(min=1e-300)))).argmax(-1)
        conf = torch.softmax(logits.double(), -1).gather(-1, x0[..., None]).squeeze(-1)
        conf = torch.where(x[:, p:] == mask_id, conf, torch.full_like(conf, float("-inf")))
        chosen = torch.zeros_like(conf, dtype=torch.bool).scatter_(-1, conf.topk(k, dim=-1).indices, True)
        x[:, p:] = torch.where(chosen, x0.to(x.dtype), x[:, p:])
    return x[:, p:]


def time_side(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--canvas", type=int, nargs="+", default=[8, 16, 32], help="canvas lengths L (steps = L, one block)")
    ap.add_argument("--batch", type=int, default=128, help="rows sampled together (the presets: 16 prompts x G 8)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true", help="canvas 8, batch 8, 1 repeat")
    ap.add_argument("--out", default=None, help="unused (the dry-run harness passes it)")
    a = ap.parse_args(argv)
    if a.dry_run:
        a.canvas, a.batch, a.repeats = [8], 8, 1
    import torch

    from grpokit.data.tasks import TASKS
    from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm
    from grpokit.families.masked_diffusion.pretrain import SIZES
    from grpokit.families.masked_diffusion.sampler import SamplerOptions, generate

    torch.set_num_threads(a.threads)
    tok = MDMTokenizer()  # the embedded tiny-mdm's vocabulary
    model = build_mdm(len(tok), seed=0, max_positions=64 + max(a.canvas), **SIZES).eval()
    rows = TASKS.get("mdm_sort")(0, a.batch, 1).train[: a.batch]
    enc = [tok.encode(r["prompt"]) for r in rows]
    width = max(map(len, enc))
    prompt_ids = torch.tensor([[tok.pad_id] * (width - len(e)) + e for e in enc], device="cpu")
    prompt_mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in enc], device="cpu")
    print("| canvas | grpokit tok/s | plain loop tok/s | grpokit / plain |")
    print("|---|---|---|---|")
    ratios = {}
    with torch.no_grad():
        for length in a.canvas:
            gen = torch.Generator().manual_seed(0)
            ours = time_side(lambda: generate(model, prompt_ids, prompt_mask, length, SamplerOptions(steps=length), tok.mask_id, gen),
                             a.repeats)
            plain = time_side(lambda: plain_generate(model, prompt_ids, prompt_mask, length, length, tok.mask_id, gen), a.repeats)
            tokens = a.batch * length
            ratios[length] = plain / ours
            print(f"| {length} | {tokens / ours:.0f} | {tokens / plain:.0f} | {ratios[length]:.2f} |", flush=True)
    print(" ".join(f"ratio_{n}={r:.2f}" for n, r in ratios.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
