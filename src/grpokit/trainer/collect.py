"""Collect one training batch: sample groups, score them, shape rewards, optionally refill.

DAPO's dynamic sampling (arXiv 2503.14476 §3.2) lives here: groups whose rewards are all equal
carry no GRPO signal, so they are dropped and more prompts are sampled, up to
``max_sampling_rounds`` rounds, until ``prompts_per_step`` informative groups are collected.
DAPO's soft overlong punishment is added to the total reward here too.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from grpokit.algos.filters import dynamic_sampling, overlong_punishment
from grpokit.config.schema import Config
from grpokit.data.sampler import PromptSampler
from grpokit.rewards import NamedReward, RewardScores, score_completions
from grpokit.policies.base import Policy
from grpokit.rollout.types import RolloutBatch, SamplingParams, concat_batches, renumber_groups


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
) -> tuple[RolloutBatch, RewardScores, dict[str, float]]:
    """One step's scored batch of ``prompts_per_step`` groups sampled in-process (see :func:`collect_rounds`)."""
    n = cfg.rollout.prompts_per_step
    return collect_rounds(cfg, lambda: _sample_and_score(cfg, policy, sampler.next_batch(n), render, rewards, combine), pad_id)


def collect_rounds(
    cfg: Config, sample_round: Callable[[], tuple[RolloutBatch, RewardScores, dict[str, float]]], pad_id: int,
) -> tuple[RolloutBatch, RewardScores, dict[str, float]]:
    """One round of ``sample_round()`` (a scored batch of ``prompts_per_step`` groups), or dynamic sampling's rounds.

    With ``algorithm.dynamic_sampling`` groups whose rewards are all equal are dropped and more
    rounds are drawn, up to ``max_sampling_rounds``, until ``prompts_per_step`` informative
    groups are kept; the same loop serves in-process sampling and asynchronous rollout workers
    (each round is then the next worker batch).
    """
    n = cfg.rollout.prompts_per_step
    if not cfg.algorithm.dynamic_sampling:
        return sample_round()
    kept_batches, kept_scores, metrics = [], [], {}
    kept_groups = rounds = sampled_groups = 0
    while kept_groups < n and rounds < cfg.algorithm.max_sampling_rounds:
        batch, scores, metrics = sample_round()
        keep, _ = dynamic_sampling(scores.total, batch.group_ids.to(scores.total.device))
        rounds += 1
        sampled_groups += int(batch.group_ids.max()) + 1 if len(batch) else 0
        if bool(keep.any()):
            idx = keep.nonzero().squeeze(-1).to(batch.device)
            kept_batches.append(batch.select(idx))
            kept_scores.append(select_scores(scores, idx.to(scores.total.device)))
            kept_groups += int(torch.unique(batch.group_ids[idx]).numel())
    if not kept_batches:  # nothing informative: train on the last round (its advantages are 0)
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
    })
    return batch, scores, metrics
