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
        g = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(len(self.rows), generator=g).tolist()

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
