"""The answer-conditioned sampler that a curriculum's trace hints draw from (DeepVideo-R1's hint).

:func:`answer_conditioned_sampler` returns a :data:`~grpokit.data.trace_hints.TraceSampler` over
the run's policy and rewards: k trajectories per (answer-conditioned) row, sampled with the
run's rollout settings, each with its total reward (the rewards' weighted sum and DAPO's overlong
punishment when set, as in training; no combiner). A curriculum that has ``bind_policy`` receives it at setup.
"""

from __future__ import annotations

from typing import Any, Callable

from grpokit.config.schema import Config
from grpokit.data.trace_hints import TraceSampler
from grpokit.rollout.types import SamplingParams


def answer_conditioned_sampler(cfg: Config, policy: Any, render: Callable[[list[dict]], list[str]], rewards: list) -> TraceSampler:
    """``sample(rows, k)`` -> for each row its k ``(completion text, total reward)`` from ``policy``."""
    from grpokit.trainer.collect import score_batch

    r = cfg.rollout

    def sample(rows: list[dict], k: int) -> list[list[tuple[str, float]]]:
        params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k, min_new_tokens=r.min_new_tokens)
        batch = policy.sample(render(rows), rows, k, params)  # prompt-major: row i's k completions are i*k .. i*k+k-1
        scores, _ = score_batch(cfg, batch, rewards)
        total = scores.total.tolist()
        return [[(batch.completions[i * k + j], total[i * k + j]) for j in range(k)] for i in range(len(rows))]

    return sample
