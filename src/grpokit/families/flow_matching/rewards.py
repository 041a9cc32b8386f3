"""Offline image rewards for the flow-matching policy, Pref-GRPO's procedural judge and DPP-GRPO's image embedding.

A flow policy's completions are :class:`GeneratedImage` objects: strings (a short description,
so text tooling and logs keep working) that carry the image as ``.pixels`` ``[H, W, 3]`` float32
in [0, 1]. Rewards read the row's ``colour`` / ``count`` columns (task ``flow_images``).

* ``colour_fraction``: of the lit pixels (max channel > ``lit``), the fraction whose nearest palette
  colour is the requested one (0 when nothing is lit).
* ``component_count``: 1 / (1 + |n − count|), n = 4-connected components of requested-colour pixels.
* ``jpeg_compressibility``: −(JPEG bytes)/1000 at ``quality``, the image upscaled ×``upscale``
  (nearest) first — Flow-GRPO's toy reward (arXiv 2505.05470, its ``jpeg_compressibility``).
* ``tiny_score``: ``offset + scale · hidden`` — a pointwise reward model whose differences are
  tiny (Pref-GRPO's "illusory advantage" setting). ``hidden = colour_fraction + brightness · mean
  pixel + noise``: the optional ``brightness`` term is a reward model's systematic bias for brighter
  images (the over-saturation hack Pref-GRPO reports for pointwise rewards), ``noise`` a seeded
  per-image error.
* :func:`image_judge` (``prefer`` of the ``win_rate`` group reward): a procedural pairwise judge —
  compares the same hidden score of two images and calls a tie within ``tie_margin``. Pref-GRPO:
  Wang et al., arXiv 2508.20751.
* :func:`image_embed` (``embed`` of the ``dpp`` group reward): a fixed, seeded Gaussian random
  projection of the pixels mapped to [−1, 1]; cosine then ≈ pixel-space cosine (Johnson–
  Lindenstrauss). The DPP-GRPO paper (arXiv 2511.20647) rewrites prompts for a frozen video
  model; a diversity reward over a generator's own images is the extension, not the paper.
"""

from __future__ import annotations

import io
import zlib
from typing import Any, Optional, Sequence

import numpy as np
import torch

from grpokit.families.flow_matching.procedural import PALETTE
from grpokit.rewards.builtin import REWARDS

_PALETTE = np.asarray(list(PALETTE.values()), dtype=np.float32)  # [P, 3]
_NAMES = list(PALETTE)


class GeneratedImage(str):
    """A generated image as a completion: ``str`` (its description) plus ``.pixels`` ``[H, W, 3]`` float32 in [0, 1]."""

    pixels: np.ndarray

    def __new__(cls, pixels: np.ndarray, text: str = "") -> "GeneratedImage":
        obj = super().__new__(cls, text or f"<image {pixels.shape[0]}x{pixels.shape[1]}>")
        obj.pixels = np.asarray(pixels, dtype=np.float32)
        return obj

    def pil(self):
        from PIL import Image

        return Image.fromarray((np.clip(self.pixels, 0, 1) * 255).round().astype(np.uint8))


def _pixels(completion: Any, who: str) -> np.ndarray:
    pixels = getattr(completion, "pixels", None)
    if pixels is None:
        raise ValueError(f"{who} scores images: its completions must come from a flow-matching image policy (model.name: tiny-flow)")
    return pixels


def _colour_mask(pixels: np.ndarray, colour: str, lit: float) -> tuple[np.ndarray, np.ndarray]:
    """(lit ``[H, W]``, lit and nearest palette colour == ``colour`` ``[H, W]``)."""
    if colour not in PALETTE:
        raise ValueError(f"unknown colour {colour!r}: one of {_NAMES}")
    on = pixels.max(-1) > lit
    nearest = ((pixels[:, :, None, :] - _PALETTE) ** 2).sum(-1).argmin(-1)
    return on, on & (nearest == _NAMES.index(colour))


def fraction_of(pixels: np.ndarray, colour: str, lit: float = 0.3) -> float:
    on, hit = _colour_mask(pixels, colour, lit)
    return float(hit.sum()) / float(on.sum()) if on.any() else 0.0


@REWARDS.register("colour_fraction")
def colour_fraction(prompts: list, completions: list, colour: Sequence[str] = (), lit: float = 0.3, **_: Any) -> list[float]:
    """Fraction of lit pixels (max channel > ``lit``) whose nearest palette colour is the row's ``colour`` (0 if none lit)."""
    return [fraction_of(_pixels(c, "colour_fraction"), col, lit) for c, col in zip(completions, colour)]


def components(mask: np.ndarray) -> int:
    """Number of 4-connected components of True pixels in ``mask [H, W]`` (iterative flood fill)."""
    seen = np.zeros_like(mask, dtype=bool)
    h, w = mask.shape
    n = 0
    for r in range(h):
        for c in range(w):
            if mask[r, c] and not seen[r, c]:
                n += 1
                stack = [(r, c)]
                seen[r, c] = True
                while stack:
                    y, x = stack.pop()
                    for yy, xx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                        if 0 <= yy < h and 0 <= xx < w and mask[yy, xx] and not seen[yy, xx]:
                            seen[yy, xx] = True
                            stack.append((yy, xx))
    return n


@REWARDS.register("component_count")
def component_count(prompts: list, completions: list, colour: Sequence[str] = (), count: Sequence[int] = (), lit: float = 0.3,
                    **_: Any) -> list[float]:
    """1 / (1 + |n − count|), n = 4-connected components of the requested colour's pixels."""
    out = []
    for c, col, k in zip(completions, colour, count):
        _, hit = _colour_mask(_pixels(c, "component_count"), col, lit)
        out.append(1.0 / (1.0 + abs(components(hit) - int(k))))
    return out


@REWARDS.register("jpeg_compressibility")
def jpeg_compressibility(prompts: list, completions: list, quality: int = 95, upscale: int = 4, **_: Any) -> list[float]:
    """−(size of the JPEG in bytes)/1000 at ``quality``, after a nearest ×``upscale`` (Flow-GRPO's toy reward)."""
    from PIL import Image

    out = []
    for c in completions:
        image = GeneratedImage(_pixels(c, "jpeg_compressibility")).pil()
        image = image.resize((image.width * upscale, image.height * upscale), Image.NEAREST)
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=quality)
        out.append(-buf.tell() / 1000.0)
    return out


def _noise(pixels: np.ndarray, std: float, seed: int) -> float:
    """A fixed N(0, std²) draw per image (seeded by its bytes): a reward model's idiosyncratic error."""
    if std == 0:
        return 0.0
    key = zlib.crc32(np.round(pixels, 4).tobytes()) ^ seed
    return float(np.random.default_rng(key).normal(0.0, std))


def hidden_score(pixels: np.ndarray, colour: str, brightness: float = 0.0, noise: float = 0.0, noise_seed: int = 0) -> float:
    """What both the pointwise ``tiny_score`` and the pairwise ``image_judge`` see of an image ``[H, W, 3]``.

    ``colour_fraction + brightness · mean pixel value + N(0, noise²)`` (the draw fixed per image).
    """
    return fraction_of(pixels, colour) + brightness * float(pixels.mean()) + _noise(pixels, noise, noise_seed)


@REWARDS.register("tiny_score")
def tiny_score(prompts: list, completions: list, colour: Sequence[str] = (), offset: float = 0.5, scale: float = 0.01,
               noise: float = 0.0, noise_seed: int = 0, brightness: float = 0.0, **_: Any) -> list[float]:
    """``offset + scale · hidden_score``: a pointwise score whose differences within a group are tiny."""
    return [offset + scale * hidden_score(_pixels(c, "tiny_score"), col, brightness, noise, noise_seed)
            for c, col in zip(completions, colour)]


def image_judge(prompt: str, a: Any, b: Any, colour: Optional[str] = None, tie_margin: float = 0.05, noise: float = 0.0,
                noise_seed: int = 0, brightness: float = 0.0) -> float:
    """P(a ≻ b) of a procedural pairwise judge: 1 / 0 when a's hidden score beats / trails b's by more than ``tie_margin``, else 0.5.

    Hidden score: :func:`hidden_score` (``colour_fraction`` of the row's ``colour``, plus the same
    ``brightness`` bias and seeded per-image ``noise`` as :func:`tiny_score`). Use as
    ``win_rate``'s ``prefer``:
    ``{name: win_rate, kwargs: {prefer: "grpokit.families.flow_matching.rewards:image_judge", tie_margin: 0.05}}``.
    """
    if colour is None:
        raise ValueError("image_judge needs the row's 'colour' column (task flow_images)")
    sa = hidden_score(_pixels(a, "image_judge"), colour, brightness, noise, noise_seed)
    sb = hidden_score(_pixels(b, "image_judge"), colour, brightness, noise, noise_seed)
    if sa - sb > tie_margin:
        return 1.0
    if sb - sa > tie_margin:
        return 0.0
    return 0.5


def image_embed(images: list, dim: int = 64, seed: int = 0) -> torch.Tensor:
    """``[n, dim]`` float32: a fixed Gaussian random projection of each image's pixels mapped to [−1, 1].

    Use as ``dpp``'s ``embed``: ``{name: dpp, kwargs: {embed: "grpokit.families.flow_matching.rewards:image_embed", lambda_rel: 0}}``
    (relevance needs a text query, which images lack: give the task reward its own column).
    """
    flat = np.stack([_pixels(im, "image_embed (dpp's embed)").reshape(-1) * 2 - 1 for im in images]) if images else np.zeros((0, 1))
    gen = torch.Generator(device="cpu").manual_seed(seed)
    proj = torch.randn(flat.shape[1], dim, generator=gen, device="cpu") / dim**0.5
    return torch.as_tensor(flat, dtype=torch.float32, device="cpu") @ proj
