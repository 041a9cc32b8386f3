"""Held-out evaluation: greedy accuracy, and with k samples per prompt mean@k and pass@k, a reward as the judge.

One function for the trainer's before / during / after evaluations and ``grpokit eval``. With an
environment (an :class:`~grpokit.envs.episodes.EpisodeBackend`), each held-out row is played as
an episode of its own fixed seed (``environment.heldout_seed`` + its index), the same at every
evaluation and never one of the training episodes' seeds.
"""

from __future__ import annotations

import logging

import torch

from grpokit.rewards import NamedReward, score_completions
from grpokit.rollout.types import GenerationBackend, SamplingParams

log = logging.getLogger(__name__)


def evaluate_accuracy(
    backend: GenerationBackend,
    rows: list[dict],
    prompt_texts: list[str],
    judge: NamedReward,
    *,
    batch_size: int = 64,
    max_new_tokens: int = 32,
    k: int = 1,
    temperature: float = 1.0,
) -> dict[str, float]:
    """``accuracy``: greedy accuracy (judge reward >= 1) over ``rows``; k > 1 adds ``mean@k`` and ``pass@k``.

    ``accuracy`` and ``completion_len`` always come from one greedy completion per prompt, whatever
    k is. With k > 1, k completions per prompt are sampled at ``temperature``: with c_i correct
    of k for prompt i, ``mean@k`` = (1/n) sum_i c_i / k and ``pass@k`` = (1/n) sum_i [c_i > 0],
    the unbiased estimator of Chen et al., "Evaluating Large Language Models Trained on Code",
    arXiv 2107.03374, at n = k samples.
    """
    greedy, lengths, episodes = _correct(backend, rows, prompt_texts, judge, batch_size, 1, SamplingParams(max_new_tokens, greedy=True))
    n = max(len(rows), 1)
    result: dict[str, float] = {
        "accuracy": float(greedy.sum()) / n, "n": len(rows), "completion_len": float(lengths.sum()) / max(len(lengths), 1),
        **episodes,  # environment runs: the greedy episodes' env/* means (e.g. env/well_formed, env/success)
    }
    if k > 1:
        sampled, _, _ = _correct(backend, rows, prompt_texts, judge, batch_size, k, SamplingParams(max_new_tokens, temperature))
        result[f"mean@{k}"] = float(sampled.mean(dim=1).sum()) / n
        result[f"pass@{k}"] = float(sampled.max(dim=1).values.sum()) / n
    return result


def _correct(backend, rows, prompt_texts, judge, batch_size: int, k: int, params: SamplingParams):
    """(``[n, k]`` 1 = the judge scored the completion correct, ``[n * k]`` completion lengths, episode means), in chunks.

    The episode means are the ``env/*`` metrics of environment episodes averaged over all of
    them ({} for single-turn completions).
    """
    from grpokit.envs.episodes import EpisodeBackend, episode_metrics

    correct, lengths, sums, count = [], [], {}, 0
    for s in range(0, len(rows), batch_size):
        chunk = rows[s : s + batch_size]
        seeded = {"seeds": backend.heldout_seeds(s, len(chunk))} if isinstance(backend, EpisodeBackend) else {}
        batch = backend.generate(prompt_texts[s : s + batch_size], chunk, k, params, **seeded)
        scores = score_completions([judge], batch.prompts, batch.completions, batch.columns(), on_error="zero")
        failed = scores.failures.get(judge.name, 0)
        if failed and failed == len(batch):  # an accuracy of 0 that measures nothing: the judge's own error, in one line
            score_completions([judge], batch.prompts, batch.completions, batch.columns(), on_error="raise")
        if failed:
            log.warning("held-out judge '%s' failed on %d of %d completions, scored incorrect", judge.name, failed, len(batch))
        correct.append((scores.per_reward[judge.name].nan_to_num(0.0) >= 1.0).float().view(-1, k))
        lengths.append(batch.unit_mask.sum(-1).cpu())  # sampled tokens (an episode's observations were not)
        for key, value in episode_metrics(batch).items():
            if key != "env/failed_episodes":  # a count, not a mean (env/failed_frac is its share)
                sums[key] = sums.get(key, 0.0) + value * len(batch)
        count += len(batch)
    episodes = {key: total / count for key, total in sums.items()}
    if not correct:
        return torch.zeros(0, k, device="cpu"), torch.zeros(0, device="cpu"), {}  # host-side metrics, as the lengths above
    return torch.cat(correct), torch.cat(lengths), episodes
