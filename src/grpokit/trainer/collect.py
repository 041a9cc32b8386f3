"""Collect one training batch: sample groups, score them, shape rewards, optionally refill.

DAPO's dynamic sampling (Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at
Scale", arXiv 2503.14476, §3.2 and Algorithm 1) lives here: a group is informative when its
*outcome* reward (the accuracy judge's column, before the combiner and before length shaping)
is not the same for every completion, i.e. ``0 < #correct < G`` for a 0/1 or ±1 judge.
Uninformative groups are dropped and more prompts are sampled, up to ``max_sampling_rounds``
rounds, until ``prompts_per_step`` informative groups are collected. DAPO's soft overlong
punishment is added to the total reward here too; it never decides whether a group is kept.

When the rounds run out (``dynamic_sampling/exhausted`` = 1) the paper's loop would keep
sampling (its public code stops the run instead). Here the step trains on the informative groups
found so far, a smaller batch [inferred]; when none was found, the step returns the last round for
its metrics and :class:`InformativeGroups` takes every row out of the loss, so the trainer makes
no optimizer update at all (a batch without a loss unit has nothing to learn).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from grpokit.algos.filters import dynamic_sampling, overlong_punishment
from grpokit.config.schema import Config
from grpokit.data.sampler import PromptSampler
from grpokit.rewards import NamedReward, RewardScores, score_completions
from grpokit.families.policy import Policy
from grpokit.rollout.types import RolloutBatch, SamplingParams, concat_batches, renumber_groups
from grpokit.trainer.context import StepContext
from grpokit.trainer.learn_batch import LearnBatch


def select_scores(scores: RewardScores, index: torch.Tensor) -> RewardScores:
    return RewardScores(
        per_reward={k: v[index] for k, v in scores.per_reward.items()},
        total=scores.total[index],
        failures=scores.failures,
    )


def concat_scores(parts: list[RewardScores]) -> RewardScores:
    failures: dict[str, int] = {}
    for p in parts:
        for k, v in p.failures.items():
            failures[k] = failures.get(k, 0) + v
    return RewardScores(
        per_reward={k: torch.cat([p.per_reward[k] for p in parts]) for k in parts[0].per_reward},
        total=torch.cat([p.total for p in parts]),
        failures=failures,
    )


def informative_rows(scores: RewardScores, group_ids: torch.Tensor, outcome: str) -> torch.Tensor:
    """``[B]`` bool: the row's group has outcome rewards that are not all equal (DAPO eq. 11).

    ``outcome`` names the accuracy judge's column of ``scores.per_reward`` (not applicable = 0,
    as for accuracy); the combined, length-shaped ``scores.total`` is not consulted.
    """
    values = scores.per_reward[outcome].nan_to_num(0.0)
    keep, _ = dynamic_sampling(values, group_ids.to(values.device))
    return keep


class InformativeGroups:
    """Batch stage of dynamic sampling: rows of uninformative groups leave the loss (mask 0).

    A no-op on a batch that :func:`collect_rounds` filled (every group is informative); on the
    last round returned when no informative group was found, it empties the loss mask, so the
    trainer takes no optimizer update on that step. Only the ``len(scores)`` sampled rows are
    judged: rows a stage appended after them (self-verifications) keep their own mask.
    """

    def __call__(self, ctx: StepContext, lb: LearnBatch, scores: RewardScores) -> tuple[LearnBatch, dict[str, float]]:
        n = len(scores.total)
        keep = informative_rows(scores, lb.rollout.group_ids[:n], ctx.judge.name).to(lb.mask.device)
        if not bool(keep.all()):
            lb.mask = lb.mask.clone()
            lb.mask[:n] *= keep[:, None].to(lb.mask.dtype)
        return lb, {}


def _sample_and_score(
    cfg: Config, policy: Policy, rows: list[dict], render: Callable, rewards: list[NamedReward],
    combine: Optional[Callable] = None,
) -> tuple[RolloutBatch, RewardScores, dict[str, float]]:
    r = cfg.rollout
    params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k, min_new_tokens=r.min_new_tokens)
    batch = policy.sample(render(rows), rows, r.group_size, params)
    return (batch, *score_batch(cfg, batch, rewards, combine))


def score_batch(
    cfg: Config, batch: RolloutBatch, rewards: list[NamedReward], combine: Optional[Callable] = None
) -> tuple[RewardScores, dict[str, float]]:
    """Rewards of a sampled batch: every reward column, the combiner, DAPO's overlong punishment."""
    r = cfg.rollout
    scores = score_completions(
        rewards, batch.prompts, batch.completions, batch.columns(), on_error=cfg.train.on_reward_error,
        group_ids=batch.group_ids.tolist(), timeout_s=cfg.train.reward_timeout_s,
    )
    metrics: dict[str, float] = {}
    if combine is not None:
        scores.total, combine_metrics = combine(scores, batch)
        metrics.update(combine_metrics)
    if cfg.algorithm.overlong_cache:
        lengths = batch.completion_mask.sum(-1).float() + batch.truncated.float()  # truncated = over the cap
        r_len, m = overlong_punishment(lengths, max_len=r.max_new_tokens, cache_len=cfg.algorithm.overlong_cache)
        scores.total = scores.total + r_len
        metrics.update({k: float(v) for k, v in m.items()})
    return scores, metrics


def collect_batch(
    cfg: Config,
    policy: Policy,
    sampler: "PromptSampler",
    render: Callable[[list[dict]], list[str]],
    rewards: list[NamedReward],
    pad_id: int,
    combine: Optional[Callable] = None,
    *,
    outcome: str,
) -> tuple[RolloutBatch, RewardScores, dict[str, float]]:
    """One step's scored batch of ``prompts_per_step`` groups sampled in-process (see :func:`collect_rounds`).

    ``outcome``: the reward column that judges correctness (``setup.accuracy_judge``).
    """
    n = cfg.rollout.prompts_per_step
    sample_round = lambda: _sample_and_score(cfg, policy, sampler.next_batch(n), render, rewards, combine)  # noqa: E731
    return collect_rounds(cfg, sample_round, pad_id, outcome=outcome)


def collect_rounds(
    cfg: Config, sample_round: Callable[[], tuple[RolloutBatch, RewardScores, dict[str, float]]], pad_id: int,
    *, outcome: str,
) -> tuple[RolloutBatch, RewardScores, dict[str, float]]:
    """One round of ``sample_round()`` (a scored batch of ``prompts_per_step`` groups), or dynamic sampling's rounds.

    With ``algorithm.dynamic_sampling`` groups whose ``outcome`` rewards are all equal are dropped
    and more rounds are drawn, up to ``max_sampling_rounds``, until ``prompts_per_step``
    informative groups are kept; the same loop serves in-process sampling and asynchronous rollout
    workers (each round is then the next worker batch). Metrics: ``dynamic_sampling/rounds``,
    ``informative_groups`` (found over all rounds), ``kept_groups`` (trained, at most
    ``prompts_per_step``), ``sampled_groups`` and ``exhausted`` (1: the rounds ran out first).
    """
    n = cfg.rollout.prompts_per_step
    if not cfg.algorithm.dynamic_sampling:
        return sample_round()
    kept_batches, kept_scores, metrics = [], [], {}
    kept_groups = rounds = sampled_groups = 0
    while kept_groups < n and rounds < cfg.algorithm.max_sampling_rounds:
        batch, scores, metrics = sample_round()
        keep = informative_rows(scores, batch.group_ids, outcome)
        rounds += 1
        sampled_groups += int(batch.group_ids.max()) + 1 if len(batch) else 0
        if bool(keep.any()):
            idx = keep.nonzero().squeeze(-1).to(batch.device)
            kept_batches.append(batch.select(idx))
            kept_scores.append(select_scores(scores, idx.to(scores.total.device)))
            kept_groups += int(torch.unique(batch.group_ids[idx]).numel())
    informative = kept_groups
    if not kept_batches:  # nothing informative: the last round, for the step's metrics only (InformativeGroups)
        kept_batches, kept_scores = [batch], [scores]
    batch = concat_batches(kept_batches, pad_id)  # weights_version: the oldest round's, the staleness to correct for
    batch.group_ids = renumber_groups(batch.group_ids)
    scores = concat_scores(kept_scores)
    if kept_groups > n:  # keep exactly n groups
        idx = (batch.group_ids < n).nonzero().squeeze(-1)
        batch, scores = batch.select(idx), select_scores(scores, idx.to(scores.total.device))
    metrics.update({
        "dynamic_sampling/rounds": float(rounds),
        "dynamic_sampling/kept_groups": float(min(kept_groups, n)),
        "dynamic_sampling/sampled_groups": float(sampled_groups),
        "dynamic_sampling/informative_groups": float(informative),
        "dynamic_sampling/exhausted": float(informative < n),
    })
    return batch, scores, metrics
