"""Built-in image and video tasks (TRL's ``images`` column; a ``video`` column of frames), and their augmentations.

``vision_qa``: one 56 px image of 1-4 shapes, a colour / count / shape question, a one-word
answer. ``video_qa``: a 4-frame clip, a motion-direction or which-colour-first question. Rows carry
``id`` (the curricula key: the question text repeats across images), ``kind`` and ``answer``.

DeepVideo-R1's difficulty-aware augmentation in the video domain ("DeepVideo-R1: Video
Reinforcement Fine-Tuning via Difficulty-aware Regressive GRPO", arXiv 2506.07464, §3.3):

* too easy -> :func:`noisy_frames_copy`: the clip (or image) with Gaussian frame noise, sigma
  growing with the difficulty gap (the paper's difficulty-increasing augmentation);
* too hard -> the paper's difficulty-decreasing augmentation is a prefix of the policy's own best
  answer-conditioned trace (``curriculum_options.hint: trace``, :mod:`grpokit.data.trace_hints`);
  :func:`visual_hint` is grpokit's fixed stand-in (``hint: method``): one sentence per question
  kind saying *where to look*, never the answer.
"""

from __future__ import annotations

import random
from typing import Any, Optional

from grpokit.data.tasks import TASKS, TaskSplits
from grpokit.families.vision_lm.procedural import COLOURS, COUNT_WORDS, SHAPES, image_question, noise_frames, video_question

ONE_WORD = " Answer with one word."
IMAGE_KINDS = ("colour", "count", "shape")
VIDEO_KINDS = ("motion", "first")
HINTS = {
    "colour": "Look at the colour of each shape.",
    "count": "Count each shape in the image.",
    "shape": "Look at the edges of each shape.",
    "motion": "Look at where the square is in the first frame and in the last frame, and compare.",
    "first": "Look at the first frame: which square is already there?",
}


def _splits(task: str, seed: int, n_train: int, n_heldout: int, draw) -> TaskSplits:
    """Held-out rows from their own seeded stream, then training rows; no image (or clip) occurs in both."""
    from grpokit.data.files import visual_key  # data.files imports the task registry: late

    if n_train < 0 or n_heldout < 0:
        raise ValueError(f"task '{task}': n_train and n_heldout must be >= 0")
    seen: set[str] = set()

    def fill(split: str, n: int) -> list[dict]:
        rng, rows = random.Random(f"grpokit/{task}/{split}/{seed}"), []
        while len(rows) < n:
            row = draw(rng, split)
            key = visual_key(row)
            if key in seen:
                continue
            seen.add(key)
            rows.append({**row, "id": f"{task}/{split}/{seed}/{len(rows)}", "task": task})
        return rows

    heldout = fill("heldout", n_heldout)  # first: it does not change when n_train changes
    return TaskSplits(train=fill("train", n_train), heldout=heldout)


def _check_kinds(task: str, kinds: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    bad = [k for k in kinds if k not in allowed]
    if not kinds or bad:
        raise ValueError(f"task '{task}': option 'kinds' must be a non-empty list of {', '.join(allowed)}; got {list(kinds)}")
    return kinds


@TASKS.register("vision_qa")
def vision_qa(seed: int, n_train: int, n_heldout: int, *, kinds: Any = IMAGE_KINDS, size: int = 56,
              caption_train: Optional[float] = None, caption_heldout: Optional[float] = None) -> TaskSplits:
    """Image questions (``images``: one PIL image) with one-word answers; ``kinds`` of colour, count, shape.

    ``caption_train`` / ``caption_heldout``: each row of that split also gets a caption before its question
    ("Hint: two red circle."), whose word for the asked attribute is the true one with
    that probability and a wrong one otherwise (the other words are true); None: no caption. A
    caption true on most training rows and false on every held-out row is a text shortcut that
    scores in training and fails held out: only a policy that reads the image answers both (the
    perception failure PAPO targets, "Perception-Aware Policy Optimization for Multimodal
    Reasoning", arXiv 2507.06448, Sec. 1).
    """
    kinds = _check_kinds("vision_qa", kinds, IMAGE_KINDS)
    truth = {"train": caption_train, "heldout": caption_heldout}
    for split, p in truth.items():
        if p is not None and not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"task 'vision_qa': option 'caption_{split}' must be a probability in [0, 1] or null; got {p!r}")

    # captions draw from their own streams: the images, questions and answers are those of the task without them
    caption_rng = {split: random.Random(f"grpokit/vision_qa/caption/{split}/{seed}") for split in truth}

    def draw(rng: random.Random, split: str):
        kind = rng.choice(kinds)
        image, question, answer, attributes = image_question(kind, rng, size, with_attributes=True)
        prompt = question + ONE_WORD
        if truth[split] is not None:
            crng = caption_rng[split]
            prompt = caption_text(kind, attributes, crng.random() < float(truth[split]), crng) + " " + prompt
        return {"prompt": prompt, "images": [image], "answer": answer, "kind": kind}

    return _splits("vision_qa", seed, n_train, n_heldout, draw)


def caption_text(kind: str, attributes: dict[str, str], true: bool, rng: random.Random) -> str:
    """'Hint: two red circle.' with the asked ``kind``'s word replaced by another value when not ``true``.

    Words the tiny VLM's word-level vocabulary holds (no plurals), so the caption is read, never ``<unk>``.
    """
    words = dict(attributes)
    if not true:
        choices = {"colour": sorted(COLOURS), "count": list(COUNT_WORDS), "shape": list(SHAPES)}[kind]
        words[kind] = rng.choice([w for w in choices if w != attributes[kind]])
    return f"Hint: {words['count']} {words['colour']} {words['shape']}."


@TASKS.register("video_qa")
def video_qa(seed: int, n_train: int, n_heldout: int, *, kinds: Any = VIDEO_KINDS, size: int = 56, frames: int = 4) -> TaskSplits:
    """Clip questions (``video``: ``frames`` PIL frames) with one-word answers; ``kinds`` of motion, first."""
    kinds = _check_kinds("video_qa", kinds, VIDEO_KINDS)

    def draw(rng: random.Random, split: str):
        kind = rng.choice(kinds)
        clip, question, answer = video_question(kind, rng, size, frames)
        return {"prompt": question + ONE_WORD, "video": clip, "answer": answer, "kind": kind}

    return _splits("video_qa", seed, n_train, n_heldout, draw)


# ---------------------------------------------------------------------------- augmentations
def noisy_frames_copy(row: dict, strength: float, rng: random.Random, base_sigma: float = 20.0,
                      max_sigma: float = 80.0) -> Optional[dict]:
    """A harder copy: every frame (or image) plus N(0, sigma^2) noise, sigma = base + strength (max - base); same answer."""
    sigma = base_sigma + min(max(strength, 0.0), 1.0) * (max_sigma - base_sigma)
    if row.get("video") is not None:
        return {**row, "video": noise_frames(row["video"], sigma, rng)}
    if row.get("images"):
        return {**row, "images": noise_frames(row["images"], sigma, rng)}
    return None


def visual_hint(row: dict, fraction: float, rng: random.Random) -> Optional[str]:
    """Where to look for the row's question kind (never the answer word; None for a row of unknown kind)."""
    hint = HINTS.get(row.get("kind", ""))
    if hint is None:
        return None
    words = {w.strip(".,?:!").lower() for w in hint.split()}
    if str(row.get("answer", "")).lower() in words:
        return None  # would name the answer
    return "Hint: " + hint
