"""QoQ-Med DRPO: per-domain question clustering and the hierarchical advantage scale factor.

Dai, Chen, Ekbote, Liang, "QoQ-Med: Building Multimodal Clinical Foundation Models with
Domain-Aware GRPO Training", arXiv 2506.00711 (the steps follow the authors' code
``verl/trainer/core_algos.py::compute_drpo_outcome_advantage``).

The registered advantage lives in :mod:`grpokit.algos.advantages` (``"drpo"``); this module
holds the parts that are not plain tensor algebra: the persistent per-domain history
(:class:`DRPOState`, checkpointable), a small deterministic k-means, the elbow rule for ``k`` and
the factor ``f = T_d · sqrt(N_c) · μ_c``. Everything runs on CPU in float64 — the history is a
few hundred points in ``R^G``.

Departure from the authors' code: k-means is our own (k-means++ seeding from a seeded
``torch.Generator`` + Lloyd iterations), not scikit-learn's, so on ambiguous data it can pick a
different clustering than ``KMeans(n_init="auto", random_state=0)``. On well-separated data
(and whenever ``#unique rows ≤ k``) the result is the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch


@dataclass
class DRPOState:
    """Per-domain history of question reward vectors ``V_d`` (``[N_d, G]`` each), kept across steps.

    The trainer owns one instance, passes it to the ``"drpo"`` advantage every step (which
    appends the step's questions to it) and saves ``state_dict()`` in its checkpoints.
    """

    history: dict[str, torch.Tensor] = field(default_factory=dict)

    def append(self, domain: str, vectors: torch.Tensor, max_history: Optional[int] = None) -> torch.Tensor:
        """Append ``vectors [n, G]`` to ``domain``'s history; return their row indices in it."""
        vectors = vectors.detach().to("cpu", torch.float64)
        old = self.history.get(domain)
        if old is not None and old.shape[1] != vectors.shape[1]:
            raise ValueError(
                f"drpo: group size changed from {old.shape[1]} to {vectors.shape[1]} for domain "
                f"'{domain}'; DRPO needs a fixed rollout.group_size (or a fresh DRPOState)"
            )
        hist = vectors if old is None else torch.cat([old, vectors])
        if max_history is not None:
            # never drop the questions of the current step: they are clustered below
            hist = hist[-max(max_history, vectors.shape[0]) :]
        self.history[domain] = hist
        n = hist.shape[0]
        return torch.arange(n - vectors.shape[0], n, device=hist.device)

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"history": {d: v.clone() for d, v in self.history.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.history = {
            str(d): torch.as_tensor(v, dtype=torch.float64, device="cpu").clone() for d, v in state["history"].items()
        }


def kmeans(
    points: torch.Tensor, k: int, *, seed: int = 0, max_iter: int = 300, tol: float = 1e-12
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Lloyd's k-means with k-means++ seeding: ``(labels [N], centroids [k, D], inertia)``.

    Deterministic for a given ``seed``. Needs at least ``k`` distinct rows (D²-weighted seeding
    then never picks a duplicate centre, so no cluster starts empty).
    """
    n = points.shape[0]
    gen = torch.Generator(device=points.device).manual_seed(seed)
    centres = [points[int(torch.randint(n, (1,), generator=gen, device=points.device))]]
    d2 = ((points - centres[0]) ** 2).sum(-1)  # [N]
    for _ in range(1, k):
        nxt = int(torch.multinomial(d2 / d2.sum(), 1, generator=gen))
        centres.append(points[nxt])
        d2 = torch.minimum(d2, ((points - points[nxt]) ** 2).sum(-1))
    c = torch.stack(centres)  # [k, D]
    for _ in range(max_iter):
        labels = torch.cdist(points, c).argmin(-1)
        sizes = torch.bincount(labels, minlength=k).to(points.dtype)
        sums = torch.zeros_like(c).index_add_(0, labels, points)
        # an emptied cluster keeps its old centre rather than becoming NaN
        new_c = torch.where(sizes[:, None] > 0, sums / sizes.clamp(min=1)[:, None], c)
        shift = float(((new_c - c) ** 2).sum())
        c = new_c
        if shift <= tol:
            break
    d = torch.cdist(points, c) ** 2  # [N, k]
    labels = d.argmin(-1)
    inertia = float(d.gather(1, labels[:, None]).sum())
    return labels, c, inertia


@dataclass
class DomainClusters:
    """Clustering of one domain's history: labels ``[N_d]``, per-cluster sizes and mean rewards."""

    labels: torch.Tensor  # [N_d] cluster index of each history row
    sizes: torch.Tensor  # [k] N_c
    centroid_means: torch.Tensor  # [k] μ_c = mean of the centroid vector
    mu_d: float  # Σ_c (μ_c / N_c) / Σ_c (1 / N_c)


def cluster_domain(history: torch.Tensor, *, k_max: int = 10, elbow_tol: float = 0.10, seed: int = 0) -> DomainClusters:
    """k-means on ``history [N_d, G]`` with ``k`` from the elbow rule, plus the domain difficulty μ_d.

    Elbow (authors' ``_select_k_elbow``): fit k = 1..k_cap with ``k_cap = min(k_max, #unique
    rows)``, inertias I_k; take the smallest k ≥ 2 with ``I_k − I_{k+1} < elbow_tol · (I_{k−1} − I_k)``;
    k = 1 when k_cap = 1, k = k_cap when no k qualifies.
    """
    k_cap = min(k_max, int(torch.unique(history, dim=0).shape[0]))
    fits = [kmeans(history, k, seed=seed) for k in range(1, k_cap + 1)]
    inertia = [f[2] for f in fits]
    k = k_cap
    for j in range(1, k_cap - 1):
        # drops[j] = I_{j+1} − I_{j+2}, so this tests k = j + 1
        if inertia[j] - inertia[j + 1] < elbow_tol * (inertia[j - 1] - inertia[j]):
            k = j + 1
            break
    labels, centroids, _ = fits[k - 1]
    sizes = torch.bincount(labels, minlength=k).to(torch.float64)
    means = centroids.mean(-1)
    used = sizes > 0
    inv = 1.0 / sizes[used]
    mu_d = float((inv * means[used]).sum() / inv.sum())
    return DomainClusters(labels=labels, sizes=sizes, centroid_means=means, mu_d=mu_d)


def drpo_scale_factors(
    vectors: torch.Tensor,
    domains: Sequence[str],
    state: DRPOState,
    *,
    k_max: int = 10,
    elbow_tol: float = 0.10,
    eps: float = 1e-6,
    max_history: Optional[int] = None,
    sort_group_rewards: bool = False,
    seed: int = 0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DRPO scale factor per question ``f_q = max(T_d · sqrt(N_c) · μ_c, eps)``, ``[Q]``; updates ``state``.

    ``vectors [Q, G]`` are this step's question reward vectors, ``domains`` their domains (len Q).
    Steps (as the authors' code): append the vectors to ``V_d`` (the current step counts), cluster
    every domain present, ``T_d = max(sqrt(N_d) · μ_d, eps)`` with ``N_d = |V_d|``; a question's
    cluster is the label of its own (just appended) row.
    [inferred] The final clamp ``f ≥ eps`` is our fix for ``μ_c ≤ 0`` (absent from the authors' code).
    [inferred] ``sort_group_rewards``: sort each vector first, making the point independent of the
    (exchangeable) rollout order; off by default as in the authors' code.
    [inferred] ``max_history``: keep only the newest rows per domain; ``N_d`` is then the kept count.
    """
    if sort_group_rewards:
        vectors = vectors.sort(dim=-1).values
    factors = torch.empty(vectors.shape[0], dtype=torch.float64, device=vectors.device)
    ks = []
    for dom in dict.fromkeys(domains):  # unique, in order of first appearance
        q_idx = torch.tensor([i for i, d in enumerate(domains) if d == dom], device=vectors.device)
        rows = state.append(dom, vectors[q_idx], max_history)
        cl = cluster_domain(state.history[dom], k_max=k_max, elbow_tol=elbow_tol, seed=seed)
        t_d = max(math.sqrt(state.history[dom].shape[0]) * cl.mu_d, eps)
        c = cl.labels[rows]
        factors[q_idx] = (t_d * cl.sizes[c].sqrt() * cl.centroid_means[c]).clamp(min=eps)
        ks.append(float(cl.sizes.shape[0]))
    metrics = {
        "drpo/factor_mean": factors.mean(),
        "drpo/factor_min": factors.min(),
        "drpo/factor_max": factors.max(),
        "drpo/k_mean": factors.new_tensor(sum(ks) / max(len(ks), 1)),
    }
    return factors, metrics
