"""What a batch stage, a reward combiner or an update hook may read of a run: a narrow view, never the Trainer.

Stages (``setup.batch_stages``) are called ``stage(ctx, lb, scores) -> (lb, metrics)``, update
hooks ``hook(ctx, update) -> stale input names``, the reward combination ``combiner(scores,
batch, ctx)``. Everything they may read is a field here; none of them can reach the optimizer,
the sampler state or a private attribute of the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass
class StepContext:
    """The run as its stages see it.

    cfg:          the run's Config (read-only by convention)
    policy:       the run's Policy (``policy.backend``: its sampler; ``policy.module``: the trained module)
    tokenizer:    the policy's tokenizer (text families; a family's own object otherwise)
    learners:     the data-parallel learner group (``on_main``, ``distributed``, ``reduce_metrics``)
    judge:        the accuracy reward (value >= 1 = correct)
    rewards:      every reward of the run
    heldout:      the held-out rows
    prompt_texts: ``rows -> [str]`` prompt texts as the policy renders them
    advantages:   ``(rewards [B], group_ids [B], **inputs) -> (adv [B], metrics)`` of the configured estimator
    correct:      ``scores -> [B] bool``: the judge scored the completion correct
    objective:    the configured loss (``grpokit.trainer.learner.Objective``)
    zero_grad:    clears the parameters' gradients (a producer that back-propagates extra losses)
    lr:           ``() -> float``: the learning rate of the next update
    step:         training steps completed so far (0 while the first step runs)
    """

    cfg: Any
    policy: Any
    tokenizer: Any
    learners: Any
    judge: Any
    rewards: list
    heldout: list[dict]
    prompt_texts: Callable[[list[dict]], list[str]]
    advantages: Callable[..., tuple[torch.Tensor, dict]]
    correct: Callable[[Any], torch.Tensor]
    objective: Any
    zero_grad: Callable[[], None]
    lr: Callable[[], float]
    step: int = 0

    @property
    def backend(self) -> Any:
        """The policy's sampler (generation backend)."""
        return self.policy.backend
