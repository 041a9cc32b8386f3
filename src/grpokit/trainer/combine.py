"""The reward stage's last step: several reward columns -> the one reward the advantage sees.

The configured combiner is a registered function; the inputs it declares (``objective_grads``:
per-objective policy gradients; ``validation``: per-objective means of a held-out validation
batch, once per learner step) are produced here.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from grpokit.registries import get_registry
from grpokit.registry import call_with
from grpokit.trainer.context import StepContext
from grpokit.trainer.inputs import TRAINER_OPTIONS
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.learner import micro_batches, objective_gradients
from grpokit.trainer.producers import validation_means
from grpokit.trainer.setup import new_state


class RewardCombination:
    """Combines a batch's reward columns with ``reward_combiner`` (stateful combiners keep ``state``)."""

    def __init__(self, cfg: Any, rewards: list) -> None:
        self.cfg = cfg
        self.spec = get_registry("combiner").spec(cfg.reward_combiner.name)
        self.state = new_state(self.spec)
        self.weight_of = {r.name: r.weight for r in rewards}
        self.validated_step: int | None = None  # the learner step whose weights the last validation measured

    def __call__(self, scores: Any, batch: Any, ctx: StepContext) -> tuple[torch.Tensor, dict[str, float]]:
        """``([B] total reward, metrics)`` of ``scores`` (per-reward columns) for ``batch``."""
        names = list(scores.per_reward)
        matrix = torch.stack([scores.per_reward[n] for n in names], dim=1)  # [B, K]
        weights = torch.tensor([self.weight_of[n.split("/")[0]] for n in names], dtype=torch.float32, device=matrix.device)
        options = {k: v for k, v in self.cfg.reward_combiner.options.items() if k not in TRAINER_OPTIONS["combiner"]}
        context: dict[str, Any] = {"weights": weights, "state": self.state}
        if "objective_grads" in self.spec.inputs:
            context["objective_grads"] = self._objective_grads(batch, matrix.nan_to_num(0.0), ctx)
            context["lr"] = ctx.lr()
        metrics: dict[str, float] = {}
        if "validation" in self.spec.inputs:
            context["validation"] = self._validation(names, ctx)
            if context["validation"] is not None:
                metrics.update({f"combiner/validation{k}": float(v) for k, v in enumerate(context["validation"])})
        total, self.state, m = call_with(self.spec.fn, matrix, batch.group_ids, options=options, context=context)
        return total, {**{k: float(v) for k, v in m.items()}, **metrics}

    def _validation(self, names: list[str], ctx: StepContext) -> torch.Tensor | None:
        """``[K]`` held-out validation means with the current weights, once per learner step (else None).

        Called while step t+1's rewards are combined, before its update, so the weights are those
        after step t: the vector is the validation after step t and its multiplier scales step
        t+1 (at step 1: the initial model, the reference). Dynamic sampling's further rounds of
        the same step reuse it (None: the combiner keeps its multiplier). ``validation_prompts``
        (a trainer-read option, default 16 [inferred]; 0 = all) held-out rows, the first ones.
        """
        if self.validated_step == ctx.step:
            return None
        self.validated_step = ctx.step
        n = int(self.cfg.reward_combiner.options.get("validation_prompts", 16))
        rows = ctx.heldout if n == 0 else ctx.heldout[:n]
        return validation_means(
            ctx.backend, rows, ctx.prompt_texts(rows), ctx.rewards, names,
            self.cfg.rollout.max_new_tokens, timeout_s=self.cfg.train.reward_timeout_s,
        )

    def _objective_grads(self, batch: Any, matrix: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        """``[K, P]`` policy-loss gradients, one per objective's own advantage (see learner.objective_gradients)."""
        device = batch.completion_mask.device
        lb = LearnBatch(rollout=batch, adv=torch.zeros(len(batch), device=device), mask=batch.completion_mask,
                        rewards=matrix[:, 0].to(device), behaviour_logp=batch.behaviour_logp)
        advantage: Callable = lambda rewards: ctx.advantages(rewards.to(device), batch.group_ids)[0]  # noqa: E731
        return objective_gradients(
            ctx.policy, micro_batches(batch, self.cfg.train.micro_batch_size), lb, matrix, dict(self.cfg.reward_combiner.options),
            advantages=advantage, objective=ctx.objective, zero_grad=ctx.zero_grad,
        )
