"""Group-level rewards: scores that depend on all G completions of a prompt at once.

A group reward is called like a sample reward plus ``group_ids`` (rows with equal ids are the
completions of one prompt; ``None`` = one group) and carries ``fn.group_level = True`` so that
``score_completions`` passes the ids and never retries it sample by sample. Options given as
strings (from a YAML config) name a built-in ("number", "length", "hashing", …) or a
``"module:function"`` / ``"file.py:function"`` callable. Choices the papers do not fix ([inferred]) are
options, and each docstring says which.
"""

from __future__ import annotations

import inspect
import math
import zlib
from typing import Any, Callable, Optional, Sequence

import torch

from grpokit.data.answers import extract_answer_number, extract_stated_number, numbers_equal
from grpokit.rewards.builtin import REWARDS
from grpokit.rewards import embedders as _embedders, judge as _judge  # "minilm", "llm_judge"


def _group_level(fn: Callable) -> Callable:
    fn.group_level = True  # type: ignore[attr-defined]
    return fn


def _groups(group_ids: Optional[Sequence[int]], n: int) -> list[list[int]]:
    """Row indices of each group, groups in order of first appearance, rows in batch order."""
    if group_ids is None:
        return [list(range(n))] if n else []
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    if len(ids) != n:
        raise ValueError(f"group_ids has {len(ids)} entries for {n} completions")
    out: dict[Any, list[int]] = {}
    for i, g in enumerate(ids):
        out.setdefault(g, []).append(i)
    return list(out.values())


def _resolve(value: Any, builtins: dict[str, Callable], option: str) -> Callable:
    """A callable option: itself, a built-in name, or a 'module:function' / 'file.py:function' spec."""
    if callable(value):
        return value
    if isinstance(value, str) and value in builtins:
        return builtins[value]
    if isinstance(value, str) and ":" in value:
        from grpokit.rewards.loading import resolve_reward  # lazy: loading imports builtin

        return resolve_reward(value)
    raise ValueError(
        f"option '{option}' = {value!r}: give a callable, one of {sorted(builtins)}, "
        "or 'module:function' / 'file.py:function'"
    )


def _call_with_columns(fn: Callable, args: tuple, row: dict[str, Any]) -> Any:
    """Call ``fn(*args, **cols)`` passing only the row columns that ``fn`` accepts by name or **kwargs."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn(*args)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return fn(*args, **row)
    names = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return fn(*args, **{k: v for k, v in row.items() if k in names})


def _row(columns: dict[str, Any], i: int) -> dict[str, Any]:
    # lists are per-row columns; scalars are options (e.g. win_rate's judge_model), the same for every row
    return {k: v[i] if isinstance(v, (list, tuple)) else v
            for k, v in columns.items() if not isinstance(v, (list, tuple)) or len(v) > i}


# ----------------------------------------------------------------------------- majority vote


def _last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


_EXTRACTORS: dict[str, Callable[[str], Any]] = {
    "stated_number": extract_stated_number, "number": extract_answer_number, "last_line": _last_line,
}
_NUMERIC = ("stated_number", "number")


def majority_answer(answers: list[Any], equal: Callable[[Any, Any], bool], tie_break: str) -> Any:
    """Most frequent answer (None answers do not vote); ties -> first occurrence, or None if 'skip'."""
    classes: list[list[Any]] = []  # [representative, count], in order of first occurrence
    for a in answers:
        if a is None:
            continue
        for c in classes:
            if equal(c[0], a):
                c[1] += 1
                break
        else:
            classes.append([a, 1])
    if not classes:
        return None
    best = max(c[1] for c in classes)
    winners = [c[0] for c in classes if c[1] == best]
    if len(winners) > 1 and tie_break == "skip":
        return None
    return winners[0]


@REWARDS.register("majority_vote")
@_group_level
def majority_vote(
    prompts: list[str],
    completions: list[str],
    group_ids: Optional[Sequence[int]] = None,
    extract: Any = "stated_number",
    equal: Optional[Callable[[Any, Any], bool]] = None,
    tie_break: str = "first",
    leave_one_out: bool = False,
    **kwargs: Any,
) -> list[float | None]:
    """TTRL majority-vote pseudo-reward r_i = 1[a_i ≡ a*], a* = the group's most frequent answer.

    Label-free: no ``answer`` column is read. ``a_i = extract(completion_i)``: "stated_number"
    (default, ``extract_stated_number``: only a number the completion states as its answer),
    "number" (``extract_answer_number``: also the last number of any text, the accuracy judge's
    rule), "last_line", or a callable ``str -> answer | None``; ``≡`` is ``numbers_equal`` for
    the two number extractors, ``==`` otherwise, or the ``equal`` callable. "number" lets a
    completion that answers nothing vote for the number it last mentions, which for "What is
    2 + 5?" is mostly the restated operand 5: from SmolLM2-135M-Instruct's first samples (20
    arithmetic prompts x 8) it made 5 of 20 majorities a restated operand, against 2 of 20 with
    "stated_number" (13 vs 15 majorities right).
    Choices: ties broken by first occurrence in the group
    (``tie_break="first"``, [inferred]; ``"skip"`` gives a tied group no label, so all 0);
    ``leave_one_out=True`` scores i against a*_{-i}, the majority of the other G-1 answers.
    [inferred] completions without an answer do not vote and score 0; a group where nobody
    answers scores 0 everywhere. Advantage: GRPO standardisation of r within the group.
    Departure: the G completions that vote are the ones trained on; TTRL votes with 64 samples
    and trains on 32 of them (its code's ``n_votes_per_prompt`` / ``n_samples_per_prompt``), so
    its pseudo-labels are less noisy and less often tied than a vote of 8.
    Papers: TTRL, "TTRL: Test-Time Reinforcement Learning", arXiv 2504.16084; SPINE,
    "SPINE: Token-Selective Test-Time Reinforcement Learning with Entropy-Band
    Regularization", arXiv 2511.17938.
    """
    if tie_break not in ("first", "skip"):
        raise ValueError(f"majority_vote: tie_break must be 'first' or 'skip', got {tie_break!r}")
    extractor = _resolve(extract, _EXTRACTORS, "extract")
    if equal is None:
        equal = (lambda a, b: numbers_equal(str(a), str(b))) if extract in _NUMERIC else (lambda a, b: a == b)
    answers = [extractor(c) for c in completions]
    scores: list[float | None] = [0.0] * len(completions)
    for rows in _groups(group_ids, len(completions)):
        group_answers = [answers[i] for i in rows]
        label = None if leave_one_out else majority_answer(group_answers, equal, tie_break)
        for pos, i in enumerate(rows):
            if leave_one_out:
                label = majority_answer(group_answers[:pos] + group_answers[pos + 1 :], equal, tie_break)
            scores[i] = float(answers[i] is not None and label is not None and equal(answers[i], label))
    return scores


# ----------------------------------------------------------------------------- win rate


def length_preference(prompt: str, a: str, b: str, shorter: bool = True) -> float:
    """P(a ≻ b) by length: 1.0 if ``a`` is shorter (longer when ``shorter=False``), 0.0 if not, 0.5 if equal."""
    if len(a) == len(b):
        return 0.5
    return float((len(a) < len(b)) == shorter)


def answer_preference(prompt: str, a: str, b: str, answer: Any = None) -> float:
    """P(a ≻ b) by correctness against ``answer``: 1.0 if only a is right, 0.0 if only b, else 0.5."""
    if answer is None:
        return 0.5

    def right(text: str) -> bool:
        got = extract_answer_number(text)
        return got is not None and numbers_equal(got, str(answer))

    ra, rb = right(a), right(b)
    return 0.5 if ra == rb else float(ra)


PREFERENCES: dict[str, Callable[..., float]] = {"length": length_preference, "answer": answer_preference, "llm_judge": _judge.llm_judge_prefer}


def _checked_probability(value: Any) -> float:
    p = float(value)
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"win_rate: prefer returned {p!r}; it must be a probability in [0, 1]")
    return p


@REWARDS.register("win_rate", forwards_options_to={"prefer": PREFERENCES})
@_group_level
def win_rate(
    prompts: list[str],
    completions: list[str],
    group_ids: Optional[Sequence[int]] = None,
    prefer: Any = None,
    symmetric: bool = False,
    hard: bool = False,
    **columns: Any,
) -> list[float | None]:
    """Pref-GRPO win rate w_i = (Σ_{j≠i} P(o_i ≻ o_j)) / (G − 1) within each group.

    ``prefer(prompt, a, b, **row) -> P(a ≻ b) ∈ [0, 1]`` is queried once per unordered pair
    (i < j, i shown first; G(G−1)/2 calls per prompt); i gets p and j gets 1 − p, so every
    comparison hands out exactly one point, Σ_i w_i = G/2 and mean w = 0.5. A judge verdict
    maps to p ∈ {1, 0, 0.5 (tie / unparsable)}. ``row`` = the columns of row i that ``prefer``
    accepts (e.g. ``answer``). Built-ins: "length", "answer". Options: ``hard`` rounds p to a
    verdict (>0.5 → 1, <0.5 → 0); ``symmetric`` [inferred, not in the paper] also asks
    prefer(b, a) and uses (p + 1 − p')/2 to cancel position bias. [inferred] a group of one
    has no comparisons and gets 0.5. Advantage (paper): (w − mean)/(std_unbiased + 1e-8),
    clipped to [−5, 5]. Paper: Wang et al., "Pref-GRPO: Pairwise Preference Reward-based GRPO
    for Stable Text-to-Image Reinforcement Learning", arXiv 2508.20751.
    """
    if prefer is None:
        raise ValueError("win_rate needs a 'prefer' option: 'length', 'answer', or 'module:function'")
    judge = _resolve(prefer, PREFERENCES, "prefer")
    scores: list[float | None] = [0.5] * len(completions)
    for rows in _groups(group_ids, len(completions)):
        if len(rows) < 2:
            continue
        wins = dict.fromkeys(rows, 0.0)
        for x, i in enumerate(rows):
            row = _row(columns, i)
            for j in rows[x + 1 :]:
                p = _checked_probability(_call_with_columns(judge, (prompts[i], completions[i], completions[j]), row))
                if symmetric:
                    q = _checked_probability(
                        _call_with_columns(judge, (prompts[i], completions[j], completions[i]), row)
                    )
                    p = (p + 1.0 - q) / 2.0
                if hard:
                    p = 1.0 if p > 0.5 else 0.0 if p < 0.5 else 0.5
                wins[i] += p
                wins[j] += 1.0 - p
        for i in rows:
            scores[i] = wins[i] / (len(rows) - 1)
    return scores


# ----------------------------------------------------------------------------- DPP diversity


def hashing_embed(texts: list[str], n: int = 3, dim: int = 2048) -> torch.Tensor:
    """Bag of hashed character n-grams, ``[len(texts), dim]`` float32 counts (unnormalised).

    Text is lower-cased, whitespace collapsed and padded with one space each side; each n-gram
    adds 1 to bucket ``crc32(ngram) mod dim`` (crc32 is stable across processes, unlike
    ``hash``). Offline stand-in for a sentence encoder: cosine ≈ character overlap.
    """
    out = torch.zeros(len(texts), dim, device="cpu")
    for row, text in enumerate(texts):
        words = " ".join(text.lower().split())
        if not words:
            continue  # empty text: zero vector
        s = " " + words + " "
        grams = [s[k : k + n] for k in range(max(len(s) - n + 1, 1))]
        idx = torch.tensor([zlib.crc32(g.encode("utf-8")) % dim for g in grams], device="cpu")
        out[row].index_add_(0, idx, out.new_ones(len(idx)))
    return out


EMBEDDERS: dict[str, Callable[[list[str]], torch.Tensor]] = {"hashing": hashing_embed, "minilm": _embedders.minilm_embed}


def _unit(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit norm in float64; zero rows stay zero (cosine 0 with everything)."""
    x = torch.as_tensor(x, dtype=torch.float64, device="cpu").detach()  # an embedder's output, from any device
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)


def _schur_and_refs(phi: torch.Tensor, reference: str, eps: float, ref_embs: list[torch.Tensor] | None):
    """Schur complements s_i = L_ii + ε − k_iᵀ(L_R + εI)⁻¹k_i ``[G]`` and each row's reference rows.

    "group": R = the other G−1 rows, s_i = 1 / [(L + εI)⁻¹]_ii. "sequential": R = rows before i,
    s_i = chol(L + εI)_ii². "column": R = the row's own reference embeddings.
    """
    g = phi.shape[0]
    kernel = phi @ phi.T  # [G, G] cosine kernel
    eye = torch.eye(g, dtype=phi.dtype, device=phi.device)
    if reference == "group":
        others = [phi[[j for j in range(g) if j != i]] for i in range(g)]
        return 1.0 / torch.linalg.inv(kernel + eps * eye).diagonal(), others
    if reference == "sequential":
        return torch.linalg.cholesky(kernel + eps * eye).diagonal() ** 2, [phi[:i] for i in range(g)]
    schur = phi.new_empty(g)
    for i in range(g):
        ref = ref_embs[i]  # type: ignore[index]
        k = ref @ phi[i]  # [|R|]
        inner = ref @ ref.T + eps * torch.eye(ref.shape[0], dtype=phi.dtype, device=phi.device)
        schur[i] = kernel[i, i] + eps - (k @ torch.linalg.solve(inner, k) if ref.shape[0] else 0.0)
    return schur, ref_embs


@REWARDS.register("dpp", forwards_options_to={"relevance_fn": {}})
@_group_level
def dpp(
    prompts: list[str],
    completions: list[str],
    group_ids: Optional[Sequence[int]] = None,
    embed: Any = "hashing",
    reference: str = "group",
    lambda_div: float = 0.5,
    lambda_rel: float = 0.5,
    gain: str = "log",
    identity_scale: Optional[float] = None,
    relevance_fn: Any = None,
    relevance: Optional[Sequence] = None,
    query: Optional[Sequence] = None,
    reference_set: Optional[Sequence] = None,
    **columns: Any,
) -> list[float | None]:
    """DPP-GRPO reward r(p) = λ_div · Δ(p | R) + λ_rel · R_rel(p) with a log-det diversity gain.

    Kernel ``L = cos(φ(·), φ(·))`` from ``embed(texts) -> [n, d]`` (default "hashing":
    :func:`hashing_embed`). ``Div(S) = log det(L_S + εI)``; gain
    ``Δ(p|R) = Div(R ∪ {p}) − Div(R) = log(L_pp + ε − k_pᵀ(L_R + εI)⁻¹k_p)`` (Schur complement),
    ε = ``identity_scale`` (paper: 1, so Δ(p|∅) = log 2, an exact duplicate of R = {g} earns
    log 1.5, an orthogonal p earns log 2; log det(L+I) is monotone submodular).
    ``gain="novelty"`` [inferred option] returns ``L_pp − k_pᵀ(L_R + εI)⁻¹k_p`` with ε = 1e-3 by
    default: the squared distance of φ(p) from span(R), ≈0 for a duplicate, 1 for orthogonal.
    Reference set R (``reference``): "column" = the row's ``reference_set`` list of texts (the
    paper's curated variants); "group" [inferred option] = the other G−1 completions
    (leave-one-out); "sequential" = completions before it in the group.
    Relevance ``R_rel(p) = cos(p, q) · mean_{g∈R} cos(p, g)`` with q = the ``query`` column, else
    the prompt ([inferred] = cos(p, q) when R is empty); overridden by a ``relevance`` column or
    ``relevance_fn`` (a sample reward, None → 0). An empty completion embeds to zero: gain
    log ε, relevance 0. Defaults λ_div = λ_rel = 0.5. Paper: Kazimi, Dunlop, Yanardag, "Diverse
    Video Generation with Determinantal Point Process-Guided Policy Optimization", arXiv
    2511.20647.
    """
    if reference not in ("group", "sequential", "column"):
        raise ValueError(f"dpp: reference must be 'group', 'sequential' or 'column', got {reference!r}")
    if gain not in ("log", "novelty"):
        raise ValueError(f"dpp: gain must be 'log' or 'novelty', got {gain!r}")
    if reference == "column" and reference_set is None:
        raise ValueError("dpp with reference='column' needs a 'reference_set' column (a list of texts per row)")
    eps = identity_scale if identity_scale is not None else (1.0 if gain == "log" else 1e-3)
    if eps <= 0:
        raise ValueError(f"dpp: identity_scale must be > 0, got {eps}")
    encoder = _resolve(embed, EMBEDDERS, "embed")
    n = len(completions)
    rel_override = _relevance_override(prompts, completions, relevance, relevance_fn, {**columns, "query": query})
    scores: list[float | None] = [0.0] * n
    for rows in _groups(group_ids, n):
        phi = _unit(encoder([completions[i] for i in rows]))  # [G, d]
        need_q = rel_override is None and lambda_rel != 0
        q = _unit(encoder([str(query[rows[0]]) if query is not None else prompts[rows[0]]]))[0] if need_q else None
        refs = [_reference_embeddings(encoder, reference_set[i], phi) for i in rows] if reference == "column" else None
        schur, ref_rows = _schur_and_refs(phi, reference, eps, refs)
        div = schur.clamp(min=1e-300).log() if gain == "log" else schur - eps
        for pos, i in enumerate(rows):
            if rel_override is not None or q is None:
                rel = rel_override[i] if rel_override is not None else 0.0
            else:
                cos_q = float(phi[pos] @ q)
                ref = ref_rows[pos]
                rel = cos_q * float((ref @ phi[pos]).mean()) if ref.shape[0] else cos_q
            scores[i] = lambda_div * float(div[pos]) + lambda_rel * rel
    return scores


def _reference_embeddings(encoder: Callable, texts: Any, like: torch.Tensor) -> torch.Tensor:
    """Unit embeddings ``[|R|, d]`` of one row's reference texts (a list, or None / empty)."""
    texts = [str(t) for t in (texts or [])]
    return _unit(encoder(texts)) if texts else like[:0]


def _relevance_override(prompts, completions, relevance, relevance_fn, columns) -> list[float] | None:
    """Per-row relevance from the ``relevance`` column or ``relevance_fn`` (None → 0), else None."""
    if relevance is not None:
        values = list(relevance)
    elif relevance_fn is not None:
        from grpokit.rewards.loading import resolve_reward

        fn = relevance_fn if callable(relevance_fn) else resolve_reward(relevance_fn)
        values = list(fn(prompts, completions, **{k: v for k, v in columns.items() if v is not None}))
    else:
        return None
    if len(values) != len(completions):
        raise ValueError(f"dpp: relevance has {len(values)} values for {len(completions)} completions")
    out = [0.0 if v is None else float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise ValueError("dpp: relevance values must be finite")
    return out
