"""GRPO-Verif's second rollout: the policy verifies its own solutions (arXiv 2511.15137).

For every sampled solution y_i of question q, one verification v_i ~ pi(. | q, y_i) is sampled
from a verification prompt. Its reward is +1 when the verdict matches the solution's
correctness (the run's accuracy judge), -1 when it does not, -1.5 without a valid verdict
(the paper's reward tiers). Verification advantages are standardised over the n verifications of the
same question, independently of the solution advantages. The verification rows are appended
to the batch with ``verif_mask`` = their completion mask, which the ``grpo_verif`` loss weighs
by alpha; the batch normaliser stays the number of solutions, so the objective is exact.
Solutions are scored by the run's rewards: the ``grpo_verif`` preset uses ``answer_tiers`` (+1
correct, -1 incorrect, -1.5 no valid answer), whose value >= 1 is also the correctness read here.
"""

from __future__ import annotations

import re
from typing import Callable

import torch

from grpokit.rollout.types import GenerationBackend, RolloutBatch, SamplingParams, concat_batches

_YES = re.compile(r"\b(yes|correct|right|true)\b", re.IGNORECASE)
_NO = re.compile(r"\b(no|incorrect|wrong|false|not correct)\b", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """True / False for the first yes-like / no-like word of ``text``; None if neither appears."""
    yes, no = _YES.search(text), _NO.search(text)
    if yes and (not no or yes.start() < no.start()):
        return True
    if no:
        return False
    return None


def verification_rewards(verdicts: list[bool | None], correct: list[bool]) -> torch.Tensor:
    """``[B]``: +1 verdict matches correctness, -1 it does not, -1.5 no valid verdict (arXiv 2511.15137)."""
    out = [(-1.5 if v is None else (1.0 if v == c else -1.0)) for v, c in zip(verdicts, correct)]
    return torch.tensor(out, dtype=torch.float32, device="cpu")  # rewards live on the CPU, like every reward column


def add_verification_rows(
    backend: GenerationBackend,
    batch: RolloutBatch,
    correct: torch.Tensor,
    render: Callable[[list[dict]], list[str]],
    advantage: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    template: str,
    params: SamplingParams,
    pad_id: int,
) -> tuple[RolloutBatch, torch.Tensor, torch.Tensor, dict[str, float]]:
    """(batch with verification rows appended, their rewards ``[B]``, advantages ``[B]``, metrics).

    correct: [B] bool, the judge's verdict on each solution; advantage(rewards, group_ids) -> [B].
    """
    rows = [
        {**row, "prompt": template.format(question=row["prompt"], solution=completion)}
        for row, completion in zip(batch.rows, batch.completions)
    ]
    verif = backend.generate(render(rows), rows, 1, params)
    verdicts = [parse_verdict(c) for c in verif.completions]
    rewards = verification_rewards(verdicts, correct.tolist())
    adv = advantage(rewards, batch.group_ids)  # standardised per question
    merged = concat_batches([batch, verif], pad_id)  # verification rows get their own prompt groups
    valid = [v is not None for v in verdicts]
    metrics = {
        "verif/reward_mean": float(rewards.mean()),
        "verif/accuracy": float((rewards == 1.0).float().mean()),
        "verif/valid_frac": sum(valid) / max(len(valid), 1),
    }
    return merged, rewards, adv, metrics


def verification_step(cfg, backend, batch: RolloutBatch, correct: torch.Tensor, rewards: torch.Tensor, adv: torch.Tensor,
                      weights: torch.Tensor, prompt_texts: Callable, advantages: Callable):
    """The step's batch with one verification row appended per solution, and everything the learner needs.

    correct, rewards, adv: [n] of the n solutions; weights: [n, T] token weights; advantages maps
    (rewards [m], group_ids [m]) to [m] advantages. Returns (merged batch [2n], adv [2n],
    loss_mask [2n, T'], weights [2n, T'], rewards [2n], verif_mask [2n, T'] (1 on the verification
    rows' loss tokens), metrics).
    """
    n = len(batch)
    params = SamplingParams(cfg.verification.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k)
    merged, v_rewards, v_adv, metrics = add_verification_rows(
        backend, batch, correct, prompt_texts, advantages, cfg.verification.template, params, backend.pad_id,
    )
    loss_mask = merged.completion_mask.clone()
    if cfg.algorithm.mask_truncated:
        loss_mask[merged.truncated] = 0
    pad = merged.completion_ids.shape[1] - weights.shape[1]
    weights = torch.cat([torch.nn.functional.pad(weights, (0, pad)), loss_mask[n:].to(weights.dtype)])
    verif_mask = torch.zeros_like(loss_mask)
    verif_mask[n:] = loss_mask[n:]
    return merged, torch.cat([adv, v_adv]), loss_mask, weights, torch.cat([rewards, v_rewards]), verif_mask, metrics
