"""DPP set construction: log-det gains, greedy selection, and DPP-GRPO's sequential rewrite set.

Kazimi, Dunlop, Yanardag, "Diverse Video Generation with Determinantal Point Process-Guided
Policy Optimization", arXiv 2511.20647. Kernel ``L = cos(φ(p_i), φ(p_j))`` of unit embeddings,
set diversity ``Div(S) = log det(L_S + I)``, marginal gain ``Δ(p|S) = Div(S ∪ {p}) − Div(S)``
(monotone submodular: diminishing returns). At inference the paper builds the set one prompt
at a time: ``S = ∅``; ``p_1`` from ``(s, q)``, added to ``S``; ``p_k`` from ``(s, q, S)``; until
``K`` prompts (the paper's inference). :func:`build_rewrite_sets` is that loop for a text policy;
with ``n_candidates > 1`` it keeps, at each step, the candidate of highest reward
``λ_div Δ(p|S) + λ_rel R_rel(p)`` ([inferred option]: best-of-n per step; n = 1 is the paper's).
:func:`greedy_select` is the same greedy rule over a fixed candidate pool (greedy DPP MAP).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch


def log_det_gain(phi: torch.Tensor, ref: torch.Tensor, eps: float = 1.0) -> torch.Tensor:
    """Δ(p|R) = log(φ_p·φ_p + ε − k_pᵀ(L_R + εI)⁻¹k_p) for each row p of ``phi`` ``[n, d]`` → ``[n]``.

    ``ref`` ``[m, d]`` embeds R (m = 0: Δ = log(1 + ε) for a unit row); ``k_p = ref @ φ_p``. The
    Schur complement of the log-det of ``L + εI`` (ε = 1: the paper's ``+I``): an exact duplicate
    of the single member of R = {g} earns log 1.5, an orthogonal row log 2.
    """
    self_sim = (phi * phi).sum(-1) + eps  # [n]
    if ref.shape[0] == 0:
        return self_sim.log()
    k = phi @ ref.T  # [n, m]
    inner = ref @ ref.T + eps * torch.eye(ref.shape[0], dtype=ref.dtype, device=ref.device)  # [m, m]
    quad = (k * torch.linalg.solve(inner, k.T).T).sum(-1)  # [n] = k_pᵀ (L_R + εI)⁻¹ k_p
    return (self_sim - quad).log()


def set_diversity(phi: torch.Tensor, eps: float = 1.0) -> torch.Tensor:
    """Div(S) = log det(L_S + εI) of the rows of ``phi`` ``[n, d]`` (a scalar; 0 for the empty set)."""
    eye = torch.eye(phi.shape[0], dtype=phi.dtype, device=phi.device)
    return torch.logdet(phi @ phi.T + eps * eye)


def greedy_select(phi: torch.Tensor, k: int, quality: torch.Tensor | None = None, lambda_div: float = 1.0,
                  lambda_rel: float = 0.0, eps: float = 1.0) -> list[int]:
    """Indices of ``k`` rows of ``phi`` ``[n, d]`` picked one at a time by max λ_div Δ(i|S) + λ_rel quality_i.

    ``quality`` ``[n]`` (e.g. relevance to the query; None = 0). Ties go to the lowest index.
    Greedy maximisation of a monotone submodular ``Div``: within (1 − 1/e) of the best set for
    λ_rel = 0 (Nemhauser et al., 1978).
    """
    n = phi.shape[0]
    if not 0 <= k <= n:
        raise ValueError(f"greedy_select: k = {k} must be between 0 and the {n} candidates")
    qual = quality if quality is not None else phi.new_zeros(n)
    chosen: list[int] = []
    for _ in range(k):
        score = lambda_div * log_det_gain(phi, phi[chosen], eps) + lambda_rel * qual  # [n]
        score[chosen] = float("-inf")
        chosen.append(int(score.argmax()))
    return chosen


def build_rewrite_sets(
    generate: Callable[[list[str], int], list[list[str]]],
    queries: Sequence[str],
    k: int,
    embed: Callable[[list[str]], torch.Tensor] | str,
    *,
    n_candidates: int = 1,
    lambda_div: float = 0.5,
    lambda_rel: float = 0.5,
    prompt_for: Callable[[str, list[str]], str] | None = None,
) -> list[list[str]]:
    """``k`` rewrites per query, each generated from the prompt that lists the query's ones before it (the paper's inference).

    ``generate(prompts, n)`` returns n sampled completions per prompt (one batch per step for all
    queries); ``prompt_for(query, existing)`` writes a prompt (default: the ``prompt_rewrites``
    task's, so inference mirrors training). With ``n_candidates`` > 1 each step keeps the
    candidate of highest ``dpp`` reward against the query's set so far (relevance to the query
    through ``embed``) [inferred option].
    """
    from grpokit.data.rewrite_task import rewrite_prompt
    from grpokit.rewards.builtin import REWARDS

    if k < 1 or n_candidates < 1:
        raise ValueError(f"build_rewrite_sets: k ({k}) and n_candidates ({n_candidates}) must be >= 1")
    write = prompt_for or rewrite_prompt
    sets: list[list[str]] = [[] for _ in queries]
    for _ in range(k):
        batches = generate([write(q, s) for q, s in zip(queries, sets)], n_candidates)
        for query, chosen, cands in zip(queries, sets, batches):
            cands = [c.strip() for c in cands]
            n = len(cands)
            if n == 1:
                chosen.append(cands[0])
                continue
            scores = REWARDS.get("dpp")([query] * n, cands, group_ids=list(range(n)), embed=embed, reference="column",
                                        reference_set=[list(chosen)] * n, query=[query] * n,
                                        lambda_div=lambda_div, lambda_rel=lambda_rel)
            chosen.append(cands[max(range(n), key=lambda i: (scores[i], -i))])
    return sets


def set_metrics(query: str, texts: Sequence[str], embed: Callable[[list[str]], torch.Tensor] | str) -> dict[str, float]:
    """``diversity`` = Div(S) / |S| (mean log-det gain, log 2 = all orthogonal), ``relevance`` = mean cos(p, q), ``distinct`` share.

    ``embed``: a callable ``texts -> [n, d]`` or a built-in embedder name ("minilm", "hashing").
    """
    from grpokit.rewards.group import EMBEDDERS, _resolve, _unit

    encoder = _resolve(embed, EMBEDDERS, "embed")
    phi = _unit(encoder(list(texts)))  # [n, d]
    q = _unit(encoder([query]))[0]  # [d]
    n = max(len(texts), 1)
    return {"diversity": float(set_diversity(phi)) / n, "relevance": float((phi @ q).mean()),
            "distinct": len(set(texts)) / n}
