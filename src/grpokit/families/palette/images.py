"""Image-token masked diffusion for Co-GRPO: 8x8 palette images as 64 tokens, class-conditioned, and their rewards.

An image is an 8x8 grid over an 8-colour palette (token = colour 0..7, row-major), so no VQ-VAE is
needed; the condition is one class token (a null class for classifier-free guidance). Each class
has a target pattern (stripes, checkerboard, halves) and a *partner* (the same pattern with its
two colours swapped): the noisy-prior pretraining (MaskGIT's loss, "MaskGIT: Masked Generative
Image Transformer", arXiv 2202.04200, §3.2: a cosine mask ratio, cross-entropy on the masked
tokens; class dropout 10% for CFG) shows the target or the partner with probability 1/2 each, so
a sampler that mixes the two modes inside one image scores low and a coherent one is right half
the time [inferred recipe].

Rewards on the grid (``grpokit.families.palette.images:palette_match`` / ``:palette_exact`` as reward
names): the fraction of the 64 pixels equal to the class's target, and 1 for an exact image.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import torch

from grpokit.data.tasks import TASKS, TaskSplits

SIDE, COLOURS, CLASSES = 8, 8, 4
PALETTE_VOCAB = "palette_vocab.json"


def pattern(label: int, swap: bool = False) -> list[int]:
    """The 64 colours (row-major) of class ``label``'s target image (``swap``: its partner)."""
    a, b = [(1, 2), (3, 4), (5, 6), (7, 0)][label]
    if swap:
        a, b = b, a
    out = []
    for r in range(SIDE):
        for c in range(SIDE):
            on = [r % 2 == 0, c % 2 == 0, (r + c) % 2 == 0, c < SIDE // 2][label]
            out.append(a if on else b)
    return out


class PaletteTokenizer:
    """Colours 0..7, [MASK] 8, [PAD] 9, class tokens 10..13, null class 14; a prompt is "class N"."""

    def __init__(self) -> None:
        self.mask_id, self.pad_id = COLOURS, COLOURS + 1
        self.class_base = COLOURS + 2
        self.null_id = self.class_base + CLASSES
        self.vocab_size = self.null_id + 1
        self.pad_token_id, self.eos_token_id, self.chat_template = self.pad_id, None, None

    def __len__(self) -> int:
        return self.vocab_size

    def get_vocab(self) -> dict[str, int]:
        return {**{str(c): c for c in range(COLOURS)}, "[MASK]": self.mask_id, "[PAD]": self.pad_id,
                **{f"class {k}": self.class_base + k for k in range(CLASSES)}, "[NULL]": self.null_id}

    def class_token(self, prompt: str) -> int:
        parts = prompt.split()
        if len(parts) != 2 or parts[0] != "class" or not parts[1].isdigit() or int(parts[1]) >= CLASSES:
            raise ValueError(f"palette prompt {prompt!r}: write 'class N' with N in 0..{CLASSES - 1}")
        return self.class_base + int(parts[1])

    def batch_decode(self, rows: Iterable[Iterable[int]], skip_special_tokens: bool = True) -> list[str]:
        """Each image as 64 colour digits, row-major ([MASK] as '.')."""
        return ["".join(str(int(t)) if int(t) < COLOURS else "." for t in row) for row in rows]

    def save_pretrained(self, folder: str | Path) -> None:
        Path(folder, PALETTE_VOCAB).write_text(json.dumps({"colours": COLOURS, "classes": CLASSES, "side": SIDE}))


@TASKS.register("palette_classes")
def palette_classes(seed: int, n_train: int, n_heldout: int) -> TaskSplits:
    """Class-conditional 8x8 palette images: each row asks for one of the 4 classes ("class 2"); draws are seeded."""
    if n_train < 0 or n_heldout < 0:
        raise ValueError("task 'palette_classes': n_train and n_heldout must be >= 0")

    def rows(rng: random.Random, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            label = rng.randrange(CLASSES)
            out.append({"prompt": f"class {label}", "label": label, "answer": str(label), "task": "palette_classes"})
        return out

    return TaskSplits(train=rows(random.Random(f"grpokit/palette/train/{seed}"), n_train),
                      heldout=rows(random.Random(f"grpokit/palette/heldout/{seed}"), n_heldout))


def _grid(text: str) -> list[int]:
    return [int(ch) if ch.isdigit() else -1 for ch in text[: SIDE * SIDE]]


def palette_match(prompts: list[str], completions: list[str], label: Optional[Sequence] = None, **kwargs: Any) -> list[Optional[float]]:
    """Fraction of the 64 pixels equal to the ``label`` column's target pattern (None where there is no label)."""
    if label is None:
        raise ValueError("reward palette_match needs the 'label' column (task palette_classes)")
    out: list[Optional[float]] = []
    for text, y in zip(completions, label):
        grid = _grid(text)
        out.append(None if y is None else sum(p == t for p, t in zip(grid, pattern(int(y)))) / (SIDE * SIDE))
    return out


def palette_exact(prompts: list[str], completions: list[str], label: Optional[Sequence] = None, **kwargs: Any) -> list[Optional[float]]:
    """1.0 when the image is exactly the ``label`` column's target pattern, else 0.0."""
    return [None if m is None else float(m == 1.0) for m in palette_match(prompts, completions, label)]


def build_palette_predictor(seed: int = 0, hidden: int = 64, layers: int = 2, heads: int = 4) -> torch.nn.Module:
    """A bidirectional mask predictor over [class] + 64 pixel tokens (BertForMaskedLM from a config)."""
    from grpokit.families.masked_diffusion.model import build_mdm

    return build_mdm(PaletteTokenizer().vocab_size, hidden=hidden, layers=layers, heads=heads, max_positions=SIDE * SIDE + 8,
                     seed=seed)


def predictor_logits(model: torch.nn.Module, cond: torch.Tensor, canvas: torch.Tensor) -> torch.Tensor:
    """``[n, 64, V]`` logits of the pixel positions given class tokens ``cond [n]`` and canvases ``[n, 64]``; only colours are predicted."""
    ids = torch.cat([cond[:, None], canvas], dim=1)
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions).logits.float()[:, 1:]
    return logits.masked_fill(torch.arange(logits.shape[-1], device=ids.device) >= COLOURS, float("-inf"))


def pretrain_palette(model: torch.nn.Module, *, steps: int = 400, batch: int = 64, lr: float = 2e-3, seed: int = 0,
                     p_correct: float = 0.5, class_dropout: float = 0.1) -> float:
    """MaskGIT noisy-prior pretraining in place (one torch thread); returns the mean loss of the last 50 steps."""
    import math

    tok = PaletteTokenizer()
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(f"grpokit/palette/pretrain/{seed}")
    from grpokit.model.fingerprint import build_optimizer
    opt = build_optimizer(model.parameters(), lr=lr, weight_decay=0.01)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    losses = []
    try:
        model.train()
        for _ in range(steps):
            labels = [rng.randrange(CLASSES) for _ in range(batch)]
            cpu = "cpu"  # host-side: this pretraining runs on the CPU with its own CPU generator
            target = torch.tensor([pattern(y, swap=rng.random() >= p_correct) for y in labels], device=cpu)
            cond = torch.tensor([tok.null_id if rng.random() < class_dropout else tok.class_base + y for y in labels], device=cpu)
            ratio = torch.cos(math.pi / 2 * torch.rand(batch, 1, generator=gen, device=cpu))
            masked = torch.rand(batch, SIDE * SIDE, generator=gen, device=cpu) < ratio
            masked[:, 0] |= ~masked.any(-1)
            logits = predictor_logits(model, cond, torch.where(masked, torch.full_like(target, tok.mask_id), target))
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none")
            loss = (nll.view(batch, -1) * masked).sum() / masked.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return sum(losses[-50:]) / max(len(losses[-50:]), 1)
