"""Advantage estimators: turn per-completion rewards into per-completion advantages.

Pure tensor functions. Inputs: ``rewards [B]`` (float) and ``group_ids [B]`` (int64, the prompt
each completion came from, values in ``0..num_groups-1``). Output: ``(adv [B], metrics)``.
Every estimator takes its own options as keywords and ignores keywords meant for others
(``scale``, ``std_mode``, ``std_eps`` …), so the trainer can pass one option dict to any of them.
Rows of a group need not be contiguous. The only stateful one, ``drpo``, receives its state as
an explicit :class:`~grpokit.algos.drpo.DRPOState` argument.
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.algos.drpo import DRPOState, drpo_scale_factors
from grpokit.registry import Registry

ADVANTAGES = Registry(
    "advantage",
    # make_state: a state factory (the trainer creates, passes and checkpoints the state);
    # reads_if: {context key: (switch, values)}, see Registry.context_taken
    properties={"make_state": None, "reads_if": None},
    context=("scale", "std_mode", "std_eps", "state", "domains", "mask"),
)


def group_mean_std(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_mode: str = "unbiased"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-completion group mean, group std and group size, each ``[B]``.

    ``std_mode='unbiased'`` divides by (n - 1) as ``torch.std`` does (TRL, verl);
    ``'population'`` divides by n.
    """
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    zeros = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
    counts = zeros.index_add(0, group_ids, torch.ones_like(rewards))
    sums = zeros.index_add(0, group_ids, rewards)
    mean = sums / counts.clamp(min=1)
    sq = zeros.index_add(0, group_ids, (rewards - mean[group_ids]) ** 2)
    denom = counts - 1 if std_mode == "unbiased" else counts
    std = (sq / denom.clamp(min=1)).sqrt()
    return mean[group_ids], std[group_ids], counts[group_ids]


_SCALED = ("group", "batch")  # the scales that divide by a std: only they read std_mode / std_eps


@ADVANTAGES.register("grpo", reads_if={"std_mode": ("scale", _SCALED), "std_eps": ("scale", _SCALED)})
def grpo_advantage(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    scale: str = "group",
    std_mode: str = "unbiased",
    std_eps: float = 1e-6,
    allow_singleton_groups: bool = False,
    clip: Optional[float] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO group-relative advantage A_i = (R_i - mean_g) / (std + eps).

    ``scale``: 'group' divides by the group std (DeepSeekMath, arXiv 2402.03300), 'batch' by the
    std of the whole batch's rewards, 'none' not at all (Dr. GRPO, arXiv 2503.20783).
    Groups whose rewards are all equal get advantage exactly 0 (counted in
    ``adv/zero_var_frac``). A group of one completion raises unless
    ``allow_singleton_groups`` (then mean 0, std 1 as verl does). ``clip`` = c > 0 clamps A to
    [-c, c] and logs ``adv/clipped_frac`` (Pref-GRPO, arXiv 2508.20751: c = 5; with unbiased
    group std |A| <= (G-1)/sqrt(G), so c = 5 binds only from G = 27).
    """
    if clip is not None and clip <= 0:
        raise ValueError(f"grpo advantage option clip must be > 0 or null, got {clip}")
    mean, std, counts = group_mean_std(rewards, group_ids, std_mode)
    singleton = _check_singletons(counts, allow_singleton_groups, "grpo")
    mean = torch.where(singleton, torch.zeros_like(mean), mean)
    std = torch.where(singleton, torch.ones_like(std), std)
    centred = rewards - mean
    if scale == "group":
        adv = centred / (std + std_eps)
    elif scale == "batch":
        adv = centred / (rewards.std(unbiased=std_mode == "unbiased") + std_eps)
    elif scale == "none":
        adv = centred
    else:
        raise ValueError(f"unknown advantage scale '{scale}'; choose group, batch or none")
    zero_var = _constant_groups(rewards, group_ids) & ~singleton
    adv = torch.where(zero_var, torch.zeros_like(adv), adv)
    if clip is None:
        return adv, _zero_var_summary(adv, group_ids, zero_var)
    clipped = adv.abs() > clip
    adv = adv.clamp(-clip, clip)
    return adv, {**_zero_var_summary(adv, group_ids, zero_var), "adv/clipped_frac": clipped.float().mean()}


@ADVANTAGES.register("dr_grpo")
def dr_grpo_advantage(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, allow_singleton_groups: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dr. GRPO advantage A_i = R_i - mean_g (no std division; arXiv 2503.20783).

    No std, so it takes no ``std_mode`` / ``std_eps`` / ``scale``: the run refuses them at load.
    """
    return grpo_advantage(rewards, group_ids, scale="none", allow_singleton_groups=allow_singleton_groups)


def _zero_var_summary(adv: torch.Tensor, group_ids: torch.Tensor, zero_var: torch.Tensor) -> dict[str, torch.Tensor]:
    """The metrics every advantage reports (same keys as ``grpo``)."""
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 1
    ones = torch.ones(group_ids.shape[0], device=group_ids.device)
    present = torch.zeros(num_groups, device=group_ids.device).index_add_(0, group_ids, ones) > 0
    zero_groups = torch.zeros(num_groups, device=group_ids.device).index_add_(0, group_ids, zero_var.float()) > 0
    return {
        "adv/mean": adv.mean(),
        "adv/std": adv.std() if adv.numel() > 1 else adv.new_zeros(()),
        "adv/abs_mean": adv.abs().mean(),
        "adv/zero_var_frac": zero_groups[present].float().mean(),
    }


def _constant_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the row's group has all rewards equal (exact, unlike ``std == 0`` after a rounded mean)."""
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    inf = torch.full((num_groups,), float("inf"), dtype=rewards.dtype, device=rewards.device)
    gmax = (-inf).scatter_reduce(0, group_ids, rewards.detach(), reduce="amax")
    gmin = inf.scatter_reduce(0, group_ids, rewards.detach(), reduce="amin")
    return (gmax == gmin)[group_ids]


def _check_singletons(counts: torch.Tensor, allow: bool, name: str) -> torch.Tensor:
    singleton = counts < 2
    if bool(singleton.any()) and not allow:
        raise ValueError(f"advantage '{name}' needs at least 2 completions per group (rollout.group_size >= 2)")
    return singleton


@ADVANTAGES.register("rloo", reads_if={"std_mode": ("divide_by_std", (True,)), "std_eps": ("divide_by_std", (True,))})
def rloo_advantage(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    divide_by_std: bool = False,
    std_mode: str = "unbiased",
    std_eps: float = 1e-6,
    allow_singleton_groups: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """RLOO leave-one-out advantage A_i = R_i - (sum_{j != i, j in g} R_j) / (n_g - 1).

    Equivalently ``A_i = n_g / (n_g - 1) · (R_i - mean_g)``; sums to 0 in every group.
    Shapes: rewards, group_ids, adv ``[B]``. Ahmadian et al., "Back to Basics: Revisiting
    REINFORCE Style Optimization for Learning from Human Feedback in LLMs", arXiv 2402.14740;
    the advantage of ESPO (arXiv 2512.03759; authors' code ML-GSAI/ESPO), whose optional division by the
    group std (``scale_rewards``, default off; ESPO's eps 1e-4) is ``divide_by_std``.
    Zero-variance groups get exactly 0. A singleton group raises unless
    ``allow_singleton_groups`` (then A = R, as verl's RLOO).
    """
    mean, std, counts = group_mean_std(rewards, group_ids, std_mode)
    singleton = _check_singletons(counts, allow_singleton_groups, "rloo")
    adv = counts / (counts - 1).clamp(min=1) * (rewards - mean)
    adv = torch.where(singleton, rewards, adv)
    if divide_by_std:
        adv = adv / (torch.where(singleton, torch.ones_like(std), std) + std_eps)
    zero_var = _constant_groups(rewards, group_ids) & ~singleton
    adv = torch.where(zero_var, torch.zeros_like(adv), adv)
    return adv, _zero_var_summary(adv, group_ids, zero_var)


@ADVANTAGES.register("reinforce_pp_baseline")
def reinforce_pp_baseline_advantage(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    whiten: str = "sequence",
    mask: Optional[torch.Tensor] = None,
    std_mode: str = "unbiased",
    std_eps: float = 1e-6,
    allow_singleton_groups: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REINFORCE++-baseline: A_i = (c_i - mean_batch(c)) / (std_batch(c) + eps), c_i = R_i - mean_g.

    Group-mean subtraction, then normalisation over the whole batch (not per group), so a hard
    prompt's advantages are not inflated by its small group std. Shapes: ``[B]`` in and out.
    Hu, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models",
    arXiv 2501.03262. [inferred] ``whiten``: 'sequence' (default) takes the batch statistics
    over completions; 'token' weights each completion by its token count ``mask.sum(-1)``
    (``mask [B, T]`` required), which is what verl / OpenRLHF's ``masked_whiten`` computes.
    With 'sequence' the batch mean is 0 and zero-variance groups stay at 0; with 'token' they
    are shifted by the token-weighted mean. A singleton group raises unless
    ``allow_singleton_groups`` (then its baseline is 0, as in verl).
    """
    mean, std, counts = group_mean_std(rewards, group_ids, std_mode)
    singleton = _check_singletons(counts, allow_singleton_groups, "reinforce_pp_baseline")
    centred = rewards - torch.where(singleton, torch.zeros_like(mean), mean)
    zero_var = _constant_groups(rewards, group_ids) & ~singleton
    centred = torch.where(zero_var, torch.zeros_like(centred), centred)
    if whiten == "sequence":
        w = torch.ones_like(rewards)
    elif whiten == "token":
        if mask is None:
            raise ValueError("reinforce_pp_baseline with whiten='token' needs mask [B, T]")
        w = mask.sum(-1).to(rewards.dtype)
    else:
        raise ValueError(f"unknown whiten '{whiten}' for reinforce_pp_baseline; choose sequence or token")
    n = w.sum()
    batch_mean = (w * centred).sum() / n.clamp(min=1)
    var = (w * (centred - batch_mean) ** 2).sum() / n.clamp(min=1)
    if std_mode == "unbiased":
        var = var * n / (n - 1).clamp(min=1)
    adv = (centred - batch_mean) / (var.sqrt() + std_eps)
    return adv, _zero_var_summary(adv, group_ids, zero_var)


def _comb_ratio(a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    """C(a, k) / C(b, k) for integer-valued float tensors with a <= b; 0 where a < k."""
    ok = a >= k
    a_ = torch.where(ok, a, torch.full_like(a, float(k)))
    log_r = torch.lgamma(a_ + 1) - torch.lgamma(a_ - k + 1) - torch.lgamma(b + 1) + torch.lgamma(b - k + 1)
    return torch.where(ok, log_r.exp(), torch.zeros_like(a))


@ADVANTAGES.register("passk")
def passk_advantage(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    k: int = 4,
    correct_threshold: float = 0.5,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Pass@k-training analytic advantage: the GRPO advantage of the group's pass@k reward.

    Per group of N rollouts with N_neg incorrect: mean pass@k reward
    ``R̄ = 1 - C(N_neg, k) / C(N, k)``, ``σ = sqrt(R̄ (1 - R̄))``;
    correct rows ``A = (1 - R̄) / σ``; incorrect rows
    ``A = (1 - R̄ - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / σ``. Sums to 0 per group; k = 1 is
    GRPO with population std. Shapes ``[B]``. Chen et al., "Pass@k Training for Adaptively
    Balancing Exploration and Exploitation of Large Reasoning Models", arXiv 2508.10751 (Eq. 14-15).
    Binary rewards assumed: [inferred] a row is correct when ``reward > correct_threshold``;
    [inferred] default ``k = 4``. Groups with no correct row or fewer than k incorrect rows
    have σ = 0 and get exactly 0.
    """
    if k < 1:
        raise ValueError(f"passk needs k >= 1, got k={k}")
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    correct = (rewards > correct_threshold).double()
    zeros = torch.zeros(num_groups, dtype=torch.float64, device=rewards.device)
    n = zeros.index_add(0, group_ids, torch.ones_like(correct))  # [num_groups]
    n_pos = zeros.index_add(0, group_ids, correct)
    if bool(((n < k) & (n > 0)).any()):
        raise ValueError(f"passk needs at least k={k} completions per group (rollout.group_size >= k)")
    n_neg = n - n_pos
    r_bar = 1.0 - _comb_ratio(n_neg, n, k)  # [num_groups]
    p_cond = _comb_ratio((n_neg - 1).clamp(min=0), (n - 1).clamp(min=0), k - 1)
    sigma = (r_bar * (1.0 - r_bar)).clamp(min=0).sqrt()
    zero_g = (n_pos == 0) | (n_neg < k)
    sigma = torch.where(zero_g, torch.ones_like(sigma), sigma)
    a_pos = (1.0 - r_bar) / sigma
    a_neg = (1.0 - r_bar - p_cond) / sigma
    adv = torch.where(correct.bool(), a_pos[group_ids], a_neg[group_ids])
    zero_var = zero_g[group_ids]
    adv = torch.where(zero_var, torch.zeros_like(adv), adv).to(rewards.dtype)
    metrics = _zero_var_summary(adv, group_ids, zero_var)
    metrics["passk/group_reward_mean"] = r_bar[n > 0].mean().to(rewards.dtype)
    return adv, metrics


def _row_domains(domains: object, batch: int) -> list[str]:
    if isinstance(domains, torch.Tensor):
        keys = [str(int(d)) for d in domains.tolist()]
    elif isinstance(domains, (list, tuple)):
        keys = [str(d) for d in domains]
    else:
        raise ValueError("advantage 'drpo' needs domains=[one domain per completion] (list[str] or LongTensor [B])")
    if len(keys) != batch:
        raise ValueError(f"drpo: got {len(keys)} domains for {batch} completions")
    return keys


@ADVANTAGES.register("drpo", inputs=("domains",), make_state=DRPOState)
def drpo_advantage(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    domains: object = None,
    state: Optional[DRPOState] = None,
    std_mode: str = "unbiased",
    std_eps: float = 1e-6,
    k_max: int = 10,
    elbow_tol: float = 0.10,
    max_history: Optional[int] = None,
    sort_group_rewards: bool = False,
    seed: int = 0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """QoQ-Med DRPO advantage: GRPO advantage scaled down by domain and cluster abundance and ease.

    ``Â_i = (R_i - mean_g) / (std_g + eps)``; ``A'_i = Â_i / f_q(i)`` with
    ``f = max(T_d sqrt(N_c) μ_c, eps)``, ``T_d = max(sqrt(N_d) μ_d, eps)`` (see
    :func:`grpokit.algos.drpo.drpo_scale_factors`); ``A''_i = A'_i / (std_batch(A') + eps)``.
    Shapes: rewards, group_ids ``[B]``, ``domains`` list[str] or LongTensor ``[B]`` (one per row,
    equal within a group), adv ``[B]``. Dai et al., "QoQ-Med: Building Multimodal Clinical
    Foundation Models with Domain-Aware GRPO Training", arXiv 2506.00711.
    ``state``: the persistent :class:`DRPOState`, updated in place (the trainer keeps and
    checkpoints it); ``None`` uses a fresh state, i.e. only this batch's questions. Rewards are
    assumed in [0, 1]. All groups must have the same size G. [inferred] options:
    ``sort_group_rewards``, ``max_history`` (see the factor function); ``k_max`` is 10 as in the
    authors' code (one version of it uses 20).
    """
    keys = _row_domains(domains, rewards.shape[0])
    state = DRPOState() if state is None else state
    mean, std, counts = group_mean_std(rewards, group_ids, std_mode)
    _check_singletons(counts, False, "drpo")
    zero_var = _constant_groups(rewards, group_ids)
    a_hat = torch.where(zero_var, torch.zeros_like(rewards), (rewards - mean) / (std + std_eps))

    qids, q_counts = torch.unique(group_ids, return_counts=True)  # sorted group ids present
    if bool((q_counts != q_counts[0]).any()):
        raise ValueError("drpo needs every group to have the same number of completions")
    order = torch.argsort(group_ids, stable=True)  # rows grouped by question, rollout order kept
    vectors = rewards.detach()[order].view(qids.shape[0], int(q_counts[0]))  # [Q, G]
    q_domain = [keys[int(i)] for i in order[:: int(q_counts[0])]]
    q_of = {g: q for q, g in enumerate(qids.tolist())}
    for row, gid in enumerate(group_ids.tolist()):
        if keys[row] != q_domain[q_of[gid]]:
            raise ValueError(f"drpo: completions of group {gid} have different domains")

    factors, metrics = drpo_scale_factors(
        vectors, q_domain, state, k_max=k_max, elbow_tol=elbow_tol, eps=std_eps,
        max_history=max_history, sort_group_rewards=sort_group_rewards, seed=seed,
    )
    f_rows = factors.to(rewards)[torch.searchsorted(qids, group_ids)]  # [B]
    scaled = a_hat / f_rows
    batch_std = scaled.std(unbiased=std_mode == "unbiased") if scaled.numel() > 1 else scaled.new_zeros(())
    adv = scaled / (batch_std + std_eps)
    metrics.update(_zero_var_summary(adv, group_ids, zero_var))
    return adv, metrics


# The trainer creates, passes and checkpoints the state of a stateful estimator.
