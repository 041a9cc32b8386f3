"""TOPLOC verification of rollouts produced by untrusted workers.

TOPLOC (Ong et al., "TOPLOC: A Locality Sensitive Hashing Scheme for Trustless Verifiable
Inference", arXiv 2501.16007), as used by INTELLECT-2 (Prime Intellect Team, arXiv 2505.07291,
§2, Training Infrastructure): while generating, a worker commits to the top-k entries (by
magnitude) of the final hidden states of its generated tokens; a validator re-runs one prefill
over prompt + completion with the claimed weights and accepts only if its own activations
reproduce the commitment. A worker that changes tokens after generating, or samples with other
weights, cannot produce a commitment that verifies.

Two schemes (``distributed.toploc_scheme``):

* ``poly`` (default), the paper's: per row, the states of every block of ``toploc_block`` = 32
  generated tokens are flattened, their top-``toploc_topk`` = 128 bf16 values encoded as a
  polynomial over GF(65497) (258 bytes per block), and checked by bf16 exponent mismatches and
  mantissa error mean / median under the authors' thresholds (38 of 128, 10, 8), see
  :mod:`grpokit.distributed.toploc_poly`.
* ``values``, stricter and simpler: the (index, float32 value) pairs of every
  ``toploc_every``-th position (and the last), accepted under a relative error
  ``toploc_tolerance`` and a top-k membership check. On fp32 CPU runs honest values differ by
  ~1e-6 relative between the worker's KV-cached decode and the validator's full forward, so this
  also catches weight changes too small to move bf16 mantissas.

Still simplified against the paper: the learner is the validator (no separate validator nodes);
the prompt's own states ("prefill" proof) are not committed (the generated tokens' states depend
on the prompt through attention, and with ``distributed.prompt_source: seeded`` the learner checks
the prompt tokens themselves, :mod:`grpokit.distributed.prompt_draw`); the state of the last generated token's
successor does not exist, so an edit of a row's last token is not covered by either scheme (as in
TOPLOC). The sampling temperature is not covered: hidden states are computed before sampling.
A one-token edit moves only part of a 32-token block: measured on SmolLM2-135M, 32-token blocks
reject edits at tokens 0 and 10 of a block but not at 20, 8-token blocks all three
(``docs/distributed.md``); ``toploc_block`` trades proof size for that sensitivity.

Hidden state h_t (the one whose logits sample completion token t) is the last entry of
``output_hidden_states`` (after the final norm) at sequence index ``P + t - 1`` of
``[prompt; completion]``, P = the padded prompt width.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from grpokit.distributed.toploc_poly import PAPER_THRESHOLDS, Thresholds, check_block, commit_blocks
from grpokit.rollout.types import RolloutBatch

log = logging.getLogger(__name__)
SCHEMES = ("poly", "values")


@dataclass(frozen=True)
class ToplocSpec:
    """What a worker commits and what the validator accepts (``distributed.toploc_*``).

    The validator uses its own spec, never one a worker claims.
    """

    scheme: str = "poly"
    topk: int = 128
    block: int = 32
    every: int = 8
    tolerance: float = 1e-3
    thresholds: Thresholds = PAPER_THRESHOLDS

    @staticmethod
    def from_config(d: Any) -> "ToplocSpec":
        if d.toploc_scheme not in SCHEMES:
            raise ValueError(f"distributed.toploc_scheme '{d.toploc_scheme}': choose one of {list(SCHEMES)}")
        return ToplocSpec(d.toploc_scheme, d.toploc_topk, d.toploc_block, d.toploc_every, d.toploc_tolerance,
                          Thresholds(d.toploc_exp_mismatch, d.toploc_mant_mean, d.toploc_mant_median))


@dataclass
class Commitment:
    """The paper's commitment: per row, the proof bytes of each block of generated tokens.

    proofs[r][j]: 2-byte modulus + k 2-byte coefficients for tokens [j * block, (j + 1) * block)
    of row r (:func:`grpokit.distributed.toploc_poly.commit_blocks`).
    """

    proofs: list[list[bytes]]

    def nbytes(self) -> int:
        return sum(len(p) for row in self.proofs for p in row)


@dataclass
class ValueCommitment:
    """Scheme ``values``: per row, the committed positions and their top-k hidden-state entries.

    positions: [B, M] completion positions t (-1 = padding; rows have different lengths)
    indices:   [B, M, k] hidden-dimension indices of the k largest |h_t|
    values:    [B, M, k] the signed values h_t[indices], float32
    """

    positions: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor


def commit_positions(length: int, every: int) -> list[int]:
    """Completion positions committed for a row of ``length`` real tokens: 0, e, 2e, ... and the last."""
    if length <= 0:
        return []
    return sorted(set(range(0, length, every)) | {length - 1})


def topk_entries(hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices [N, k], values [N, k]) of the k entries of largest magnitude of ``hidden`` [N, d]."""
    hidden = hidden.float()
    idx = hidden.abs().topk(min(k, hidden.shape[-1]), dim=-1).indices
    return idx, hidden.gather(-1, idx)


def build_poly_commitment(hidden_at: Any, lengths: list[int], k: int, block: int) -> Commitment:
    """The paper's commitment of rows of ``lengths`` real tokens; ``hidden_at(row, t)`` is h_t, a [d] tensor."""
    blocks, owner = [], []
    for r, n in enumerate(lengths):
        for s in range(0, n, block):
            blocks.append(torch.stack([hidden_at(r, t) for t in range(s, min(s + block, n))]))  # [<=block, d]
            owner.append(r)
    proofs: list[list[bytes]] = [[] for _ in lengths]
    for r, proof in zip(owner, commit_blocks(blocks, k)):
        proofs[r].append(proof)
    return Commitment(proofs)


def build_commitment(hidden_at: Any, lengths: list[int], k: int, every: int) -> ValueCommitment:
    """Scheme ``values``: commit rows of ``lengths`` real tokens; ``hidden_at(row, t)`` is h_t, a [d] tensor."""
    per_row = [commit_positions(n, every) for n in lengths]
    m = max((len(p) for p in per_row), default=0)
    b = len(lengths)
    cpu = torch.device("cpu")  # a commitment travels between processes: it lives on the CPU
    positions = torch.full((b, m), -1, dtype=torch.long, device=cpu)
    indices = torch.zeros(b, m, k, dtype=torch.long, device=cpu)
    values = torch.zeros(b, m, k, device=cpu)
    for r, pos in enumerate(per_row):
        if not pos:
            continue
        idx, val = (t.to(cpu) for t in topk_entries(torch.stack([hidden_at(r, t) for t in pos]), k))
        positions[r, : len(pos)] = torch.tensor(pos, device=cpu)
        indices[r, : len(pos), : idx.shape[1]] = idx
        values[r, : len(pos), : idx.shape[1]] = val
    return ValueCommitment(positions, indices, values)


def final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose output is the last entry of ``output_hidden_states`` (the decoder's final norm)."""
    base = model.get_base_model() if hasattr(model, "peft_config") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else getattr(base, "model", None)
    norm = getattr(decoder, "norm", None)
    if norm is None:
        raise ValueError(
            f"distributed.verify_rollouts: cannot find the final norm of {type(base).__name__} to commit hidden "
            "states during generation; set distributed.verify_rollouts=false and distributed.untrusted_workers=[]"
        )
    return norm


@contextlib.contextmanager
def record_final_hidden(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the final-norm output of every forward call inside the block, in call order."""
    captured: list[torch.Tensor] = []
    handle = final_norm(model).register_forward_hook(lambda _m, _i, out: captured.append(out.detach().float()))
    try:
        yield captured
    finally:
        handle.remove()


class DecodeLayoutError(RuntimeError):
    """The recorded forward calls do not follow the decode layout the row mapping assumes."""


def decode_hidden(captured: list[torch.Tensor], lengths: list[int], group_size: int):
    """``hidden_at(row, t)`` over the calls of HFBackend's decode loop.

    Call 0 is the prefill ``[n_prompts, P, d]`` (h_0 of row r is its prompt's last position);
    call t >= 1 feeds token t-1 of the rows still generating, ``[n_alive, 1, d]``, in row order,
    where row r is alive at call t iff t < lengths[r] (it has not emitted EOS before token t).
    """
    expected = max(lengths, default=0)
    if len(captured) != max(expected, 1):
        raise DecodeLayoutError(f"{len(captured)} forward calls for a longest completion of {expected} tokens")
    alive = [[r for r, n in enumerate(lengths) if n > t] for t in range(expected)]
    for t in range(1, expected):
        if captured[t].shape[0] != len(alive[t]) or captured[t].shape[1] != 1:
            raise DecodeLayoutError(f"call {t} has shape {tuple(captured[t].shape)}, {len(alive[t])} rows alive")
    rank = [{r: i for i, r in enumerate(rows)} for rows in alive]

    def hidden_at(row: int, t: int) -> torch.Tensor:
        if t == 0:
            return captured[0][row // group_size, -1]
        return captured[t][rank[t][row], 0]

    return hidden_at


@torch.no_grad()
def prefill_hidden(model: torch.nn.Module, batch: RolloutBatch) -> torch.Tensor:
    """Final hidden states ``[B, P + T, d]`` of one full forward over ``[prompt; completion]``.

    The validator's check (a separate no-grad forward, ``output_hidden_states=True``, last entry);
    only one logit position is computed (``logits_to_keep=1``).
    """
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    mask = torch.cat([batch.prompt_mask, batch.completion_mask.to(batch.prompt_mask.dtype)], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    was_training = model.training
    model.eval()
    try:
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True, logits_to_keep=1)
    finally:
        model.train(was_training)
    return out.hidden_states[-1].float()


def commit_batch(batch: RolloutBatch, captured: list[torch.Tensor] | None, model: torch.nn.Module,
                 group_size: int, spec: ToplocSpec) -> Commitment | ValueCommitment:
    """The worker's commitment for ``batch`` from its recorded decode states, in ``spec.scheme``.

    Falls back to a prefill forward (logged) when the recorded calls do not match the decode
    layout, e.g. after a change of the generation backend.
    """
    lengths = [int(n) for n in batch.completion_mask.sum(-1)]
    p = batch.prompt_ids.shape[1]
    try:
        hidden_at = decode_hidden(captured or [], lengths, group_size)
    except DecodeLayoutError as exc:
        log.warning("TOPLOC: %s; committing from a prefill forward instead", exc)
        hidden = prefill_hidden(model, batch)
        hidden_at = lambda r, t: hidden[r, p + t - 1]  # noqa: E731
    if spec.scheme == "poly":
        return build_poly_commitment(hidden_at, lengths, spec.topk, spec.block)
    return build_commitment(hidden_at, lengths, spec.topk, spec.every)


def check_commitment(commitment: Any, hidden: torch.Tensor, batch: RolloutBatch, spec: ToplocSpec) -> tuple[bool, dict[str, float]]:
    """Does ``hidden`` ``[B, P + T, d]`` (the validator's prefill of ``batch``) reproduce ``commitment``?

    A commitment of another scheme than the validator's is refused.
    """
    if spec.scheme == "poly":
        if not isinstance(commitment, Commitment):
            return False, {"failed_blocks": float("inf")}
        lengths = [int(n) for n in batch.completion_mask.sum(-1)]
        return check_poly(commitment, hidden, batch.prompt_ids.shape[1], lengths, spec)
    if not isinstance(commitment, ValueCommitment):
        return False, {"failed_positions": float("inf"), "max_rel_err": float("inf")}
    return check_values(commitment, hidden, batch.prompt_ids.shape[1], spec.tolerance)


def check_poly(commitment: Commitment, hidden: torch.Tensor, prompt_width: int, lengths: list[int],
               spec: ToplocSpec) -> tuple[bool, dict[str, float]]:
    """Scheme ``poly``: every block of every row passes the exponent / mantissa thresholds.

    The validator's blocks come from its own view of the batch (``lengths`` = real completion
    tokens per row); a row with another number of proofs than blocks fails. Returns (accepted,
    {"blocks", "failed_blocks", "exp_mismatch_max", "mant_err_mean_max", "mant_err_median_max"}).
    """
    stats = {"blocks": 0.0, "failed_blocks": 0.0, "exp_mismatch_max": 0.0, "mant_err_mean_max": 0.0, "mant_err_median_max": 0.0}
    if len(commitment.proofs) != len(lengths):
        stats["failed_blocks"] = float(len(lengths))
        return False, stats
    for r, n in enumerate(lengths):
        starts = range(0, n, spec.block)
        if len(commitment.proofs[r]) != len(starts):
            stats["failed_blocks"] += 1
            continue
        for s, proof in zip(starts, commitment.proofs[r]):
            e = min(s + spec.block, n)
            res = check_block(proof, hidden[r, prompt_width + s - 1 : prompt_width + e - 1], spec.topk)  # h_s .. h_{e-1}
            stats["blocks"] += 1
            stats["failed_blocks"] += float(not res.passes(spec.thresholds))
            stats["exp_mismatch_max"] = max(stats["exp_mismatch_max"], res.exp_mismatches / res.k)
            stats["mant_err_mean_max"] = max(stats["mant_err_mean_max"], res.mant_err_mean)
            stats["mant_err_median_max"] = max(stats["mant_err_median_max"], res.mant_err_median)
    return stats["failed_blocks"] == 0, stats


def check_values(commitment: ValueCommitment, hidden: torch.Tensor, prompt_width: int, tolerance: float) -> tuple[bool, dict[str, float]]:
    """Scheme ``values``: does ``hidden`` ``[B, P + T, d]`` reproduce ``commitment``?

    Per committed (row, t): every committed value has relative error <= ``tolerance`` against
    h_t at its index, the k indices are distinct, and they are a top-k of |h_t| up to ties
    within ``tolerance`` (smallest committed magnitude >= largest uncommitted * (1 - tolerance)).
    Returns (accepted, {"max_rel_err", "failed_positions"}).
    """
    positions = commitment.positions.to(hidden.device)  # the commitment (CPU) meets the validator's states
    rows, slots = (positions >= 0).nonzero(as_tuple=True)
    if rows.numel() == 0:
        return True, {"max_rel_err": 0.0, "failed_positions": 0.0}
    t = positions[rows, slots]
    if int(t.max()) + prompt_width > hidden.shape[1]:
        return False, {"max_rel_err": float("inf"), "failed_positions": float(rows.numel())}
    vecs = hidden[rows, prompt_width + t - 1]  # [N, d]
    idx = commitment.indices.to(hidden.device)[rows, slots]  # [N, k]
    val = commitment.values.to(hidden.device)[rows, slots]  # [N, k]
    k = idx.shape[1]
    got = vecs.gather(-1, idx)
    rel = (got - val).abs() / val.abs().clamp(min=1e-6)
    bad = rel.max(-1).values > tolerance
    distinct = idx.sort(-1).values.diff(dim=-1).ne(0).all(-1)  # the k committed indices are distinct
    bad |= ~distinct
    if vecs.shape[1] > k:  # the largest uncommitted magnitude may not exceed the smallest committed one
        rest = vecs.abs().scatter(-1, idx, float("-inf")).max(-1).values
        bad |= got.abs().min(-1).values < rest * (1 - tolerance)
    return not bool(bad.any()), {"max_rel_err": float(rel.max()), "failed_positions": float(bad.sum())}


def tamper_completions(batch: RolloutBatch, tokenizer: Any, eos_ids: list[int]) -> RolloutBatch:
    """Testing hook (``distributed.tamper_worker``): replace token 0 of every row of >= 2 tokens.

    Done after committing, like a worker that edits its outputs; the commitment then no longer
    matches the hidden states of the edited sequence from position 1 on.
    """
    ids = batch.completion_ids.clone()
    lengths = batch.completion_mask.sum(-1)
    vocab = len(tokenizer)
    for r in (lengths >= 2).nonzero().flatten().tolist():
        new = (int(ids[r, 0]) + 1) % vocab
        while new in eos_ids or new == int(ids[r, 0]):
            new = (new + 1) % vocab
        ids[r, 0] = new
    batch.completion_ids = ids
    batch.completions = tokenizer.batch_decode(
        [row[m.bool()] for row, m in zip(ids, batch.completion_mask)], skip_special_tokens=True
    )
    return batch
