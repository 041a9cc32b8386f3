"""Held-out evaluation: greedy (or sampled, for pass@k) accuracy with a reward as the judge."""

from __future__ import annotations

from grpokit.rewards import NamedReward, score_completions
from grpokit.rollout.types import GenerationBackend, SamplingParams


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
    """Accuracy (judge reward == 1) over ``rows``; with k > 1 also pass@k from k samples each.

    k = 1 decodes greedily. pass@k uses the unbiased estimator of Chen et al. 2021
    (arXiv 2107.03374) with n = k samples, i.e. the fraction of prompts with any correct sample.
    """
    correct, any_correct, lengths = [], [], []
    for s in range(0, len(rows), batch_size):
        chunk_rows, chunk_prompts = rows[s : s + batch_size], prompt_texts[s : s + batch_size]
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, greedy=k == 1)
        batch = backend.generate(chunk_prompts, chunk_rows, k, params)
        scores = score_completions([judge], batch.prompts, batch.completions, batch.columns(), on_error="zero")
        ok = (scores.per_reward[judge.name].nan_to_num(0.0) >= 1.0).float().view(-1, k)  # [n, k]
        correct.extend(ok.mean(dim=1).tolist())  # greedy when k = 1, mean over samples otherwise
        any_correct.extend(ok.max(dim=1).values.tolist())
        lengths.extend(batch.completion_mask.sum(-1).tolist())
    n = max(len(correct), 1)
    result = {"accuracy": sum(correct) / n, "n": len(correct), "completion_len": sum(lengths) / max(len(lengths), 1)}
    if k > 1:
        result[f"pass@{k}"] = sum(any_correct) / n
    return result
