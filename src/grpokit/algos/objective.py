"""The full GRPO objective on one micro-batch: policy loss + beta * KL, aggregated.

    L = Agg_{i,t}[ loss_{i,t} + beta * KL_{i,t} ]        (arXiv 2402.03300, eq. 3, negated)

with per-token weights of a token weighting applied as its registration's ``kl_scope`` says.

Pure function of three typed arguments: the per-token data (:class:`~grpokit.algos.losses.LossInputs`),
the method's terms (:class:`ObjectiveTerms`, the chosen variants as callables looked up from the
registries) and the optimizer batch's totals (:class:`BatchTotals`, the normalisers that make
micro-batch losses sum to the full-batch loss).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch

from grpokit.algos.losses import LossInputs, masked_mean
from grpokit.algos.token_weights import KL_SCOPES
from grpokit.registry import call_with


@dataclass(frozen=True)
class ObjectiveTerms:
    """The method's terms: the loss, its reduction and what is added to it (a run's config, resolved).

    Shapes: B rows (G completions per prompt), T loss units (tokens); ``L`` as in :func:`grpo_objective`.

    policy_loss:        ``fn(inp: LossInputs, **loss_options) -> (loss [B, T], metrics)``: the per-token
                        negated surrogate, GRPO's clipped ``min(r_it A_it, clip(r_it, 1-ε, 1+ε) A_it)``
                        (Shao et al., "DeepSeekMath", arXiv 2402.03300, eq. 3) or a registered variant
    aggregate:          ``fn(x [B, T], mask [B, T], **totals) -> []``, the ``Agg`` of ``L``: GRPO's
                        ``1/G Σ_i 1/|o_i| Σ_t`` (``seq_mean_token_mean``), ``token_mean``, Dr.GRPO's ``constant``
    kl_estimator:       ``fn(logp [B, T], ref_logp [B, T], **kl_options) -> KL [B, T]`` (k1, k2, k3;
                        GRPO's eq. 4 is k3 = π_ref/π_θ - log(π_ref/π_θ) - 1); None: no KL term
    beta:               β ≥ 0, the KL coefficient; 0: no KL term (the estimator is not called)
    loss_options:       keyword options offered to the loss, which takes the keys its signature names
                        (ε_low, ε_high, ratio, …; unknown user keys are refused at config load)
    kl_options:         keyword options offered to the estimator (e.g. ``clamp``)
    kl_scope:           the token weighting's declared ``kl_scope``: 'weighted' (weights, the mask
                        normalises) or 'selected' (a selection: it normalises, and the KL acts on it
                        alone; equations in :func:`grpo_objective`)
    kl_aggregate:       the loss's own reduction of β·KL (its declared ``kl_aggregation``), called like
                        ``aggregate``: ``L = Agg[loss] + β KLAgg[KL]``; None: β·KL is added per token
    entropy_coef:       c: an entropy bonus ``-c H_it`` per token (``inp.entropy`` must carry gradient); 0: none
    correction:         ``fn(old_logp, behaviour_logp, mask, **correction_options) -> (w [B, T], metrics)``:
                        the off-policy / sampler-mismatch weight, multiplying the policy-gradient term
                        only (not β·KL nor the entropy bonus); None: no correction
    correction_options: keyword options of ``correction``

    Mappings are held as given (not copied): a loss's option schedule updates them between steps.
    """

    policy_loss: Callable[..., tuple[torch.Tensor, dict]]
    aggregate: Callable[..., torch.Tensor]
    kl_estimator: Optional[Callable[..., torch.Tensor]] = None
    beta: float = 0.0
    loss_options: Mapping[str, Any] = field(default_factory=dict)
    kl_options: Mapping[str, Any] = field(default_factory=dict)
    kl_scope: str = "weighted"
    kl_aggregate: Optional[Callable[..., torch.Tensor]] = None
    entropy_coef: float = 0.0
    correction: Optional[Callable[..., tuple[torch.Tensor, dict]]] = None
    correction_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kl_scope not in KL_SCOPES:
            raise ValueError(f"unknown kl_scope '{self.kl_scope}'; choose one of: {', '.join(KL_SCOPES)}")
        if self.beta < 0:
            raise ValueError(f"ObjectiveTerms.beta is {self.beta}: the KL coefficient must be >= 0")
        if self.beta > 0 and self.kl_estimator is None:
            raise ValueError(f"ObjectiveTerms.beta is {self.beta} but kl_estimator is None: pass an estimator or set beta=0")


@dataclass(frozen=True)
class BatchTotals:
    """The optimizer batch's totals: with them, the losses of its micro-batches sum to the full-batch loss.

    Each None means "this micro-batch's own", right when the micro-batch is the whole batch.

    num_seqs:     the batch's sequences (G per prompt): the ``1/G`` of sequence-mean aggregations;
                  None: the micro-batch's rows. Also offered to the loss (DisCO's batch-level constraint)
    num_tokens:   its loss units ``Σ_it m_it``: the normaliser of token-mean aggregations; None: the
                  micro-batch's. Also offered to the loss
    max_len:      the completion-length cap L_max: the ``constant`` aggregation's ``1/(G L_max)``
                  (Liu et al., "Understanding R1-Zero-Like Training", arXiv 2503.20783); None: that
                  aggregation refuses the call
    num_selected: ``N_sel = Σ_it 1[w_it m_it > 0]``, its selected loss units, the normaliser of the
                  'selected' β·KL term; None: the micro-batch's (at least 1)
    """

    num_seqs: Optional[float] = None
    num_tokens: Optional[float] = None
    max_len: Optional[int] = None
    num_selected: Optional[float] = None


def grpo_objective(
    inp: LossInputs, terms: ObjectiveTerms, totals: BatchTotals = BatchTotals()
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Scalar loss ``[]`` of a micro-batch and its metrics (tensors, detached).

    ``inp`` carries the ``[B, T]`` data, ``terms`` the method, ``totals`` the optimizer batch's
    normalisers (so gradient accumulation over micro-batches sums to exactly the full-batch loss;
    ``num_seqs`` / ``num_tokens`` are also offered to the loss, e.g. DisCO's constraint takes them).
    ``inp.token_weights [B, T]`` (λ-GRPO, forking tokens, …) multiply the per-token loss.
    ``terms.kl_scope`` says whether they are weights or a selection, and how they meet β·KL:

        'weighted':  L = Agg_m[ w_it (loss_it + β KL_it) ]                          (λ-GRPO's code)
        'selected':  L = Agg_{m·1[w>0]}[ w_it loss_it ] + β Σ_{w_it>0} KL_it / N_sel  (SPINE)

    'weighted' keeps the mask ``m`` as the normaliser; 'selected' aggregates over the selected
    tokens alone (token mean: ``Σ f·loss / Σ f``), as the forking-token authors' code aggregates
    with ``response_mask * entropy_top_mask`` ("Beyond the 80/20 Rule", arXiv 2506.01939, whose
    selection SPINE adopts). ``N_sel = totals.num_selected`` is the optimizer batch's count of
    selected loss tokens (default: this micro-batch's); it is also the token-mean normaliser, so
    micro-batches sum to the full-batch loss. With weights equal
    to the mask ('all') both are GRPO's ``Agg[loss + β KL]``. A loss's own KL reduction
    (``terms.kl_aggregate``) gives ``L = Agg[loss] + β KLAgg[KL]``, e.g. TS-GRPO's token-mean KL
    under a sequence-mean loss. The entropy bonus subtracts ``c H_it`` per token; the off-policy
    correction weight multiplies the policy-gradient term only.
    """
    num_seqs, num_tokens = totals.num_seqs, totals.num_tokens
    context = {**terms.loss_options, "num_seqs": num_seqs, "num_tokens": num_tokens}
    agg_totals = {"num_seqs": num_seqs, "num_tokens": num_tokens, "max_len": totals.max_len}  # the aggregations' context
    token_weights = inp.token_weights
    per_token, metrics = call_with(terms.policy_loss, inp, context=context)  # [B, T]
    if terms.correction is not None:
        if inp.behaviour_logp is None:
            raise ValueError("an off-policy correction needs the sampler's log-probs (behaviour_logp)")
        w, c_metrics = terms.correction(inp.old_logp.detach(), inp.behaviour_logp, inp.mask, **terms.correction_options)
        per_token = per_token * w
        metrics.update(c_metrics)
    if token_weights is not None:
        per_token = per_token * token_weights
    kl_term = None
    beta = terms.beta
    if beta > 0:  # an estimator is there: ObjectiveTerms refuses beta > 0 without one
        ref = inp.ref_logp.detach() if inp.ref_logp is not None else None
        kl = call_with(terms.kl_estimator, inp.logp, ref, context=terms.kl_options)  # [B, T]
        metrics["kl"] = masked_mean(kl.detach(), inp.mask)
        weighted_kl = kl if token_weights is None else kl * token_weights
        if token_weights is not None and terms.kl_scope == "selected":
            kl_term = _selected_kl(kl, token_weights, inp.mask, beta, totals.num_selected)
        elif terms.kl_aggregate is not None:
            kl_term = beta * call_with(terms.kl_aggregate, weighted_kl, inp.mask, context=agg_totals)
        else:
            per_token = per_token + beta * weighted_kl
    if terms.entropy_coef and inp.entropy is not None:
        # entropy bonus: maximise H, so subtract it from the loss (needs entropy with gradient)
        per_token = per_token - terms.entropy_coef * inp.entropy
    agg_mask = inp.mask
    if token_weights is not None and terms.kl_scope == "selected":
        # a selection replaces the mask: the loss is a mean over the selected tokens, not over all of them
        agg_mask = inp.mask * (token_weights > 0).to(inp.mask.dtype)
        agg_totals["num_tokens"] = totals.num_selected
    loss = call_with(terms.aggregate, per_token, agg_mask, context=agg_totals)
    if kl_term is not None:
        loss = loss + kl_term
    if inp.entropy is not None:
        metrics["entropy"] = masked_mean(inp.entropy.detach(), inp.mask)
    return loss, {k: v.detach() for k, v in metrics.items()}


def _selected_kl(
    kl: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, beta: float, num_selected: Optional[float]
) -> torch.Tensor:
    """``[]`` β Σ_{i,t: w_it m_it > 0} KL_it / N_sel: the KL restricted to the selected tokens, their mean.

    kl, weights, mask: ``[B, T]``. ``N_sel`` is the optimizer batch's selected-token count
    (``num_selected``; default: this micro-batch's, at least 1). SPINE's KL anchor on the forking
    tokens f, ``λ_KL Σ f·k3 / Σ f`` ("SPINE: Token-Selective Test-Time Reinforcement Learning
    with Entropy-Band Regularization", arXiv 2511.17938).
    """
    selected = (weights * mask) > 0
    n = num_selected if num_selected is not None else selected.sum().clamp(min=1)
    return beta * torch.where(selected, kl, torch.zeros_like(kl)).sum() / n
