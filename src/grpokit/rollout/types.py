"""The data passed from rollout to rewards and the learner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass
class RolloutBatch:
    """G sampled completions for each of several prompts, flattened to B = prompts x G rows.

    prompt_ids:      [B, P] left-padded prompt tokens
    prompt_mask:     [B, P] 1 = real prompt token
    completion_ids:  [B, T] right-padded completion tokens (EOS included when produced)
    completion_mask: [B, T] 1 = generated token that counts (up to and including EOS)
    group_ids:       [B] index of the prompt each row came from (0..prompts-1)
    sampling_logp:   [B, T] log-prob of each token under the sampling distribution
    truncated:       [B] True when the completion hit max_new_tokens without EOS
    prompts / completions: decoded texts per row; rows: the data row (answer, columns) per row
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    group_ids: torch.Tensor
    sampling_logp: torch.Tensor
    truncated: torch.Tensor
    prompts: list[str] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def select(self, index: torch.Tensor | slice) -> "RolloutBatch":
        """Rows ``index`` of the batch (a micro-batch), trimmed of all-pad columns."""
        idx = range(len(self))[index] if isinstance(index, slice) else index.tolist()
        sub = RolloutBatch(
            prompt_ids=self.prompt_ids[index],
            prompt_mask=self.prompt_mask[index],
            completion_ids=self.completion_ids[index],
            completion_mask=self.completion_mask[index],
            group_ids=self.group_ids[index],
            sampling_logp=self.sampling_logp[index],
            truncated=self.truncated[index],
            prompts=[self.prompts[i] for i in idx],
            completions=[self.completions[i] for i in idx],
            rows=[self.rows[i] for i in idx],
        )
        return sub

    def columns(self) -> dict[str, list]:
        """Per-row data columns (everything but the prompt) as lists, for reward functions."""
        keys = {k for row in self.rows for k in row if k != "prompt"}
        return {k: [row.get(k) for row in self.rows] for k in sorted(keys)}


@dataclass
class SamplingParams:
    """How completions are drawn."""

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False


class GenerationBackend(Protocol):
    """Anything that samples G completions per prompt and returns a RolloutBatch."""

    def generate(
        self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams
    ) -> RolloutBatch: ...
