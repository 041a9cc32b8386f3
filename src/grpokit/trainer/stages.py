"""Stages that reshape or annotate a step's LearnBatch, enabled by config (``setup.batch_stages``).

Each stage is ``stage(ctx, lb, scores) -> (lb, metrics)`` and produces the inputs that the
methods needing them declare (``verif_mask``/``verif_adv``, ``plan_mask``). :class:`ReferenceSync`
and :class:`PreviousPolicySnapshot` are update hooks instead (``setup.update_hooks``): they keep
a role of the policy in step with the optimizer updates (a reference that follows the policy,
the weights before the last update).
"""

from __future__ import annotations

from typing import Any

import torch

from grpokit.algos.losses_extra import humanline_should_sync
from grpokit.trainer.context import StepContext
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.producers import plan_mask
from grpokit.trainer.verification import verification_step


class SelfVerification:
    """One sampled self-verification row per solution, appended to the batch (``verification.*``)."""

    def __call__(self, ctx: StepContext, lb: LearnBatch, scores: Any) -> tuple[LearnBatch, dict[str, float]]:
        def run():
            return verification_step(
                ctx.cfg, ctx.backend, lb.rollout, ctx.correct(scores), lb.rewards, lb.adv, lb.token_weights,
                ctx.prompt_texts, lambda rewards, group_ids: ctx.advantages(rewards, group_ids)[0],
            )

        merged, adv, loss_mask, weights, rewards, verif_mask, metrics = ctx.learners.on_main(run)
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

    def __call__(self, ctx: StepContext, lb: LearnBatch, scores: Any) -> tuple[LearnBatch, dict[str, float]]:
        plan_mask(ctx.tokenizer, lb, self.delimiter, first_step=ctx.step == 0)
        frac = float(lb.plan_mask.sum()) / max(float(lb.mask.sum()), 1.0)
        return lb, {"spans/plan_frac": frac}


class TurnCredit:
    """``environment.credit: reward_to_go``: each turn's tokens get the advantage of the reward from that turn on.

    The step's reward ``R_i`` (the fixed combiner's weighted sum) is split over the episode's turns:
    turn ``k`` carries ``w * r_{i,k}``, the environment's step reward times the weight of the
    ``env_return`` reward (0 without one), and the last answered turn also carries the rest of
    ``R_i`` (the other rewards judge the whole episode). Advantages are then
    :func:`~grpokit.algos.turn_credit.reward_to_go_advantages` ``[B, U]``.
    """

    def __init__(self, gamma: float, env_weight: float) -> None:
        self.gamma, self.env_weight = gamma, env_weight

    def turn_rewards(self, lb: LearnBatch) -> torch.Tensor:
        """``[B, K]`` per-turn rewards whose row sums are the step's rewards."""
        episodes = lb.rollout.episodes
        rewards = lb.rewards.nan_to_num(0.0)
        k = max([len(e["env_turn_rewards"]) for e in episodes] + [1])
        out = torch.zeros(len(episodes), k, dtype=rewards.dtype, device=rewards.device)
        for i, e in enumerate(episodes):
            turns = e["env_turn_rewards"]
            if turns:
                out[i, : len(turns)] = self.env_weight * torch.tensor(turns, dtype=rewards.dtype, device=rewards.device)
            out[i, max(len(turns) - 1, 0)] += rewards[i] - self.env_weight * float(e["env_return"])
        return out

    def __call__(self, ctx: StepContext, lb: LearnBatch, scores: Any) -> tuple[LearnBatch, dict[str, float]]:
        from grpokit.algos.turn_credit import reward_to_go_advantages

        algo = ctx.cfg.algorithm
        scale = "none" if algo.advantage == "dr_grpo" else algo.scale
        adv = reward_to_go_advantages(self.turn_rewards(lb), lb.rollout.group_ids.to(lb.rewards.device), lb.rollout.action_mask,
                                      gamma=self.gamma, scale=scale, std_mode=algo.std_mode, std_eps=algo.std_eps)
        on = lb.rollout.action_mask.bool()
        spread = [float(a[m].max() - a[m].min()) for a, m in zip(adv, on) if bool(m.any())]
        lb.adv = adv.to(lb.adv.dtype)
        return lb, {"credit/turn_spread": sum(spread) / max(len(spread), 1)}  # 0: every turn got its episode's advantage


class ReferenceSync:
    """Update hook (``setup.update_hooks``): humanline syncing, pi_ref <- the pre-update policy every k updates.

    Liu, Muennighoff, Ethayarajh, "Humanline: Online Alignment as Perceptual Loss", arXiv
    2509.24207 (humanline syncing; open-r1-humanline's ``SyncRefModelCallback``): the weights
    captured before optimizer update n are loaded into the reference after update n when
    ``n % k == 0`` (:func:`~grpokit.algos.losses_extra.humanline_should_sync`), so right after a
    sync the reference lags the policy by one update. k counts optimizer updates, so with mu =
    ``algorithm.num_iterations`` > 1 updates per batch the reference moves inside a batch, and the
    trainer rescores ``ref_logp`` before the batch's next update (the paper recomputes the
    reference log-probs in every loss). Copying right before the update is the same thing: the
    reference is not read again before the update is applied.
    """

    def __init__(self, every: int) -> None:
        self.every = every

    def __call__(self, ctx: StepContext, update: int) -> list[str]:
        """Sync before 1-based optimizer update ``update`` if it is a sync update; the inputs made stale."""
        if not humanline_should_sync(update, self.every):
            return []
        ctx.policy.sync_reference()
        return ["ref_logp"]


class PreviousPolicySnapshot:
    """Update hook (``setup.update_hooks``): before every optimizer update, keep the weights it starts from.

    Produces the policy's 'previous' role, scored into ``prev_logp`` once before each batch's first
    update: the policy one optimizer update behind, i.e. the previous iteration's pi_old (with
    mu = 1, the policy that sampled the previous batch). Reg-GRPO regresses log pi_theta / pi_prev,
    which is not identically 0 on a batch's first update (DeepVideo-R1, arXiv 2506.07464, §3.2
    [inferred reading: the authors' code was not available]). Not rescored within a batch: pi_old
    stays fixed for all mu updates of one iteration, as in the paper's per-iteration objective.
    """

    def __call__(self, ctx: StepContext, update: int) -> list[str]:
        ctx.policy.snapshot_previous()
        return []


class PreviousWeights:
    """Checkpoint part of a run that reads ``prev_logp``: the policy's 'previous' snapshot.

    A resumed run regresses its first update against the weights the interrupted run would
    have used, instead of against the current ones (rho = 0).
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.policy.previous_weights()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_previous_weights(state["weights"])

