"""Build ``tiny-flow``: a tiny class-conditional ``UNet2DModel`` pretrained by rectified flow on a noisy prior.

Rectified-flow regression (the flow-matching loss of SD3 / Flow-GRPO's base models, restated):
x_σ = (1 − σ)·x0 + σ·ε, target v = ε − x0, loss = mean ‖v_θ(x_σ, σ, c) − v‖², σ ~ U(0, 1); the
label is replaced by the null class with probability 0.1 so classifier-free guidance works. The
data are :func:`~grpokit.families.flow_matching.procedural.noisy_prior_batch` images: the drawn colour
is the label's with probability ``p_correct`` (0.5), else its fixed partner colour, so the
model's samples have the requested colour about half the time and GRPO with the exact
``colour_fraction`` reward has room to climb (the noisy-prior recipe; the fixed partner is
grpokit's choice [inferred], as for the tiny VLM). One torch thread (faster than two on this
machine for a model this small); deterministic in ``seed``; the cache folder is written
atomically, with its fingerprint, by a child process with the CPU numerics pinned
(:mod:`grpokit.model.fingerprint`).

    python -m grpokit.families.flow_matching.pretrain            # builds and caches the embedded tiny-flow
    python -m grpokit.families.flow_matching.pretrain --out DIR --steps 400
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)
VERSION = "v4"  # v4: NNPACK off in the pinned child (its conv2d kernels depend on the CPU); v3: fused AdamW; v2: pinned
SIZE, CHANNELS, STEPS = 8, (16, 32), 1500  # 0.17 M parameters; 1500 steps of 64 images: 2.3 min on one thread [measured]


def train(model: torch.nn.Module, *, steps: int, batch: int = 64, lr: float = 1e-3, seed: int = 0, p_correct: float = 0.5,
          p_uncond: float = 0.1) -> dict[str, float]:
    """Rectified-flow pretraining of ``model`` (a :class:`TinyFlowModel`) in place; returns the last loss and minutes."""
    from grpokit.families.flow_matching.procedural import noisy_prior_batch

    torch.manual_seed(seed)
    rng = random.Random(f"grpokit/flow/pretrain/{seed}")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    from grpokit.model.fingerprint import build_optimizer
    optimizer = build_optimizer(model.parameters(), lr=lr, weight_decay=0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start, loss_value = time.perf_counter(), float("nan")
    model.train()
    try:
        for step in range(steps):
            images, labels = noisy_prior_batch(batch, rng, p_correct, model.size)
            x0 = torch.as_tensor(images).permute(0, 3, 1, 2) * 2 - 1  # [b, 3, H, W] in [-1, 1]
            labels = torch.as_tensor(labels)
            drop = torch.rand(batch, generator=gen, device="cpu") < p_uncond  # host-side: the CPU pretraining's own generator
            labels = torch.where(drop, torch.full_like(labels, model.null_class), labels)
            eps = torch.randn(x0.shape, generator=gen, device="cpu")
            sigma = torch.rand(batch, generator=gen, device="cpu")
            s = sigma.view(-1, 1, 1, 1)
            v = model((1 - s) * x0 + s * eps, sigma, labels)
            loss = ((v - (eps - x0)) ** 2).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            loss_value = float(loss.detach())
            if step % 250 == 0:
                log.info("tiny-flow pretraining step %d/%d loss %.4f", step, steps, loss_value)
    finally:
        torch.set_num_threads(threads)
    return {"loss": loss_value, "minutes": (time.perf_counter() - start) / 60}


def build(out: str | Path, *, seed: int = 0, steps: int = STEPS, size: int = SIZE, channels: tuple = CHANNELS, **kwargs) -> Path:
    """A tiny flow model at ``out``: built from its config with seed ``seed``, then noisy-prior pretrained; atomic."""
    from grpokit.families.flow_matching.model import TinyFlowModel, unet_config
    from grpokit.families.flow_matching.procedural import NUM_CLASSES, condition_of, prompt_for

    from grpokit.model.loading import atomic_folder

    torch.manual_seed(seed)
    model = TinyFlowModel(unet_config(size, NUM_CLASSES, channels), [prompt_for(*condition_of(i)) for i in range(NUM_CLASSES)])
    result = train(model, steps=steps, seed=seed, **kwargs) if steps else {"loss": float("nan"), "minutes": 0.0}
    from grpokit.model.fingerprint import record

    with atomic_folder(out) as tmp:
        model.save_pretrained(tmp)
        (tmp / "grpokit-pretrain.txt").write_text(f"noisy prior {VERSION} seed={seed} steps={steps} {result}\n")
        record(tmp, "tiny-flow", {"version": VERSION, "seed": seed, "steps": steps, "size": size, "channels": list(channels),
                                  **kwargs})
    return Path(out)


def ensure_tiny_flow(seed: int = 0) -> Path:
    """The embedded ``tiny-flow`` folder in the grpokit cache, built on first use in a child process with the
    numerics pinned (:func:`grpokit.model.fingerprint.pinned_build`, a few CPU minutes); its fingerprint is logged."""
    from grpokit.families.flow_matching.model import CONFIG_FILE
    from grpokit.model.fingerprint import log_fingerprint, pinned_build
    from grpokit.model.loading import cache_dir

    folder = cache_dir() / "models" / f"tiny-flow-{VERSION}-seed{seed}"
    if not (folder / CONFIG_FILE).is_file():
        log.info("building tiny-flow (noisy prior, seed %d) in %s: first use only", seed, folder)
        pinned_build("grpokit.families.flow_matching.pretrain:build", folder, seed=seed)
    log_fingerprint(folder, "tiny-flow")
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Build and noisy-prior pretrain the tiny flow-matching image model")
    p.add_argument("--out", default=None, help="folder (default: the embedded tiny-flow cache)")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if a.out:
        from grpokit.model.fingerprint import pinned_build

        folder = pinned_build("grpokit.families.flow_matching.pretrain:build", a.out, seed=a.seed, steps=a.steps)
    else:
        folder = ensure_tiny_flow(a.seed)
    print(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
