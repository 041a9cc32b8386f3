"""The learning half of a step: micro-batched forward/backward of the objective on a LearnBatch.

The full batch of B rows is cut into micro-batches; each is trimmed of all-pad columns, scored by
the policy with gradient, and its loss is normalised by the whole batch's sequence and unit
counts, so accumulating gradients over micro-batches gives exactly the full-batch gradient.
Everything a loss reads comes from the typed :class:`~grpokit.trainer.learn_batch.LearnBatch`;
the policy family decides how its units' log-probs are computed and back-propagated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from grpokit.algos.losses import LossInputs
from grpokit.algos.objective import BatchTotals, ObjectiveTerms, grpo_objective
from grpokit.model.grad_sinks import in_place_embedding_grads
from grpokit.families.policy import Policy
from grpokit.rollout.types import RolloutBatch
from grpokit.trainer.learn_batch import LearnBatch

@dataclass
class Objective:
    """The registered variants of a run, resolved to callables, and their options.

    Mutable: the loop sets ``correction`` per batch and a loss's option schedule updates
    ``loss_options``; :meth:`terms` freezes the method's terms as they stand for one call of
    :func:`~grpokit.algos.objective.grpo_objective`. ``max_len`` goes into the
    :class:`~grpokit.algos.objective.BatchTotals`; ``entropy_band_*`` and ``loss_inputs`` are the
    learner's own (SPINE's band penalty, the check of the loss's declared inputs).
    """

    policy_loss: Callable
    aggregate: Callable
    kl_estimator: Optional[Callable]
    beta: float
    loss_options: dict
    max_len: int
    kl_options: Optional[dict] = None
    entropy_coef: float = 0.0
    entropy_band_coef: float = 0.0
    entropy_band_quantiles: tuple = (0.1, 0.5)
    correction: Optional[Callable] = None  # off-policy correction weight of the policy-gradient term
    correction_options: Optional[dict] = None
    loss_inputs: tuple = ()  # the inputs the policy loss declares: a None among them is an error, never a fallback
    kl_scope: str = "weighted"  # how token weights meet the KL term: the token weighting's declared kl_scope
    kl_aggregate: Optional[Callable] = None  # the loss's own reduction of the KL term (its declared kl_aggregation)

    @classmethod
    def from_config(cls, cfg, policy_loss: Callable) -> "Objective":
        """The objective a run's ``Config`` names (registry lookups of aggregation and KL estimator)."""
        from grpokit.registries import get_registry

        algo = cfg.algorithm
        return cls(
            policy_loss=policy_loss,
            aggregate=get_registry("aggregation").get(algo.aggregation),
            kl_estimator=get_registry("kl").get(algo.kl) if algo.beta > 0 else None,
            beta=algo.beta,
            loss_options={"epsilon_low": algo.epsilon_low, "epsilon_high": algo.epsilon_high, "ratio": algo.ratio, **algo.loss_options},
            kl_options={"clamp": algo.kl_clamp},
            entropy_coef=algo.entropy_coef,
            entropy_band_coef=algo.entropy_band_coef,
            entropy_band_quantiles=tuple(algo.entropy_band_quantiles),
            max_len=cfg.rollout.max_new_tokens,
            correction_options=dict(algo.correction_options),
            loss_inputs=get_registry("loss").spec(algo.loss).inputs,
            kl_scope=get_registry("token_weights").spec(algo.token_weights).kl_scope,
            kl_aggregate=get_registry("aggregation").get(kl_agg) if (kl_agg := get_registry("loss").spec(algo.loss).kl_aggregation) else None,
        )

    def terms(self) -> ObjectiveTerms:
        """The method's terms as they stand now (``correction`` is this batch's), for :func:`grpo_objective`."""
        return ObjectiveTerms(
            policy_loss=self.policy_loss, aggregate=self.aggregate, kl_estimator=self.kl_estimator, beta=self.beta,
            loss_options=self.loss_options, kl_options=self.kl_options or {}, kl_scope=self.kl_scope,
            kl_aggregate=self.kl_aggregate, entropy_coef=self.entropy_coef, correction=self.correction,
            correction_options=self.correction_options or {},
        )


def trim(batch: RolloutBatch) -> RolloutBatch:
    """Drop prompt columns that are padding in every row and completion columns past the longest."""
    keep_p = batch.prompt_mask.any(0).nonzero()
    start = int(keep_p[0]) if len(keep_p) else 0
    end = int(batch.completion_mask.sum(-1).max().clamp(min=1))
    batch.prompt_ids, batch.prompt_mask = batch.prompt_ids[:, start:], batch.prompt_mask[:, start:]
    batch.completion_ids, batch.completion_mask = batch.completion_ids[:, :end], batch.completion_mask[:, :end]
    batch.sampling_logp = batch.sampling_logp[:, :end]
    if batch.entropy is not None:
        batch.entropy = batch.entropy[:, :end]
    if batch.action_mask is not None:
        batch.action_mask = batch.action_mask[:, :end]
    return batch


def length_sorted_rows(batch: RolloutBatch, rows: Optional[slice | torch.Tensor] = None) -> torch.Tensor:
    """Row indices ``[n]`` of ``rows`` (a slice or increasing indices; default: all), groups in place, each group's rows by completion length.

    Cutting this order into micro-batches puts rows of similar length together, so trimming
    each micro-batch to its longest row leaves less padding, while a group's rows stay adjacent
    (its prompt is still encoded once per micro-batch and whole-group micro-batches stay whole).
    """
    idx = torch.arange(len(batch), device=batch.group_ids.device)[rows if rows is not None else slice(None)]
    _, run = torch.unique_consecutive(batch.group_ids[idx], return_inverse=True)  # groups are contiguous runs
    key = run * (batch.completion_mask.shape[1] + 1) + batch.completion_mask[idx].sum(-1)
    return idx[torch.sort(key, stable=True).indices]


def rows_with_gradient(adv: torch.Tensor, loss_mask: torch.Tensor, weights: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``[B]`` bool of rows that can have a gradient under a loss that is 0 where the advantage is; None if all.

    adv: [B] or [B, T]; loss_mask: [B, T]; weights: [B, >=T] token weights or None. A row whose
    advantages are all 0 (or that has no weighted loss token) adds nothing to the gradient of
    such a loss, so its forward and backward can be skipped. The loss is still normalised by the
    whole batch, so the update is the same; only token-averaged metrics (clip fractions, entropy)
    then cover the learned rows. Common late in training, when whole groups are solved.
    """
    token_adv = adv if adv.dim() == 2 else adv[:, None].expand_as(loss_mask)
    live = (token_adv != 0) & (loss_mask > 0)
    if weights is not None:
        live &= weights[:, : live.shape[1]] != 0
    keep = live.any(-1)
    return None if bool(keep.all()) else keep


def whole_groups(keep: torch.Tensor, group_ids: torch.Tensor) -> Optional[torch.Tensor]:
    """``[B]`` bool: every row of a group in which ``keep [B]`` has a row; None if that is every row.

    For a group-wise loss (DisCO spreads a question's term over all its rows), where only whole
    groups without gradient can be left out.
    """
    kept_groups = group_ids[keep]
    out = torch.isin(group_ids, kept_groups)
    return None if bool(out.all()) else out


def micro_batches(
    batch: RolloutBatch, size: int, rows: Optional[slice | torch.Tensor] = None
) -> list[tuple[torch.Tensor, RolloutBatch]]:
    """``(row indices into the batch [b], trimmed micro-batch)`` pairs of ``size`` rows covering ``rows``.

    Rows are length-sorted inside their group first (:func:`length_sorted_rows`): padding-free
    packing's cheap half, fewer pad columns per micro-batch at the same gradient (the loss of
    each row is normalised by whole-batch counts, so the order of accumulation is irrelevant).
    """
    order = length_sorted_rows(batch, rows)
    return [(order[s : s + size], trim(batch.select(order[s : s + size]))) for s in range(0, len(order), size)]


def accumulate_gradients(
    policy: Policy, parts: list[tuple[torch.Tensor, RolloutBatch]], lb: LearnBatch, objective: Objective,
    *, want_entropy: bool = True,
) -> dict[str, float]:
    """Backward the objective over all micro-batches ``parts`` of ``lb`` (gradients accumulate in ``.grad``).

    Returns metrics averaged over micro-batches, weighted by their loss-unit counts. A part
    ``(None, micro_batch)`` is a sharded learner's padding pass (``grpokit.distributed.fsdp``):
    its forward and backward run (the ranks' collectives stay in step) and add exactly nothing.
    """
    num_seqs = lb.num_seqs if lb.num_seqs is not None else float(len(lb))
    num_tokens = lb.num_tokens
    total_forks = float(((lb.token_weights * lb.mask) > 0).sum().clamp(min=1)) if lb.token_weights is not None else 1.0
    totals: dict[str, float] = {"loss": 0.0}  # 0 when every row was left out (all advantages 0)
    weight_sum = 0.0
    for rows, mb in parts:
        if rows is None:
            fwd = policy.learn_forward(mb, with_entropy=False, entropy_grad=False)
            fwd.backward(fwd.logp.sum() * 0.0)
            continue
        with in_place_embedding_grads(policy.module):
            metrics, loss, w = _micro_batch(policy, rows, mb, lb, objective, num_seqs, num_tokens, total_forks, want_entropy)
        weight_sum += w
        totals["loss"] = totals.get("loss", 0.0) + float(loss.detach())
        for key, value in metrics.items():
            totals[key] = totals.get(key, 0.0) + float(value) * w
    return {k: (v if k == "loss" else v / max(weight_sum, 1.0)) for k, v in totals.items()}


def _micro_batch(policy, rows, mb, lb: LearnBatch, objective: Objective, num_seqs, num_tokens, total_forks, want_entropy):
    """Forward, objective and backward of one micro-batch: (metrics, loss, its loss-unit count)."""
    u = mb.completion_ids.shape[1]
    fields = lb.micro(rows, u)
    mask = fields.pop("mask").to(torch.float32)
    entropy_grad = objective.entropy_coef > 0 or objective.entropy_band_coef > 0
    fwd = policy.learn_forward(mb, with_entropy=want_entropy, entropy_grad=entropy_grad)
    old = fields.pop("old_logp")
    for name in ("plan_mask", "verif_mask"):
        if fields[name] is not None:
            fields[name] = fields[name].to(torch.float32)
    inp = LossInputs(
        logp=fwd.logp, old_logp=old if old is not None else fwd.logp.detach(), mask=mask, entropy=fwd.entropy,
        group_ids=mb.group_ids, **fields,
    )
    missing = [name for name in objective.loss_inputs if getattr(inp, name, 0) is None]
    if missing:  # the load-time check should have refused the run; never train another method instead
        raise ValueError(f"the policy loss declares inputs {missing} but this batch has none: a producer is missing")
    totals = BatchTotals(num_seqs=num_seqs, num_tokens=num_tokens, max_len=objective.max_len, num_selected=total_forks)
    loss, metrics = grpo_objective(inp, objective.terms(), totals)
    weights = inp.token_weights
    if objective.entropy_band_coef > 0 and fwd.entropy is not None and weights is not None:
        band, band_metrics = _entropy_band(fwd.entropy, weights * mask, objective, total_forks)
        loss = loss + band
        metrics.update(band_metrics)
    fwd.backward(loss)
    return metrics, loss, float(mask.sum())


def _entropy_band(entropy: torch.Tensor, forks: torch.Tensor, objective: Objective, total_forks: float):
    """SPINE's band penalty on one micro-batch, normalised by the whole batch's fork count.

    Quantiles are per row and rows never straddle micro-batches, so the sum over micro-batches
    equals the full-batch penalty exactly.
    """
    from grpokit.algos.token_weights import entropy_band_penalty

    low, high = objective.entropy_band_quantiles
    penalty, metrics = entropy_band_penalty(entropy, forks, coef=objective.entropy_band_coef, low_q=low, high_q=high)
    n_local = float((forks > 0).sum().clamp(min=1))
    return penalty * (n_local / total_forks), metrics


def objective_gradients(
    policy: Policy,
    parts: list[tuple[torch.Tensor, RolloutBatch]],
    lb: LearnBatch,
    matrix: torch.Tensor,
    options: dict,
    *,
    advantages: Callable[[torch.Tensor], torch.Tensor],
    objective: Objective,
    zero_grad: Callable[[], None],
) -> torch.Tensor:
    """``[K, P]``: the policy-loss gradient with each objective's own advantage (arXiv 2509.11452).

    matrix: [B, K] per-objective rewards; lb: the batch (its ``adv`` is replaced per objective);
    advantages maps a [B] reward column to [B] advantages.
    Restricted to parameters whose name matches ``grad_param_pattern`` (default: the layers
    from 1/3 to 5/6 of the depth, as the authors' 10-25 of 36) and to the first
    ``grad_micro_batches`` micro-batches (K extra backward passes: the price of this combiner).
    Gradients are cleared before and after.
    """
    import dataclasses
    import re

    model = policy.module
    if "grad_param_pattern" in options:
        pattern = re.compile(options["grad_param_pattern"])
        keep = lambda name: bool(pattern.search(name))  # noqa: E731
    else:  # the authors' layers 10-25 of 36, as a fraction of this model's depth
        n_layers = getattr(model.config, "num_hidden_layers", 0)
        chosen = {str(i) for i in range(n_layers // 3, (5 * n_layers) // 6 + 1)}
        keep = lambda name: any(f"layers.{i}." in name for i in chosen)  # noqa: E731
    params = [p for n, p in model.named_parameters() if p.requires_grad and keep(n)]
    if not params:
        raise ValueError("reward_combiner.options.grad_param_pattern matches no trainable parameter")
    parts = parts[: int(options.get("grad_micro_batches", 1))]
    grads = []
    model.train()
    for k in range(matrix.shape[1]):
        zero_grad()
        accumulate_gradients(policy, parts, dataclasses.replace(lb, adv=advantages(matrix[:, k])), objective, want_entropy=False)
        grads.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params]))
    zero_grad()
    return torch.stack(grads)
