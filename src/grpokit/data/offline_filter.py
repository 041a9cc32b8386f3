"""INTELLECT-2 offline difficulty filter: drop prompts the initial policy always or never solves.

Prime Intellect Team, "INTELLECT-2: A Reasoning Model Trained Through Globally Decentralized
Reinforcement Learning", arXiv 2505.07291, §3 (Training Recipe: offline filtering). The paper
keeps prompts whose solve rate, precomputed with a stronger model, lies in [0.1, 0.8]; here the
rate is measured before training with the policy itself, or with a separate model named by
``data.offline_filter_model`` (loaded for the filter only): k = ``data.offline_filter_samples``
completions per training prompt, p = (# judged correct) / k, and a prompt is kept iff 0 < p < 1 —
the prompts whose groups would have all-equal rewards, hence zero GRPO advantage, are gone before
the first step. For precomputed rates use ``data.curriculum: pass_rate_filter`` instead.
"""

from __future__ import annotations

import logging
from typing import Callable

import torch

from grpokit.config.schema import Config
from grpokit.rewards import NamedReward, score_completions
from grpokit.rollout.types import GenerationBackend, SamplingParams

log = logging.getLogger(__name__)


def pass_rates(
    backend: GenerationBackend, rows: list[dict], render: Callable[[list[dict]], list[str]], judge: NamedReward,
    *, samples: int, params: SamplingParams, batch_size: int,
) -> list[float]:
    """p per row: the fraction of ``samples`` sampled completions the judge scores >= 1."""
    rates: list[float] = []
    for s in range(0, len(rows), batch_size):
        chunk = rows[s : s + batch_size]
        batch = backend.generate(render(chunk), chunk, samples, params)
        scores = score_completions([judge], batch.prompts, batch.completions, batch.columns(), on_error="zero")
        correct = (scores.per_reward[judge.name].nan_to_num(0.0) >= 1.0).float().view(len(chunk), samples)  # [n, k]
        rates.extend(correct.mean(1).tolist())
    return rates


def offline_difficulty_filter(
    cfg: Config, backend: GenerationBackend, rows: list[dict], render: Callable[[list[dict]], list[str]], judge: NamedReward,
) -> list[dict]:
    """The training rows with 0 < p < 1 under the current (initial) policy; p as in ``pass_rates``."""
    r = cfg.rollout
    params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k)
    with torch.no_grad():
        rates = pass_rates(backend, rows, render, judge, samples=cfg.data.offline_filter_samples, params=params,
                           batch_size=cfg.eval.batch_size)
    kept = [row for row, p in zip(rows, rates) if 0.0 < p < 1.0]
    solved, unsolved = sum(p >= 1.0 for p in rates), sum(p <= 0.0 for p in rates)
    log.info("offline difficulty filter: kept %d of %d prompts (%d always solved, %d never solved)",
             len(kept), len(rows), solved, unsolved)
    if not kept:
        raise ValueError(
            f"data.offline_filter_samples={cfg.data.offline_filter_samples}: every training prompt was solved by all "
            f"or none of the samples ({solved} always, {unsolved} never); sample more or set it to 0"
        )
    return kept
