"""INTELLECT-2's deterministic task sampling: a worker's prompts follow from a seed the learner can check.

Prime Intellect Team, arXiv 2505.07291, §2 (Training Infrastructure; the authors' prime-rl
``infer.py``): an inference worker picks its question indices with an RNG seeded from its node
address, its batch counter and the step, so it cannot cherry-pick easy prompts and a validator can
recompute the selection. Here (``distributed.prompt_source: seeded``) the seed is
(``train.seed``, request id, worker id): the worker draws ``prompts_per_step`` row indices of the
shared training rows itself, and the learner redraws them and refuses a batch whose data rows or
prompt tokens differ (:func:`prompts_match`).

The request id is the learner's batch counter (request k feeds step k unless a batch is
re-issued); a re-issued request goes to another worker and so draws other prompts. The draw is
uniform with replacement across requests (a fresh permutation per request, the first n taken), so
the learner's epoch order and curricula do not apply: ``data.curriculum`` is refused with it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from grpokit.distributed.ledger import row_key


def draw_seed(seed: int, request_id: int, worker: int) -> int:
    """A 63-bit seed from (seed, request id, worker id), the same in every process (SHA-256, not ``hash``)."""
    digest = hashlib.sha256(f"grpokit-prompts:{seed}:{request_id}:{worker}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def draw_indices(seed: int, request_id: int, worker: int, n: int, n_rows: int) -> list[int]:
    """The ``n`` training-row indices worker ``worker`` must use for request ``request_id`` (distinct if n <= n_rows)."""
    if n_rows <= 0:
        raise ValueError("distributed.prompt_source=seeded: there are no training rows to draw from")
    g = torch.Generator(device="cpu").manual_seed(draw_seed(seed, request_id, worker))
    perm = torch.randperm(n_rows, generator=g, device="cpu").tolist()
    return [perm[i % n_rows] for i in range(n)]


def prompts_match(batch: Any, rows: list[dict], texts: list[str], tokenizer: Any, group_size: int) -> tuple[bool, str]:
    """Does ``batch`` hold G completions of each expected row, with the expected prompt tokens?

    ``rows`` / ``texts``: the learner's redraw and its rendering. Row r of the batch belongs to
    prompt r // G; its data row (answer and every column the rewards read) must equal the
    expected one, and its unpadded prompt tokens must equal the expected text's tokens (as
    :class:`~grpokit.rollout.hf.HFBackend` tokenizes: no special tokens added).
    Returns (ok, why not).
    """
    if batch.prompt_ids.shape[0] != len(rows) * group_size or len(batch.rows) != batch.prompt_ids.shape[0]:
        return False, f"{batch.prompt_ids.shape[0]} rows ({len(batch.rows)} data rows) for {len(rows)} prompts x {group_size}"
    expected = tokenizer(texts, add_special_tokens=False).input_ids
    for r in range(batch.prompt_ids.shape[0]):
        j = r // group_size
        if row_key(batch.rows[r]) != row_key(rows[j]):
            return False, f"row {r} carries another data row than drawn prompt {j}"
        got = batch.prompt_ids[r][batch.prompt_mask[r].bool()].tolist()
        if got != list(expected[j]):
            return False, f"row {r}: its prompt tokens are not those of drawn prompt {j}"
    return True, ""
