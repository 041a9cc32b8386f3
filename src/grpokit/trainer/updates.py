"""The update half of a training step: one rollout batch -> the optimizer updates it takes.

mu = ``algorithm.num_iterations`` passes over the batch, each of ``algorithm.mini_batches``
optimizer updates on whole-group mini-batches (one update on the whole batch by default). Old
log-probs are scored once before the first update whenever the batch takes more than one (the
proximal policy, the sampler's weights); with one update they are the detached current log-probs,
for which the ratio is exactly 1. Every mini-batch's loss is normalised on its own, as one
optimizer step of TRL's ``steps_per_generation`` or one of verl's ``ppo_mini_batch_size``
updates. A batch with no loss unit takes no update and no scheduler step; an update whose
gradient is exactly 0 (every advantage 0 under a loss with no other term, or every token
clipped) is of size 0: the update hooks and the schedule count it, AdamW does not step (its
momentum would move the weights with no data behind it; TRL and verl step:
``optim.step_without_gradient``); ``learn/updates`` counts the updates AdamW applied.
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from grpokit.registry import call_with
from grpokit.trainer import producers, setup
from grpokit.trainer.learn_batch import LearnBatch, mini_batch_rows
from grpokit.trainer.learner import accumulate_gradients, rows_with_gradient, whole_groups
from grpokit.trainer.memory import allocate_gradients, release_free_memory


class UpdateSteps:
    """The :class:`~grpokit.trainer.loop.Trainer`'s updates; reads its config, policy, optimizer, scheduler and hooks."""

    def _learn(self, lb: LearnBatch) -> dict[str, float]:
        """mu passes over one batch, ``algorithm.mini_batches`` optimizer updates each: scored inputs, then the objective.

        A batch without a single loss unit (every row taken out of the loss, e.g. by a filter that
        found nothing to learn from) has nothing to learn: no forward, no optimizer update, no
        scheduler step (``learn/updates`` = 0). A batch (or mini-batch) whose gradient is exactly 0
        (every advantage 0 under a loss with no other term) gets updates of size 0, unless
        ``optim.step_without_gradient``: they count in the learning-rate schedule, which then stays
        a function of the step. The step still counts towards ``train.steps``. Metrics are those of
        the last pass, averaged over its mini-batches. ``learn/skipped_rows``: the fraction of the batch's
        rows left out of the learner; for a loss that decides per update (DisCO), the mean over the last
        pass's updates of the fraction each left out.
        """
        algo = self.cfg.algorithm
        if not bool(lb.mask.any()):
            return {"learn/updates": 0.0}
        live = self._rows_with_gradient(lb)  # None: any row may have a gradient
        if live is not None and not bool(live.any()) and not self.cfg.optim.step_without_gradient:
            for _ in range(algo.updates_per_batch):  # the gradient is exactly 0: AdamW would only coast
                self._empty_update()
            return {"loss": 0.0, "grad_norm": 0.0, "learn/updates": 0.0, "learn/skipped_rows": 1.0}  # exactly 0 both
        self.model.train()
        keep = live if self._skips_rows and not self._zero_gradient_per_update else None  # per update: decided in _update
        parts = self.learners.parts(lb.rollout, self.cfg.train.micro_batch_size, keep)  # all of it, or this rank's whole groups
        scored = producers.scheduled(self.needs, "scored", algo.updates_per_batch)  # from the methods' declared inputs
        producers.produce(scored, self.policy, lb, parts, self.learners)
        if scored:
            release_free_memory(self.policy.device)  # the scoring forwards' freed activations, before the learner's peak
        schedule = self.loss_spec.option_schedule
        if schedule is not None:
            self.objective.loss_options.update(call_with(schedule, self.step, context=self.objective.loss_options))
        self.objective.correction, correction_metrics = setup.correction_for(self.cfg, lb.rollout, self.step)
        minis = [None] if algo.mini_batches == 1 else mini_batch_rows(lb.rollout.group_ids, algo.mini_batches, self._split_seed())
        static_live = None if self._zero_gradient_per_update else live  # a row left out of every update of this batch
        applied, done, moved = 0, 0, []
        for _ in range(algo.num_iterations):
            last_pass: list[dict[str, float]] = []
            for rows in minis:
                learn, stale, stepped = self._update(lb, parts, keep, static_live, rows, first=done == 0, rescore=moved)
                last_pass.append(learn)
                applied, done = applied + stepped, done + 1
                stale = [name for name in scored if name in stale]
                if stale and done < algo.updates_per_batch:  # a role moved: the batch's next updates read it anew
                    if rows is None:
                        producers.produce(stale, self.policy, lb, parts, self.learners)
                    else:  # each later mini-batch rescores its own rows right before its update
                        moved = [name for name in scored if name in stale or name in moved]
        learn = {k: sum(m[k] for m in last_pass if k in m) / sum(k in m for m in last_pass) for m in last_pass for k in m}
        learn["learn/updates"] = float(applied)
        if keep is not None:
            learn["learn/skipped_rows"] = 1.0 - float(keep.float().mean())
        return {**learn, **correction_metrics}

    def _update(self, lb: LearnBatch, parts, keep, live, rows, first: bool, rescore: list[str]) -> tuple[dict[str, float], list[str], bool]:
        """One optimizer update on the whole batch (``rows`` None) or mini-batch ``rows``: (metrics, roles made stale, AdamW stepped).

        rescore: scored inputs whose role moved since the batch was scored (a reference sync), scored
        anew on the mini-batch's rows first.
        """
        if rows is not None:
            lb = lb.select(rows)
            if (live is not None and not bool(live[rows].any()) and not self.cfg.optim.step_without_gradient) or not bool(lb.mask.any()):
                return {"loss": 0.0, "grad_norm": 0.0}, self._empty_update(), False  # no gradient here: an update of size 0
            keep = None if keep is None or not bool(keep[rows].any()) else keep[rows]
            parts = self.learners.parts(lb.rollout, self.cfg.train.micro_batch_size, keep)
            producers.produce(rescore, self.policy, lb, parts, self.learners)
        if not first:
            producers.produce(producers.scheduled(self.needs, "per_update"), self.policy, lb, parts, self.learners)
        skipped = {}
        if self._zero_gradient_per_update:  # e.g. DisCO: the tied groups' gradient is 0 while its constraint is slack
            live = self._rows_with_gradient(lb)  # of this (mini-)batch, given the statistic just produced
            if live is not None and not bool(live.any()) and not self.cfg.optim.step_without_gradient:
                return {"loss": 0.0, "grad_norm": 0.0, "learn/skipped_rows": 1.0}, self._empty_update(), False
            if live is not None and self._skips_rows:
                parts = self.learners.parts(lb.rollout, self.cfg.train.micro_batch_size, live)
            skipped = {"learn/skipped_rows": 0.0 if live is None or not self._skips_rows else 1.0 - float(live.float().mean())}
        if not self.learners.sharded:  # FSDP gives the shards their gradients
            allocate_gradients(list(self.policy.trainable_parameters()))
        learn = accumulate_gradients(self.policy, parts, lb, self.objective)
        learn = self.learners.reduce_metrics(learn, parts, lb.mask)
        stale = [name for hook in self.update_hooks for name in hook(self.context, self.updates + 1)]  # pre-update weights
        learn["grad_norm"] = self._optimizer_step()
        return {**learn, **skipped}, stale, self._steps(learn["grad_norm"])

    def _empty_update(self) -> list[str]:
        """An update of size 0: the hooks (a reference sync every k) and the schedule count it, AdamW does not step.

        Returns the roles the hooks moved.
        """
        stale = [name for hook in self.update_hooks for name in hook(self.context, self.updates + 1)]
        _count_update_of_size_0(self.scheduler)
        return stale

    def _split_seed(self) -> int:
        """The seed of this step's mini-batch split: a function of ``train.seed`` and the step (exact on resume)."""
        return self.cfg.train.seed * 1_000_003 + self.step

    @property
    def _zero_gradient_per_update(self) -> bool:
        """Whether the loss's zero-advantage property depends on a per-update statistic (a callable registration)."""
        return callable(self.loss_spec.zero_advantage_zero_gradient)

    @property
    def _skips_rows(self) -> bool:
        """Whether rows without gradient are left out of the forward/backward (one learner, ``train.skip_zero_advantage``)."""
        return self.cfg.train.skip_zero_advantage and not self.learners.distributed

    def _rows_with_gradient(self, lb: LearnBatch) -> Optional[torch.Tensor]:
        """``[B]`` rows that can have a gradient (see learner.rows_with_gradient), None when any row may.

        A loss registered with a callable ``zero_advantage_zero_gradient(constraint_kl, **options)``
        (DisCO: its KL penalty has a gradient on every row while ``D > delta``) is asked with the
        batch's current statistic (None before the first update: the weights are the sampler's).
        Before a batch's first update that makes an all-zero batch skippable by induction: no update
        moves the weights, so every later update's statistic is 0 as well. A group-wise loss keeps
        or leaves out whole groups (a mixed group's row with advantage 0 still shares its group's term).
        """
        algo = self.cfg.algorithm
        holds = self.loss_spec.zero_advantage_zero_gradient
        if callable(holds):
            holds = call_with(holds, lb.constraint_kl, context=self.objective.loss_options)
        if not holds:
            return None  # only losses whose gradient is exactly 0 where the advantage is 0
        # reference log-probs alone do not stop it: the KL term exists only with beta > 0, and a loss that reads
        # ref_logp (humanline) has declared that its own gradient is 0 where the advantage is
        own = self.loss_spec.rows_with_own_gradient  # a term beside the advantage's that says where it acts (KDRL)
        if algo.beta > 0 or algo.entropy_coef > 0 or algo.entropy_band_coef > 0 or ("teacher_logp" in self.needs and own is None):
            return None  # a KL, entropy or distillation term has a gradient on every row
        live = rows_with_gradient(lb.adv, lb.mask, lb.token_weights)  # advantages are the same on every rank
        if live is not None and own is not None:
            more = call_with(own, lb.rewards, lb.rollout.group_ids, context=self.objective.loss_options)
            if more is None:
                return None
            live = live | (more.to(live.device) & (lb.mask > 0).any(-1))
            live = None if bool(live.all()) else live
        if live is not None and self.loss_spec.groupwise:
            live = whole_groups(live, lb.rollout.group_ids)
        return live

    @property
    def updates(self) -> int:
        """Optimizer updates applied so far: the scheduler steps once per update and is checkpointed with it."""
        return self.scheduler.last_epoch

    def _optimizer_step(self) -> float:
        """The global grad norm; AdamW steps unless it is exactly 0 (an update of size 0, see the module doc).

        That also catches an update whose every token was clipped (e.g. GSPO's second update at lr >> its
        clip range), which no advantage check can see in advance.
        """
        clip = self.cfg.optim.max_grad_norm
        params = list(self.policy.trainable_parameters())
        self.learners.all_reduce_gradients(params)  # data-parallel learners: sum of the ranks' gradients
        norm = self.learners.clip_gradients(params, clip if clip > 0 else float("inf"))  # sharded: the global norm
        if self._steps(norm):
            self.optimizer.step()
            self.scheduler.step()
        else:
            _count_update_of_size_0(self.scheduler)
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _steps(self, grad_norm: float) -> bool:
        """Whether AdamW applies an update of this global gradient norm (not on exactly 0, unless asked)."""
        return grad_norm != 0.0 or self.cfg.optim.step_without_gradient


def _count_update_of_size_0(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """Advance the schedule for an update AdamW did not apply (intended: torch's order warning is silenced)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)` before")
        scheduler.step()
