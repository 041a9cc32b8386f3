"""Procedural images and 4-frame clips with one-word answers, and the raw-modality transforms on them.

Images (56 x 56 px by default, RGB on black): one to four shapes of one colour; the questions are
"what colour", "how many" and "what shape". Clips (4 frames): a square moving one way ("which way
does the square move") or two squares appearing one after the other ("which colour appears
first"). Everything is seeded; nothing is read from disk or a hub.

The transforms act on the raw modality, before the processor (the PAPO authors' way, and the
hook DeepVideo-R1's augmentation needs):

* :func:`blacken_patches`: each ``patch x patch`` square of the image (aligned to the processor's
  patch grid, clipped at the borders) is set to black with probability ``p`` (PAPO's
  ``random_patch_blackening``, "Perception-Aware Policy Optimization for Multimodal Reasoning",
  arXiv 2507.06448, authors' code ``verl/trainer/papo_utils.py``);
* :func:`noise_frames`: Gaussian noise of standard deviation ``sigma`` (on the 0..255 scale) added
  to every frame (DeepVideo-R1's difficulty-increasing augmentation, arXiv 2506.07464 §3.3).
"""

from __future__ import annotations

import random
from typing import Sequence

import numpy as np
from PIL import Image

COLOURS = {"red": (230, 40, 40), "green": (40, 200, 60), "blue": (50, 90, 240), "yellow": (235, 220, 40)}
SHAPES = ("square", "circle", "triangle")
DIRECTIONS = ("left", "right", "up", "down")
QUESTIONS = {
    "colour": "What colour are the shapes?",
    "count": "How many shapes are there?",
    "shape": "What shape are they?",
    "motion": "Which way does the square move?",
    "first": "Which colour appears first?",
}
COUNT_WORDS = ("one", "two", "three", "four")


def _draw(canvas: np.ndarray, shape: str, x: int, y: int, size: int, rgb: tuple[int, int, int]) -> None:
    """Paint ``shape`` with top-left corner (x, y) and side ``size`` into ``canvas [H, W, 3]`` in place."""
    yy, xx = np.mgrid[0:size, 0:size]
    if shape == "square":
        inside = np.ones((size, size), dtype=bool)
    elif shape == "circle":
        c = (size - 1) / 2
        inside = (yy - c) ** 2 + (xx - c) ** 2 <= (size / 2) ** 2
    else:  # triangle, apex up
        inside = np.abs(xx - (size - 1) / 2) <= yy / 2 + 0.5
    region = canvas[y : y + size, x : x + size]
    region[inside[: region.shape[0], : region.shape[1]]] = rgb


def shapes_image(colour: str, shape: str, count: int, rng: random.Random, size: int = 56) -> Image.Image:
    """``count`` non-overlapping shapes in ``colour``, one per quadrant cell (side size/2 - 8), at jittered places."""
    canvas = np.zeros((size, size, 3), dtype=np.uint8)
    cell = size // 2
    side = max(4, cell - 10)
    for quadrant in rng.sample(range(4), count):
        qx, qy = (quadrant % 2) * cell, (quadrant // 2) * cell
        x, y = qx + rng.randrange(0, cell - side + 1), qy + rng.randrange(0, cell - side + 1)
        _draw(canvas, shape, x, y, side, COLOURS[colour])
    return Image.fromarray(canvas)


def image_question(kind: str, rng: random.Random, size: int = 56, with_attributes: bool = False) -> tuple:
    """(image, question, answer) for question ``kind`` in 'colour', 'count', 'shape'.

    ``with_attributes``: a fourth item, the image's words ``{"colour", "count", "shape"}`` (the
    same random draws: the image and answer do not change).
    """
    colour, shape, count = rng.choice(sorted(COLOURS)), rng.choice(SHAPES), rng.randint(1, 4)
    image = shapes_image(colour, shape, count, rng, size)
    attributes = {"colour": colour, "count": COUNT_WORDS[count - 1], "shape": shape}
    answer = attributes[kind]
    return (image, QUESTIONS[kind], answer, attributes) if with_attributes else (image, QUESTIONS[kind], answer)


def motion_clip(direction: str, rng: random.Random, size: int = 56, frames: int = 4) -> list[Image.Image]:
    """A square of a random colour moving ``direction`` by ``size // 8`` px per frame."""
    rgb = COLOURS[rng.choice(sorted(COLOURS))]
    side, step = size // 4, size // 8
    dx, dy = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}[direction]
    span = step * (frames - 1)
    lo_x, hi_x = (span, size - side) if dx < 0 else (0, size - side - span) if dx > 0 else (0, size - side)
    lo_y, hi_y = (span, size - side) if dy < 0 else (0, size - side - span) if dy > 0 else (0, size - side)
    x0, y0 = rng.randint(lo_x, hi_x), rng.randint(lo_y, hi_y)
    clip = []
    for t in range(frames):
        canvas = np.zeros((size, size, 3), dtype=np.uint8)
        _draw(canvas, "square", x0 + dx * step * t, y0 + dy * step * t, side, rgb)
        clip.append(Image.fromarray(canvas))
    return clip


def first_colour_clip(first: str, second: str, rng: random.Random, size: int = 56, frames: int = 4) -> list[Image.Image]:
    """``first``'s square appears at frame 0 or 1, ``second``'s two frames later; both stay to the end."""
    side = size // 4
    start = rng.randint(0, max(0, frames - 3))
    places = [(rng.randrange(0, size // 2 - side + 1), rng.randrange(0, size - side + 1)),
              (size // 2 + rng.randrange(0, size // 2 - side + 1), rng.randrange(0, size - side + 1))]
    rng.shuffle(places)
    clip = []
    for t in range(frames):
        canvas = np.zeros((size, size, 3), dtype=np.uint8)
        if t >= start:
            _draw(canvas, "square", *places[0], side, COLOURS[first])
        if t >= start + 2:
            _draw(canvas, "square", *places[1], side, COLOURS[second])
        clip.append(Image.fromarray(canvas))
    return clip


def video_question(kind: str, rng: random.Random, size: int = 56, frames: int = 4) -> tuple[list[Image.Image], str, str]:
    """(frames, question, answer) for ``kind`` in 'motion', 'first'."""
    if kind == "motion":
        direction = rng.choice(DIRECTIONS)
        return motion_clip(direction, rng, size, frames), QUESTIONS["motion"], direction
    first, second = rng.sample(sorted(COLOURS), 2)
    return first_colour_clip(first, second, rng, size, frames), QUESTIONS["first"], first


def answers_for(kind: str) -> tuple[str, ...]:
    """Every answer a question ``kind`` can have."""
    return {"colour": tuple(sorted(COLOURS)), "first": tuple(sorted(COLOURS)), "count": COUNT_WORDS,
            "shape": SHAPES, "motion": DIRECTIONS}[kind]


# ---------------------------------------------------------------------------- raw-modality transforms
def blacken_patches(image: Image.Image, patch: int, probability: float, rng: random.Random) -> Image.Image:
    """A copy of ``image`` with each ``patch x patch`` square (from the top-left, clipped at the borders) black w.p. ``probability``.

    Same size as the input, so the processor gives the same grid and the same number of image
    tokens; ``probability`` 0 returns an identical copy.
    """
    pixels = np.array(image.convert("RGB"))
    h, w = pixels.shape[:2]
    for y in range(0, h, patch):
        for x in range(0, w, patch):
            if rng.random() < probability:
                pixels[y : y + patch, x : x + patch] = 0
    return Image.fromarray(pixels)


def noise_frames(frames: Sequence[Image.Image], sigma: float, rng: random.Random) -> list[Image.Image]:
    """Each frame plus N(0, sigma^2) noise per pixel value (0..255 scale), clipped; seeded by ``rng``."""
    gen = np.random.default_rng(rng.randrange(2**32))
    out = []
    for frame in frames:
        pixels = np.asarray(frame.convert("RGB"), dtype=np.float32)
        noisy = np.clip(pixels + gen.normal(0.0, sigma, size=pixels.shape), 0, 255).astype(np.uint8)
        out.append(Image.fromarray(noisy))
    return out
