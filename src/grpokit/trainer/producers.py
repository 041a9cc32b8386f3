"""Producers of the inputs that registered methods declare (the table is in ``trainer/inputs.py``).

Each producer fills named fields of the step's :class:`~grpokit.trainer.learn_batch.LearnBatch`
from the policy, the batch or the rewards. Which ones run is read from the methods'
registrations (``needed_inputs``), never from method names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from grpokit.families.policy import Policy
from grpokit.rollout.types import RolloutBatch, SamplingParams
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.spans import span_mask_through_text

# Scored inputs: the policy role (and transformed condition) whose no-grad log-probs fill the field.
SCORED_ROLES = {"old_logp": "current", "prev_logp": "previous", "ref_logp": "reference", "teacher_logp": "teacher"}
CONDITIONED = {"aux_logp": ("current", "masked")}  # PAPO: the same tokens under the masked image, before the update


def score_inputs(policy: Policy, lb: LearnBatch, parts: list[tuple[torch.Tensor, RolloutBatch]], names: list[str]) -> None:
    """Fill each scored field of ``names`` (see :data:`SCORED_ROLES`, :data:`CONDITIONED`) micro-batch by micro-batch.

    A part ``(None, micro_batch)`` (a sharded learner's padding) is scored and its result dropped.
    """
    for name in names:
        for rows, mb in parts:
            if rows is None:
                policy.score(mb, SCORED_ROLES.get(name, "current"))
            elif name in CONDITIONED:
                role, condition = CONDITIONED[name]
                lb.set_rows(name, rows, policy.score(mb, role, condition=condition))
            else:
                lb.set_rows(name, rows, policy.score(mb, SCORED_ROLES[name]))


def constraint_kl(policy: Policy, lb: LearnBatch, parts, learners: Any) -> torch.Tensor:
    """``[]`` token-mean of ``old_logp - logp`` over the whole batch at the current weights, detached.

    The trust-region statistic of a constrained objective (e.g. DisCO's squared-hinge penalty);
    data-parallel learners sum it over ranks.
    """
    diff = 0.0
    for rows, mb in parts:
        current = policy.score(mb, "current")
        if rows is None:  # a sharded learner's padding pass
            continue
        old = lb.old_logp[rows, : current.shape[1]]
        diff += float(((old - current) * lb.mask[rows, : current.shape[1]]).sum())
    diff = learners.all_sum(diff)
    return torch.tensor(diff / lb.num_tokens, device=lb.mask.device)


def _scorer(name: str) -> Callable[..., None]:
    return lambda policy, lb, parts, learners: score_inputs(policy, lb, parts, [name])


def _constraint_kl(policy: Policy, lb: LearnBatch, parts, learners: Any) -> None:
    lb.constraint_kl = constraint_kl(policy, lb, parts, learners)


@dataclass(frozen=True)
class Producer:
    """When the learner fills one declared input of a LearnBatch, and how: ``fill(policy, lb, parts, learners)``.

    ``phase``: 'scored' = once, without gradient, before the batch's first update (and again
    after an update hook made it stale); 'per_update' = before every update after the first
    (a statistic of the weights the previous update left).
    """

    phase: str
    fill: Callable[..., None]


# The learner's producers, by input name. Inputs of the batch itself (rewards, group ids, the
# sampler's log-probs) and those of batch stages (plan_mask, verif_*) are not here: see trainer/inputs.py.
PRODUCERS: dict[str, Producer] = {
    **{name: Producer("scored", _scorer(name)) for name in (*SCORED_ROLES, *CONDITIONED)},
    "constraint_kl": Producer("per_update", _constraint_kl),
}


def scheduled(needs: set[str], phase: str, num_iterations: int = 1) -> list[str]:
    """The inputs of ``needs`` that ``phase`` produces, in :data:`PRODUCERS` order.

    ``old_logp`` is scored whenever mu = ``num_iterations`` > 1 (the proximal policy of the
    batch's later updates); with mu = 1 and no method reading it, the loss uses the detached
    current log-probs, for which the ratio is exactly 1.
    """
    wanted = set(needs) | ({"old_logp"} if phase == "scored" and num_iterations > 1 else set())
    return [name for name, p in PRODUCERS.items() if p.phase == phase and name in wanted]


def produce(names: list[str], policy: Policy, lb: LearnBatch, parts, learners: Any) -> None:
    """Run the producers of ``names`` (see :data:`PRODUCERS`) on the step's micro-batches ``parts``."""
    for name in names:
        PRODUCERS[name].fill(policy, lb, parts, learners)


def plan_mask(tokenizer: Any, lb: LearnBatch, delimiter: str, first_step: bool) -> None:
    """``lb.plan_mask``: the planning span (through ``delimiter``) of every row, found in the decoded text.

    On the run's first step, a delimiter found in none of the sampled completions is an error
    before any update: the span-aware loss would otherwise train its answer-span term alone.
    """
    b = lb.rollout
    spans = span_mask_through_text(tokenizer, b.completion_ids, b.completion_mask, delimiter)
    if first_step and not bool(spans.any()):
        raise ValueError(
            f"algorithm.plan_delimiter {delimiter!r} occurs in none of the {len(b)} completions sampled at step 1: "
            "set it to text the policy writes (see the samples in the run folder) or choose another algorithm.loss"
        )
    lb.plan_mask = spans[:, : lb.mask.shape[1]] * lb.mask


def validation_means(
    backend: Any, rows: list[dict], prompt_texts: list[str], rewards: list, names: list[str], max_new_tokens: int,
    timeout_s: float = 0.0,
) -> torch.Tensor:
    """``[K]`` per-objective means over a held-out validation batch, in the column order ``names``.

    One greedy completion per held-out row with the current weights (the authors' validation
    uses greedy decoding, one sample per prompt), scored by every reward of the run; a column's
    NaN (not applicable) entries are left out of its mean, an all-NaN column is 0. This is the
    performance vector p_t of hypervolume-guided weighting (arXiv 2509.11452), measured on
    prompts the policy never trains on.
    """
    from grpokit.rewards import score_completions  # lazy: the reward registry imports the reward models

    batch = backend.generate(prompt_texts, rows, 1, SamplingParams(max_new_tokens=max_new_tokens, greedy=True))
    scores = score_completions(
        rewards, batch.prompts, batch.completions, batch.columns(), on_error="zero",
        group_ids=list(range(len(rows))), timeout_s=timeout_s,
    )
    means = []
    for name in names:
        column = scores.per_reward[name].to(torch.float64)  # [n]
        valid = column[~column.isnan()]
        means.append(float(valid.mean()) if valid.numel() else 0.0)
    return torch.tensor(means, dtype=torch.float64, device="cpu")  # a few numbers: the Pareto buffer lives on CPU
