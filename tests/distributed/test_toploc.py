"""TOPLOC commitments: honest generations verify, edited ones, other weights and forged commitments do not.

The worker commits from its KV-cached decode (the final-norm states recorded during generation);
the validator recomputes them with one full forward over prompt + completion.
"""

import copy
import dataclasses

import pytest
import torch

from grpokit.distributed.toploc import (
    Commitment, ToplocSpec, ValueCommitment, build_commitment, check_commitment, check_values, commit_batch,
    commit_positions, prefill_hidden, record_final_hidden, tamper_completions, topk_entries,
)
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer


def test_commit_positions_and_topk_by_magnitude():
    assert commit_positions(10, 4) == [0, 4, 8, 9]  # every 4th and the last real token
    assert commit_positions(1, 8) == [0]
    assert commit_positions(0, 8) == []
    idx, val = topk_entries(torch.tensor([[0.5, -3.0, 2.0, 0.1]]), 2)
    assert idx.tolist() == [[1, 2]] and val.tolist() == [[-3.0, 2.0]]  # |-3| > |2| > |0.5|


def test_check_commitment_by_hand():
    # one row, P = 1, positions t = 0 and 1 -> sequence indices 0 and 1 of hidden [1, 3, 3]
    hidden = torch.tensor([[[1.0, -4.0, 2.0], [3.0, 0.5, -1.0], [0.0, 0.0, 0.0]]])
    c = build_commitment(lambda r, t: hidden[r, t], [2], k=2, every=8)
    assert c.positions.tolist() == [[0, 1]] and c.indices.tolist() == [[[1, 2], [0, 2]]]
    assert check_values(c, hidden, prompt_width=1, tolerance=1e-3)[0]
    off = hidden.clone()
    off[0, 1, 0] = 3.01  # relative error 0.01/3 = 3.3e-3 > 1e-3
    ok, info = check_values(c, off, prompt_width=1, tolerance=1e-3)
    assert not ok and info["failed_positions"] == 1.0
    swapped = hidden.clone()
    swapped[0, 0] = torch.tensor([5.0, -4.0, 2.0])  # index 0 is now the largest: committed {1, 2} is no top-2
    assert not check_values(c, swapped, prompt_width=1, tolerance=1e-3)[0]


VALUES = ToplocSpec(scheme="values", topk=8, every=4)
# The tiny random model: a one-token edit moves a 32-token block's top-128 too little for the paper's
# thresholds (exponent mismatches 0.10, mantissa mean 4.4 measured), so its tests commit 2-token blocks
# (edit at token 0: 36 of 120 blocks fail). On SmolLM2-135M, 32-token blocks catch edits at tokens 0 and
# 10 but not at 20; 8-token blocks catch all three (docs/distributed.md).
POLY = ToplocSpec(block=2)


def _generate(model, tok, seed=0, min_new_tokens=0):
    backend = HFBackend(model, tok)
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
             for q in ["1+2=", "what is 7*8?"]]
    torch.manual_seed(seed)
    with record_final_hidden(model) as captured:
        batch = backend.generate(texts, [{"prompt": "a"}, {"prompt": "b"}], 3,
                                 SamplingParams(max_new_tokens=12, min_new_tokens=min_new_tokens))
    return backend, batch, captured


def _check(commitment, model, batch, spec):
    return check_commitment(commitment, prefill_hidden(model, batch), batch, spec)


def test_honest_generation_verifies_under_both_schemes():
    model, tok = tiny_model_and_tokenizer(seed=0)
    _, batch, captured = _generate(model, tok)
    lengths = batch.completion_mask.sum(-1)
    assert len(captured) == int(lengths.max()) and len(set(lengths.tolist())) > 1  # rows of different lengths
    for spec in (ToplocSpec(), POLY):  # the paper's 32-token blocks, and 2-token blocks
        commitment = commit_batch(batch, captured, model, group_size=3, spec=spec)
        assert isinstance(commitment, Commitment)
        assert [len(p) for p in commitment.proofs] == [-(-int(n) // spec.block) for n in lengths]  # ceil(n / block) proofs
        ok, info = _check(commitment, model, batch, spec)
        assert ok and info["failed_blocks"] == 0 and info["exp_mismatch_max"] == 0.0, info  # decode vs prefill: same bf16 bits
    commitment = commit_batch(batch, captured, model, group_size=3, spec=VALUES)
    assert isinstance(commitment, ValueCommitment)
    ok, info = _check(commitment, model, batch, VALUES)
    assert ok, info
    assert info["max_rel_err"] < 1e-4  # KV-cached decode vs one full forward: float rounding only
    # the decode capture is the last entry of output_hidden_states (the final norm's output)
    p = batch.prompt_ids.shape[1]
    assert torch.allclose(prefill_hidden(model, batch)[0, p], captured[1][0, 0], rtol=1e-4, atol=1e-5)


def test_changed_completion_tokens_are_rejected():
    model, tok = tiny_model_and_tokenizer(seed=0)
    backend, batch, captured = _generate(model, tok, min_new_tokens=12)
    for spec in (POLY, VALUES):
        commitment = commit_batch(batch, captured, model, group_size=3, spec=spec)
        edited = tamper_completions(copy.deepcopy(batch), tok, backend.eos_ids)  # token 0 of every row
        ok, info = _check(commitment, model, edited, spec)
        assert not ok, info
        middle = copy.deepcopy(batch)
        middle.completion_ids[0, 5] = (middle.completion_ids[0, 5] + 1) % len(tok)  # one token of one row
        ok, info = _check(commitment, model, middle, spec)
        assert not ok, info
    assert _check(commit_batch(batch, captured, model, 3, POLY), model, batch, POLY)[0]  # the unedited batch still verifies


def _perturbed(model, scale, seed=0):
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in other.parameters():
            w.mul_(1 + scale * torch.randn(w.shape, generator=g))
    return other


def test_other_weights_are_rejected():
    model, tok = tiny_model_and_tokenizer(seed=0)
    other, _ = tiny_model_and_tokenizer(seed=5)
    _, batch, captured = _generate(model, tok)
    for spec in (ToplocSpec(), POLY, VALUES):
        commitment = commit_batch(batch, captured, model, group_size=3, spec=spec)
        assert not _check(commitment, other, batch, spec)[0]  # another initialisation
        assert not _check(commitment, _perturbed(model, 0.1), batch, spec)[0]  # every weight x (1 + 0.1 N(0, 1))
    # locality sensitivity: 0.3% weight noise stays within the bf16 thresholds (as GPU nondeterminism must),
    # while the fp32 values scheme still sees it
    slight = _perturbed(model, 0.003)
    assert _check(commit_batch(batch, captured, model, 3, ToplocSpec()), slight, batch, ToplocSpec())[0]
    assert not _check(commit_batch(batch, captured, model, 3, VALUES), slight, batch, VALUES)[0]


def test_forged_commitments_are_rejected():
    model, tok = tiny_model_and_tokenizer(seed=0)
    _, batch, captured = _generate(model, tok)
    spec = ToplocSpec()
    commitment = commit_batch(batch, captured, model, group_size=3, spec=spec)
    assert _check(commitment, model, batch, spec)[0]
    altered = copy.deepcopy(commitment)
    proof = bytearray(altered.proofs[2][0])
    proof[7] ^= 0x10  # one coefficient bit
    altered.proofs[2][0] = bytes(proof)
    assert not _check(altered, model, batch, spec)[0]
    # a commitment of another generation (a worker replaying an old proof)
    _, other_batch, other_captured = _generate(model, tok, seed=1)
    replay = commit_batch(other_batch, other_captured, model, 3, spec)
    assert not _check(replay, model, batch, spec)[0]
    assert not _check(Commitment(commitment.proofs[:-1]), model, batch, spec)[0]  # a row without proofs
    assert not _check(Commitment([row[:-1] for row in commitment.proofs]), model, batch, spec)[0]  # blocks missing
    # a commitment in the other scheme, or from a worker claiming a laxer k, is refused
    assert not _check(commit_batch(batch, captured, model, 3, VALUES), model, batch, spec)[0]
    lax = commit_batch(batch, captured, model, 3, dataclasses.replace(spec, topk=4))
    assert not _check(lax, model, batch, spec)[0]


def test_spec_from_config_refuses_an_unknown_scheme():
    from grpokit.config import load_config

    cfg = load_config(overrides=["distributed.toploc_scheme=values", "distributed.toploc_topk=16"])
    assert ToplocSpec.from_config(cfg.distributed) == dataclasses.replace(VALUES, topk=16, every=8)
    with pytest.raises(ValueError, match="toploc_scheme"):
        load_config(overrides=["distributed.toploc_scheme=hash"])
