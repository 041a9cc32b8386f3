"""Stages that reshape or annotate a step's LearnBatch, enabled by config (``setup.batch_stages``).

Each stage is ``stage(trainer, lb, scores) -> (lb, metrics)`` and produces the inputs that the
methods needing them declare (``verif_mask``/``verif_adv``, ``plan_mask``) or keeps a role of the
policy in step (a reference that follows the policy).
"""

from __future__ import annotations

from typing import Any

import torch

from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.producers import plan_mask
from grpokit.trainer.verification import verification_step


class SelfVerification:
    """One sampled self-verification row per solution, appended to the batch (``verification.*``)."""

    def __call__(self, trainer: Any, lb: LearnBatch, scores: Any) -> tuple[LearnBatch, dict[str, float]]:
        def run():
            return verification_step(
                trainer.cfg, trainer.backend, lb.rollout, trainer.correct(scores), lb.rewards, lb.adv, lb.token_weights,
                trainer._prompt_texts, lambda rewards, group_ids: trainer.advantages(rewards, group_ids)[0],
            )

        merged, adv, loss_mask, weights, rewards, verif_mask, metrics = trainer.learners.on_main(run)
        n = len(lb)
        out = LearnBatch(
            rollout=merged, adv=adv, mask=loss_mask, rewards=rewards, behaviour_logp=merged.behaviour_logp,
            token_weights=weights, verif_mask=verif_mask, verif_adv=adv, num_seqs=float(n),
        )  # normalised by the solutions: verifications add alpha-weighted terms
        return out, metrics


class PlanSpans:
    """``plan_mask``: each completion's planning span through ``delimiter`` (found in the decoded text)."""

    def __init__(self, delimiter: str) -> None:
        self.delimiter = delimiter

    def __call__(self, trainer: Any, lb: LearnBatch, scores: Any) -> tuple[LearnBatch, dict[str, float]]:
        plan_mask(trainer.tokenizer, lb, self.delimiter, first_step=trainer.step == 0)
        frac = float(lb.plan_mask.sum()) / max(float(lb.mask.sum()), 1.0)
        return lb, {"spans/plan_frac": frac}


class ReferenceSync:
    """Reference <- the pre-update policy every ``every`` steps (a reference that follows the policy)."""

    def __init__(self, every: int) -> None:
        self.every = every

    def __call__(self, trainer: Any, lb: LearnBatch, scores: Any) -> tuple[LearnBatch, dict[str, float]]:
        if trainer.step % self.every == 0:
            trainer.policy.sync_reference()
        return lb, {}
