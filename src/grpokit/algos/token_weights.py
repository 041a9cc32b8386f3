"""Per-token weights / selection masks ``[B, T]`` that multiply the per-token policy loss.

Every registered function has the signature
``fn(mask [B, T], *, completion_ids=None, group_ids=None, entropy=None, rewards=None, **opts)
-> (weights [B, T], metrics)`` and ignores keywords it does not use. Weights are 0 wherever
``mask`` is 0 and carry no gradient. Also here, unregistered: the SPINE entropy-band penalty
(variational reasoning's IWAE trace weights are in :mod:`grpokit.algos.variational`).

Each registration declares ``kl_scope``, whether its output is a weighting or a selection, which
sets how the loss is normalised and how the objective's β·KL term meets it
(:func:`grpokit.algos.objective.grpo_objective`):

* ``'weighted'`` (default): the weight multiplies the whole per-token objective,
  ``w_it · (loss_it + β KL_it)``, aggregated with ``mask``, so the token-count denominators are
  unchanged (λ-GRPO's code weights ``g − β k3`` and keeps the mask).
* ``'selected'``: the weights are a selection that replaces the mask: the loss is aggregated
  over the selected tokens (token mean ``Σ f·loss / Σ f``, as the forking-token code aggregates
  with ``response_mask * entropy_top_mask``), and the KL acts on them only, their mean over the
  whole optimizer batch, ``β Σ_{w_it>0} KL_it / N_selected`` (SPINE's KL anchor on the forks).
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.algos.variational import forward_kl_weights
from grpokit.registry import Registry

TOKEN_WEIGHTS = Registry(
    "token_weights",
    properties={"kl_scope": "weighted"},  # 'weighted' | 'selected', see the module docstring
    context=("completion_ids", "group_ids", "entropy", "rewards"),
)
KL_SCOPES = ("weighted", "selected")


def _float_mask(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.is_floating_point() else mask.to(torch.get_default_dtype())


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


@TOKEN_WEIGHTS.register("all")
def all_tokens(mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Every valid token with weight 1: w_it = m_it (plain GRPO). ``[B, T]``."""
    m = _float_mask(mask)
    return m.clone(), {"tokens/selected_frac": m.new_ones(())}


@TOKEN_WEIGHTS.register("lambda_grpo", inputs=("completion_ids", "group_ids"))
def lambda_grpo_weights(
    mask: torch.Tensor,
    *,
    completion_ids: Optional[torch.Tensor] = None,
    group_ids: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """λ-GRPO prefix-trie weights w_it = m_it / n_it, n_it = #{j in group(i): o_j,1..t = o_i,1..t}.

    ``n_it`` counts the completions of i's group (i and duplicates included) that share i's
    prefix up to and including token t — the size of the trie node holding token t — so each
    trie node's tokens carry total weight 1 instead of ``|λ|``. The weight multiplies the whole
    per-token objective ``w_it (g_it − β k3_it)`` (``kl_scope`` 'weighted'), as the authors'
    code (coli-saar/grpo-prm) does; the denominators still count tokens.
    Shapes: mask, completion_ids ``[B, T]``, group_ids ``[B]``; weights ``[B, T]``.
    Sullivan (& Koller), "GRPO is Secretly a Process Reward Model", arXiv 2509.21154.
    Two positions match only if token ids *and* mask values agree, so a completion that ends
    (mask 0, padding — even when the pad id equals EOS) splits from a longer one there, while
    masked environment tokens shared by multi-turn trajectories still count as shared.
    Cost: O(G²·T) memory per group, computed group by group.
    """
    if completion_ids is None or group_ids is None:
        raise ValueError("token weights 'lambda_grpo' need completion_ids [B, T] and group_ids [B]")
    m = _float_mask(mask)
    valid = mask > 0
    n = torch.ones_like(m)
    for g in torch.unique(group_ids):
        idx = (group_ids == g).nonzero(as_tuple=True)[0]
        ids, v = completion_ids[idx], valid[idx]  # [G, T]
        same = (ids[:, None, :] == ids[None, :, :]) & (v[:, None, :] == v[None, :, :])  # [G, G, T]
        shared = same.to(torch.int32).cumprod(-1)  # 1 while the prefixes through t agree
        n[idx] = shared.sum(1).to(m.dtype)
    w = m / n
    metrics = {
        "lambda/weight_mean": _masked_mean(w, m),
        "lambda/shared_frac": _masked_mean((n > 1).to(m.dtype), m),
    }
    return w, metrics


def _top_fraction(h: torch.Tensor, valid: torch.Tensor, rho: float, at_least_one: bool) -> torch.Tensor:
    """Per row of ``h [R, N]``: the ceil(rho · n_valid) highest valid entries; ties → earlier index."""
    n_valid = valid.sum(-1).to(torch.float64)  # [R]
    # the -1e-9 keeps ceil(0.2 * 15) = 3, not 4 from 3.0000000000000004
    k = torch.ceil(rho * n_valid - 1e-9).to(torch.long)
    if at_least_one:
        k = torch.where(n_valid > 0, k.clamp(min=1), k)
    order = torch.argsort(h.masked_fill(~valid, float("-inf")), dim=-1, descending=True, stable=True)
    positions = torch.arange(h.shape[-1], device=h.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(-1, order, positions)
    return (rank < k[:, None]) & valid


@TOKEN_WEIGHTS.register("forking", inputs=("entropy",), kl_scope="selected")
def forking_tokens(
    mask: torch.Tensor,
    *,
    entropy: Optional[torch.Tensor] = None,
    rho: float = 0.2,
    scope: str = "batch",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SPINE forking-token mask: f_it = 1 for the top-ρ fraction highest-entropy valid tokens.

    Exactly ``ceil(ρ · n_valid)`` tokens are kept (the "80th percentile threshold" for ρ = 0.2),
    ties broken towards the earlier position; entropies are detached. Only the kept tokens get
    policy gradient, and they replace the mask (``kl_scope`` 'selected'): the policy term is
    their mean, ``Σ f·g / Σ f`` under token-mean aggregation, and the β·KL anchor is
    ``β Σ_t f_it k3_it / Σ f``, the paper's masked KL on forking tokens. (Before 2026-12-06 the
    policy term was divided by all valid tokens, ~5x weaker at ρ = 0.2 than the paper's.)
    Shapes: mask, entropy ``[B, T]`` → ``[B, T]`` in {0, 1}.
    Wu et al., "SPINE: Token-Selective Test-Time Reinforcement Learning with Entropy-Band
    Regularization", arXiv 2511.17938. [inferred] ``scope``: 'batch'
    (default: one threshold over all valid tokens of the batch) or 'sequence' (per row, at least
    one fork per non-empty row).
    """
    if entropy is None:
        raise ValueError("token weights 'forking' need entropy [B, T] (per-token policy entropy)")
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"forking: rho must be in (0, 1], got {rho}")
    valid = mask > 0
    h = entropy.detach().float()
    if scope == "batch":
        sel = _top_fraction(h.reshape(1, -1), valid.reshape(1, -1), rho, False).view_as(valid)
    elif scope == "sequence":
        sel = _top_fraction(h, valid, rho, True)
    else:
        raise ValueError(f"forking: unknown scope '{scope}'; choose batch or sequence")
    f = sel.to(_float_mask(mask).dtype)
    return f, {"tokens/selected_frac": f.sum() / valid.sum().clamp(min=1)}


def entropy_band_penalty(
    entropy: torch.Tensor,
    forks: torch.Tensor,
    *,
    coef: float = 1.0,
    low_q: float = 0.10,
    high_q: float = 0.50,
    interpolation: str = "linear",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SPINE entropy-band regulariser R = λ_band · mean_{i, t∈S_i}([H_it − H_hi,i]_+ + [H_lo,i − H_it]_+).

    ``H_lo,i = Q_low_q(H_i,S_i)``, ``H_hi,i = Q_high_q(H_i,S_i)`` over row i's fork set ``S_i``
    (detached); the mean runs over all N forks of the batch, so ``∂R/∂H_it`` is ``+coef/N`` above
    the band, ``−coef/N`` below it, 0 inside. Differentiable through ``entropy``.
    Shapes: entropy, forks ``[B, T]`` → scalar. SPINE, arXiv 2511.17938.
    [inferred] ``coef`` (λ_band) = 1.0 and the quantile ``interpolation`` ('linear', as numpy).
    """
    sel = forks > 0
    h_det = entropy.detach().float().masked_fill(~sel, float("nan"))
    lo = torch.nanquantile(h_det, low_q, dim=-1, keepdim=True, interpolation=interpolation)  # [B, 1]
    hi = torch.nanquantile(h_det, high_q, dim=-1, keepdim=True, interpolation=interpolation)
    # rows without forks give NaN quantiles; they are masked out below
    lo, hi = lo.nan_to_num(0.0).to(entropy.dtype), hi.nan_to_num(0.0).to(entropy.dtype)
    viol = torch.relu(entropy - hi) + torch.relu(lo - entropy)
    viol = torch.where(sel, viol, torch.zeros_like(viol))
    n = sel.sum()
    penalty = coef * viol.sum() / n.clamp(min=1)
    with torch.no_grad():
        below = (sel & (entropy < lo)).sum() / n.clamp(min=1)
        above = (sel & (entropy > hi)).sum() / n.clamp(min=1)
    return penalty, {"band/penalty": penalty.detach(), "band/below_frac": below, "band/above_frac": above}


@TOKEN_WEIGHTS.register("variational", inputs=("rewards", "group_ids"))
def variational_posterior_weights(
    mask: torch.Tensor,
    *,
    rewards: Optional[torch.Tensor] = None,
    group_ids: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Forward-KL posterior weights w_it = m_it · r_i / sum_{j in group(i)} r_j (0 if the sum is 0).

    The gradient of ``KL(p_θ(z|x,Y) ‖ q)`` is an SFT step on sampled traces weighted by
    ``π(Y|x,z) / P(Y|x)``; with binary correctness ``r`` this is ``1[correct_i] / #correct`` per
    prompt — every prompt with a correct trace weighs 1, unlike RFT (weight p) or GRPO
    (``sqrt(p/(1−p))``). The ``variational`` preset does not use this weighting: its method is the
    ``variational`` stage (:mod:`grpokit.trainer.variational`), which appends posterior rows and
    these forward-KL rows with the weights as advantages. As token weights of the step's own
    samples under a GRPO advantage they only rescale and mask rows.
    Shapes: mask ``[B, T]``, rewards, group_ids ``[B]`` → ``[B, T]``.
    Zhou et al., "Variational Reasoning for Language Models", arXiv 2509.22637.
    [inferred] non-binary rewards in [0, 1] (e.g. the ``Acc`` estimate of
    π(Y|x,z)) are used as they are; negative rewards are clamped to 0.
    """
    if rewards is None or group_ids is None:
        raise ValueError("token weights 'variational' need rewards [B] and group_ids [B]")
    m = _float_mask(mask)
    w_row = forward_kl_weights(rewards.to(m.dtype), group_ids)  # [B]
    w = m * w_row[:, None]
    return w, {"variational/trained_frac": (w_row > 0).to(m.dtype).mean()}


__all__ = [
    "TOKEN_WEIGHTS",
    "all_tokens",
    "lambda_grpo_weights",
    "forking_tokens",
    "entropy_band_penalty",
    "variational_posterior_weights",
]
