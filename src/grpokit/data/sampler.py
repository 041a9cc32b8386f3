"""Seeded, resumable order over training prompts (epoch-wise permutations)."""

from __future__ import annotations

from typing import Any

import torch


class PromptSampler:
    """Yields training rows in a seeded order; ``state()``/``load_state()`` make it resumable.

    Epoch e uses permutation ``randperm(n, generator=seed + e)``, so the order depends only on
    (seed, position) and a resumed run sees exactly the prompts the killed run would have seen.
    """

    def __init__(self, rows: list[dict], seed: int) -> None:
        if not rows:
            raise ValueError("the training set is empty: check data.path / data.n_train")
        self.rows = rows
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        g = torch.Generator(device="cpu").manual_seed(self.seed + epoch)  # data order: CPU on every device
        return torch.randperm(len(self.rows), generator=g, device="cpu").tolist()

    def next_batch(self, n: int) -> list[dict]:
        """The next ``n`` rows, crossing epoch boundaries as needed."""
        out = []
        while len(out) < n:
            if self.index >= len(self.rows):
                self.epoch += 1
                self.index = 0
                self._perm = self._permutation(self.epoch)
            out.append(self.rows[self._perm[self.index]])
            self.index += 1
        return out

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed}

    def load_state(self, state: dict[str, Any]) -> None:
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        self.index = state["index"]
        self._perm = self._permutation(self.epoch)


class CurriculumSampler:
    """A PromptSampler whose draws pass through a curriculum (filter, hint, perturb).

    Same interface as :class:`PromptSampler` plus ``observe(rows, group_accuracy)``, which the
    trainer calls after each step and ``curriculum`` for checkpointing. The augmentation RNG is
    derived from (seed, data position), so a resumed run draws the same augmentations.
    """

    def __init__(self, sampler: PromptSampler, curriculum: Any) -> None:
        self.sampler = sampler
        self.curriculum = curriculum
        self.rows = sampler.rows

    def next_batch(self, n: int) -> list[dict]:
        import random

        rng = random.Random(f"{self.sampler.seed}-{self.sampler.epoch}-{self.sampler.index}")
        out: list[dict] = []
        drawn = 0
        while len(out) < n:
            if drawn > 4 * len(self.rows) + n:
                raise ValueError("data.curriculum filters out every training prompt: loosen data.curriculum_options")
            row = self.sampler.next_batch(1)[0]
            drawn += 1
            if self.curriculum.keep(row):
                out.append(row)
        return self.curriculum.transform(out, rng)

    def observe(self, rows: list[dict], group_accuracy: list[float]) -> None:
        self.curriculum.observe(rows, group_accuracy)

    def metrics(self) -> dict[str, float]:
        return {f"curriculum/{k}": float(v) for k, v in self.curriculum.metrics().items()}

    def state(self) -> dict[str, Any]:
        return self.sampler.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.sampler.load_state(state)
