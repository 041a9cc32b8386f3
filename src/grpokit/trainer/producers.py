"""Producers of the inputs that registered methods declare (the table is in ``trainer/inputs.py``).

Each producer fills named fields of the step's :class:`~grpokit.trainer.learn_batch.LearnBatch`
from the policy, the batch or the rewards. Which ones run is read from the methods'
registrations (``needed_inputs``), never from method names.
"""

from __future__ import annotations

from typing import Any

import torch

from grpokit.policies.base import Policy
from grpokit.rollout.types import RolloutBatch
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.spans import span_mask_through_text

# Scored inputs: the policy role whose no-grad log-probs fill the field.
SCORED_ROLES = {"old_logp": "current", "ref_logp": "reference", "teacher_logp": "teacher"}


def score_inputs(policy: Policy, lb: LearnBatch, parts: list[tuple[torch.Tensor, RolloutBatch]], names: list[str]) -> None:
    """Fill each scored field of ``names`` (see :data:`SCORED_ROLES`) micro-batch by micro-batch."""
    for name in names:
        role = SCORED_ROLES[name]
        for rows, mb in parts:
            lb.set_rows(name, rows, policy.score(mb, role))


def constraint_kl(policy: Policy, lb: LearnBatch, parts, learners: Any) -> torch.Tensor:
    """``[]`` token-mean of ``old_logp - logp`` over the whole batch at the current weights, detached.

    The trust-region statistic of a constrained objective (e.g. DisCO's squared-hinge penalty);
    data-parallel learners sum it over ranks.
    """
    diff = 0.0
    for rows, mb in parts:
        current = policy.score(mb, "current")
        old = lb.old_logp[rows, : current.shape[1]]
        diff += float(((old - current) * lb.mask[rows, : current.shape[1]]).sum())
    diff = learners.all_sum(diff)
    return torch.tensor(diff / lb.num_tokens, device=lb.mask.device)


def plan_mask(tokenizer: Any, lb: LearnBatch, delimiter: str, first_step: bool) -> None:
    """``lb.plan_mask``: the planning span (through ``delimiter``) of every row, found in the decoded text.

    On the run's first step, a delimiter found in none of the sampled completions is an error
    before any update: the span-aware loss would otherwise train its answer-span term alone.
    """
    b = lb.rollout
    spans = span_mask_through_text(tokenizer, b.completion_ids, b.completion_mask, delimiter)
    if first_step and not bool(spans.any()):
        raise ValueError(
            f"algorithm.plan_delimiter {delimiter!r} occurs in none of the {len(b)} completions sampled at step 1: "
            "set it to text the policy writes (see the samples in the run folder) or choose another algorithm.loss"
        )
    lb.plan_mask = spans[:, : lb.mask.shape[1]] * lb.mask


def validation_means(matrix: torch.Tensor) -> torch.Tensor:
    """``[K]`` per-objective means of the batch's reward columns (an online validation vector) [inferred]."""
    return matrix.nan_to_num(0.0).mean(0)
