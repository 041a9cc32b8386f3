"""TOPLOC commitments: honest generations verify, edited ones do not."""

import torch

from grpokit.distributed.toploc import (
    build_commitment, check_commitment, commit_batch, commit_positions, prefill_hidden, record_final_hidden,
    tamper_completions, topk_entries,
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
    assert check_commitment(c, hidden, prompt_width=1, tolerance=1e-3)[0]
    off = hidden.clone()
    off[0, 1, 0] = 3.01  # relative error 0.01/3 = 3.3e-3 > 1e-3
    ok, info = check_commitment(c, off, prompt_width=1, tolerance=1e-3)
    assert not ok and info["failed_positions"] == 1.0
    swapped = hidden.clone()
    swapped[0, 0] = torch.tensor([5.0, -4.0, 2.0])  # index 0 is now the largest: committed {1, 2} is no top-2
    assert not check_commitment(c, swapped, prompt_width=1, tolerance=1e-3)[0]


def _generate(model, tok, seed=0):
    backend = HFBackend(model, tok)
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
             for q in ["1+2=", "what is 7*8?"]]
    torch.manual_seed(seed)
    with record_final_hidden(model) as captured:
        batch = backend.generate(texts, [{"prompt": "a"}, {"prompt": "b"}], 3, SamplingParams(max_new_tokens=12))
    return backend, batch, captured


def test_honest_generation_verifies_and_edits_are_rejected():
    model, tok = tiny_model_and_tokenizer(seed=0)
    backend, batch, captured = _generate(model, tok)
    lengths = batch.completion_mask.sum(-1)
    assert len(captured) == int(lengths.max())  # prefill + one call per later token
    commitment = commit_batch(batch, captured, model, group_size=3, k=8, every=4)
    hidden = prefill_hidden(model, batch)
    ok, info = check_commitment(commitment, hidden, batch.prompt_ids.shape[1], tolerance=1e-3)
    assert ok, info
    assert info["max_rel_err"] < 1e-4  # KV-cached decode vs one full forward: float rounding only
    # the decode capture is the last entry of output_hidden_states (the final norm's output)
    p = batch.prompt_ids.shape[1]
    assert torch.allclose(hidden[0, p], captured[1][0, 0], rtol=1e-4, atol=1e-5)

    edited = tamper_completions(batch, tok, backend.eos_ids)
    assert (lengths >= 2).any()
    ok, info = check_commitment(commitment, prefill_hidden(model, edited), p, tolerance=1e-3)
    assert not ok and info["failed_positions"] > 0


def test_other_weights_are_rejected():
    model, tok = tiny_model_and_tokenizer(seed=0)
    other, _ = tiny_model_and_tokenizer(seed=5)
    _, batch, captured = _generate(model, tok)
    commitment = commit_batch(batch, captured, model, group_size=3, k=8, every=4)
    assert not check_commitment(commitment, prefill_hidden(other, batch), batch.prompt_ids.shape[1], 1e-3)[0]
