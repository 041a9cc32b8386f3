"""The learning half of a step: micro-batched forward/backward of the GRPO objective.

A rollout batch of B rows is cut into micro-batches; each is trimmed of all-pad columns,
scored by the policy (and the reference when beta > 0), and its loss is normalised by the
whole batch's sequence and token counts, so accumulating gradients over micro-batches gives
exactly the full-batch gradient.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from grpokit.algos.losses import LossInputs
from grpokit.algos.objective import grpo_objective
from grpokit.model.grad_sinks import in_place_embedding_grads
from grpokit.model.logprobs import PromptStage, completion_logprobs
from grpokit.model.streambp import streamed_backward, streamed_forward
from grpokit.rollout.types import RolloutBatch


@dataclass
class Objective:
    """The registered variants of a run, resolved to callables, and their options."""

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
    sequence_chunk: int = 0  # StreamBP: > 0 backprops each micro-batch in chunks of this many tokens
    activation_checkpointing: bool = False  # recompute decoder layers in the backward pass

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
            sequence_chunk=cfg.train.sequence_chunk,
            activation_checkpointing=cfg.train.activation_checkpointing,
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
    return batch


def length_sorted_rows(batch: RolloutBatch, rows: Optional[slice | torch.Tensor] = None) -> torch.Tensor:
    """Row indices ``[n]`` of ``rows`` (a slice or increasing indices; default: all), groups in place, each group's rows by completion length.

    Cutting this order into micro-batches puts rows of similar length together, so trimming
    each micro-batch to its longest row leaves less padding, while a group's rows stay adjacent
    (its prompt is still encoded once per micro-batch and whole-group micro-batches stay whole).
    """
    idx = torch.arange(len(batch))[rows if rows is not None else slice(None)]
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


@torch.no_grad()
def score_logprobs(
    model: torch.nn.Module, parts: list[tuple[slice, RolloutBatch]], temperature: float, ctx=None
) -> list[torch.Tensor]:
    """Log-probs ``[b, t]`` of every micro-batch under ``model`` without gradient (old or ref policy)."""
    out = []
    with ctx if ctx is not None else nullcontext():
        for _, mb in parts:
            logp, _ = completion_logprobs(
                model, mb.prompt_ids, mb.prompt_mask, mb.completion_ids, mb.completion_mask,
                group_ids=mb.group_ids, temperature=temperature,
            )
            out.append(logp)
    return out


def accumulate_gradients(
    model: torch.nn.Module,
    parts: list[tuple[slice, RolloutBatch]],
    adv: torch.Tensor,
    loss_mask: torch.Tensor,
    objective: Objective,
    *,
    temperature: float,
    old_logps: Optional[list[torch.Tensor]] = None,
    ref_logps: Optional[list[torch.Tensor]] = None,
    teacher_logps: Optional[list[torch.Tensor]] = None,
    token_weights: Optional[torch.Tensor] = None,
    rewards: Optional[torch.Tensor] = None,
    plan_mask: Optional[torch.Tensor] = None,
    constraint_kl: Optional[torch.Tensor] = None,
    verif_mask: Optional[torch.Tensor] = None,
    num_seqs: Optional[float] = None,
    want_entropy: bool = True,
) -> dict[str, float]:
    """Backward the objective over all micro-batches (gradients accumulate in ``.grad``).

    adv: [B] advantages; loss_mask: [B, T_full] (completion mask, possibly minus truncated rows);
    token_weights: [B, T_full] multiplies the per-token loss (the mask stays the denominator);
    rewards: [B] scalar rewards, for losses that use them.
    Returns metrics averaged over micro-batches, weighted by their token counts.
    """
    num_seqs = num_seqs if num_seqs is not None else float(len(adv))
    num_tokens = float(loss_mask.sum().clamp(min=1))
    total_forks = float(((token_weights * loss_mask) > 0).sum().clamp(min=1)) if token_weights is not None else 1.0
    totals: dict[str, float] = {"loss": 0.0}  # 0 when every row was left out (all advantages 0)
    weight_sum = 0.0
    for k, (rows, mb) in enumerate(parts):
        with in_place_embedding_grads(model):
            metrics, loss, w = _micro_batch(
                model, k, rows, mb, adv, loss_mask, objective, temperature=temperature, old_logps=old_logps,
                ref_logps=ref_logps, teacher_logps=teacher_logps, token_weights=token_weights, rewards=rewards,
                plan_mask=plan_mask, constraint_kl=constraint_kl, verif_mask=verif_mask, num_seqs=num_seqs,
                num_tokens=num_tokens, total_forks=total_forks, want_entropy=want_entropy,
            )
        weight_sum += w
        totals["loss"] = totals.get("loss", 0.0) + float(loss.detach())
        for key, value in metrics.items():
            totals[key] = totals.get(key, 0.0) + float(value) * w
    return {k: (v if k == "loss" else v / max(weight_sum, 1.0)) for k, v in totals.items()}


def _micro_batch(model, k, rows, mb, adv, loss_mask, objective, *, temperature, old_logps, ref_logps, teacher_logps,
                 token_weights, rewards, plan_mask, constraint_kl, verif_mask, num_seqs, num_tokens, total_forks,
                 want_entropy):
    """Forward, objective and backward of micro-batch ``k``: (metrics, loss, its loss-token count)."""
    t = mb.completion_ids.shape[1]
    mask = loss_mask[rows, :t].to(torch.float32)
    entropy_grad = objective.entropy_coef > 0 or objective.entropy_band_coef > 0
    tensors = (mb.prompt_ids, mb.prompt_mask, mb.completion_ids, mb.completion_mask)
    stream = None
    if objective.sequence_chunk > 0:  # phase 1 of StreamBP: no-grad log-probs as leaves
        logp, entropy, stream = streamed_forward(
            model, *tensors, group_ids=mb.group_ids, chunk=objective.sequence_chunk,
            temperature=temperature, with_entropy=want_entropy or entropy_grad,
        )
        logp.requires_grad_()
        if entropy is not None and entropy_grad:
            entropy.requires_grad_()
    else:
        prompt_stage = PromptStage()  # the shared prompt's graph is back-propagated second
        logp, entropy = completion_logprobs(
            model, *tensors, group_ids=mb.group_ids, temperature=temperature,
            with_entropy=want_entropy, entropy_grad=entropy_grad, checkpoint=objective.activation_checkpointing,
            prompt_stage=prompt_stage,
        )
    inp = LossInputs(
        logp=logp,
        old_logp=old_logps[k] if old_logps is not None else logp.detach(),
        adv=adv[rows],
        mask=mask,
        ref_logp=ref_logps[k] if ref_logps is not None else None,
        entropy=entropy,
        teacher_logp=teacher_logps[k] if teacher_logps is not None else None,
        group_ids=mb.group_ids,
        rewards=rewards[rows] if rewards is not None else None,
        plan_mask=plan_mask[rows, :t].to(torch.float32) if plan_mask is not None else None,
        constraint_kl=constraint_kl,
        verif_mask=verif_mask[rows, :t].to(torch.float32) if verif_mask is not None else None,
    )
    loss, metrics = grpo_objective(
        inp,
        policy_loss=objective.policy_loss,
        aggregate=objective.aggregate,
        kl_estimator=objective.kl_estimator,
        beta=objective.beta,
        loss_options=objective.loss_options,
        num_seqs=num_seqs,
        num_tokens=num_tokens,
        max_len=objective.max_len,
        kl_options=objective.kl_options,
        entropy_coef=objective.entropy_coef,
        token_weights=token_weights[rows, :t] if token_weights is not None else None,
    )
    if objective.entropy_band_coef > 0 and entropy is not None and token_weights is not None:
        band, band_metrics = _entropy_band(entropy, token_weights[rows, :t] * mask, objective, total_forks)
        loss = loss + band
        metrics.update(band_metrics)
    if stream is None:
        loss.backward()
        prompt_stage.backward()
    else:  # StreamBP: dL/dlogp (and dL/dH) from the objective, then the model chunk by chunk
        leaves = [logp] + ([entropy] if entropy_grad and entropy is not None else [])
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
        g_logp = grads[0] if grads[0] is not None else torch.zeros_like(logp)
        g_ent = grads[1] if len(grads) > 1 else None
        streamed_backward(model, *tensors, g_logp, stream, grad_entropy=g_ent, temperature=temperature)
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
    model: torch.nn.Module,
    parts: list[tuple[torch.Tensor, RolloutBatch]],
    matrix: torch.Tensor,
    options: dict,
    *,
    loss_mask: torch.Tensor,
    advantages: Callable[[torch.Tensor], torch.Tensor],
    objective: Objective,
    temperature: float,
    zero_grad: Callable[[], None],
) -> torch.Tensor:
    """``[K, P]``: the policy-loss gradient with each objective's own advantage (arXiv 2509.11452).

    matrix: [B, K] per-objective rewards; loss_mask: [B, T]; advantages maps a [B] reward column
    to [B] advantages.
    Restricted to parameters whose name matches ``grad_param_pattern`` (default: the layers
    from 1/3 to 5/6 of the depth, as the authors' 10-25 of 36) and to the first
    ``grad_micro_batches`` micro-batches (K extra backward passes: the price of this combiner).
    Gradients are cleared before and after.
    """
    import re

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
        adv = advantages(matrix[:, k])
        zero_grad()
        accumulate_gradients(model, parts, adv, loss_mask, objective,
                             temperature=temperature, want_entropy=False)
        grads.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params]))
    zero_grad()
    return torch.stack(grads)
