"""Procedural conditions and images for the tiny flow-matching policy, and the ``flow_images`` task.

A condition is (colour, count): "one red square", "two blue squares". Images are RGB on black,
values in [0, 1], shape ``[H, W, 3]`` (8×8 by default): ``count`` non-touching squares of side
⌈3·H/8⌉ (one square) or ⌈2·H/8⌉ (two). The class id of a condition is
``colour_index · len(COUNTS) + count − 1``; the null class of classifier-free guidance is
``num_classes`` (one past the last).

``flow_images`` rows: ``prompt``, ``colour``, ``count``, ``class_id``, ``seed`` (the row's fixed
initial-noise seed, so a held-out row is the same condition *and* the same noise before and
after training) and ``answer`` (the colour: a text judge's view). The held-out rows are every
condition with their own noise seeds, drawn first from their own stream.
"""

from __future__ import annotations

import random

import numpy as np

from grpokit.data.tasks import TASKS, TaskSplits

PALETTE = {
    "red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0),
    "yellow": (1.0, 1.0, 0.0), "magenta": (1.0, 0.0, 1.0), "cyan": (0.0, 1.0, 1.0),
}
COLOURS = tuple(PALETTE)
COUNTS = (1, 2)
NUMBER_WORDS = {1: "one", 2: "two"}


def class_id(colour: str, count: int) -> int:
    return COLOURS.index(colour) * len(COUNTS) + COUNTS.index(count)


def condition_of(class_index: int) -> tuple[str, int]:
    return COLOURS[class_index // len(COUNTS)], COUNTS[class_index % len(COUNTS)]


NUM_CLASSES = len(COLOURS) * len(COUNTS)


def prompt_for(colour: str, count: int) -> str:
    return f"{NUMBER_WORDS[count]} {colour} square{'s' if count > 1 else ''}"


def partner_colour(colour: str) -> str:
    """The fixed wrong colour of the noisy prior: the next palette colour, cyclically [inferred, as the tiny VLM's prior]."""
    return COLOURS[(COLOURS.index(colour) + 1) % len(COLOURS)]


def draw_image(colour: str, count: int, rng: random.Random, size: int = 8) -> np.ndarray:
    """``[size, size, 3]`` float32: ``count`` squares of ``colour`` at random non-touching places on black."""
    side = max(1, -(-3 * size // 8)) if count == 1 else max(1, -(-2 * size // 8))
    image = np.zeros((size, size, 3), dtype=np.float32)
    taken = np.zeros((size, size), dtype=bool)
    placed = 0
    while placed < count:
        r, c = rng.randrange(size - side + 1), rng.randrange(size - side + 1)
        lo_r, lo_c = max(r - 1, 0), max(c - 1, 0)
        if taken[lo_r : r + side + 1, lo_c : c + side + 1].any():  # touching another square: place again
            continue
        taken[r : r + side, c : c + side] = True
        image[r : r + side, c : c + side] = PALETTE[colour]
        placed += 1
    return image


def noisy_prior_batch(n: int, rng: random.Random, p_correct: float = 0.5, size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(images ``[n, size, size, 3]``, class ids ``[n]``): the drawn colour is the label's with probability ``p_correct``, else its partner."""
    images, labels = [], []
    for _ in range(n):
        label = rng.randrange(NUM_CLASSES)
        colour, count = condition_of(label)
        drawn = colour if rng.random() < p_correct else partner_colour(colour)
        images.append(draw_image(drawn, count, rng, size))
        labels.append(label)
    return np.stack(images), np.asarray(labels, dtype=np.int64)


@TASKS.register("flow_images")
def flow_images(seed: int, n_train: int, n_heldout: int, *, colours: list | None = None, counts: list | None = None) -> TaskSplits:
    """Conditions for the flow-matching image policy: (colour, count) prompts with fixed initial-noise seeds.

    Options: ``colours`` / ``counts`` restrict the conditions (default: all 6 colours × counts 1, 2).
    Held-out rows cycle through the conditions in order, each with its own noise seed from the
    held-out stream (fixed before and after training); training rows draw conditions at random.
    """
    colours = list(colours or COLOURS)
    counts = list(counts or COUNTS)
    bad = [c for c in colours if c not in PALETTE] + [str(k) for k in counts if k not in COUNTS]
    if bad:
        raise ValueError(f"task 'flow_images': unknown colours/counts {bad}; colours from {list(COLOURS)}, counts from {list(COUNTS)}")
    conditions = [(c, k) for c in colours for k in counts]

    def row(colour: str, count: int, noise_seed: int, split: str, i: int) -> dict:
        return {"prompt": prompt_for(colour, count), "colour": colour, "count": count, "class_id": class_id(colour, count),
                "seed": noise_seed, "answer": colour, "id": f"flow_images/{split}/{seed}/{i}", "task": "flow_images"}

    held_rng = random.Random(f"grpokit/flow_images/heldout/{seed}")
    heldout = [row(*conditions[i % len(conditions)], held_rng.randrange(2**31), "heldout", i) for i in range(n_heldout)]
    train_rng = random.Random(f"grpokit/flow_images/train/{seed}")
    train = [row(*train_rng.choice(conditions), train_rng.randrange(2**31), "train", i) for i in range(n_train)]
    return TaskSplits(train=train, heldout=heldout)
