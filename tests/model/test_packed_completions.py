"""Packed completion rows: the same log-probs and gradients as the padded rows, for fewer positions."""

import pytest
import torch

import grpokit.model.logprobs as lp
from grpokit.model.packed_completions import can_pack, pack_inputs, packed_layout, packing_pays
from grpokit.testing import tiny_model_and_tokenizer


def _batch(lengths=(7, 1, 3, 5, 2, 7, 4), groups=(0, 0, 0, 0, 1, 1, 1), prompts=(5, 3), width=7, seed=0):
    """Left-padded prompts [B, P] (group g's prompt has ``prompts[g]`` tokens) and right-padded completions [B, T]."""
    g = torch.Generator().manual_seed(seed)
    p_len = max(prompts)
    prompt_rows = [torch.randint(4, 60, (n,), generator=g) for n in prompts]
    prompt_ids = torch.zeros(len(lengths), p_len, dtype=torch.long)
    prompt_mask = torch.zeros_like(prompt_ids)
    completion_ids = torch.randint(4, 60, (len(lengths), width), generator=g)
    completion_mask = torch.zeros_like(completion_ids)
    for b, (n, grp) in enumerate(zip(lengths, groups)):
        prompt_ids[b, p_len - prompts[grp]:] = prompt_rows[grp]
        prompt_mask[b, p_len - prompts[grp]:] = 1
        completion_mask[b, :n] = 1
    completion_ids = completion_ids * completion_mask  # pad id 0 past each row's end
    return prompt_ids, prompt_mask, completion_ids, completion_mask, torch.tensor(groups)


def _run(model, batch, weights, **kwargs):
    model.zero_grad(set_to_none=True)
    logp, ent = lp.completion_logprobs(model, *batch[:4], group_ids=batch[4], with_entropy=True, **kwargs)
    (logp * weights).sum().backward()
    return logp.detach(), ent.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.fixture
def spy(monkeypatch):
    calls = []
    real = lp.packed_completion_hidden

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(lp, "packed_completion_hidden", counted)
    return calls


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_rows_equal_padded_rows_values_and_gradients(spy, attn):
    model, _ = tiny_model_and_tokenizer(seed=3)
    model.config._attn_implementation = attn
    batch = _batch()
    weights = torch.randn(batch[2].shape, generator=torch.Generator().manual_seed(1))
    packed = _run(model, batch, weights, pack=True)
    assert len(spy) == 1  # the packed path ran
    padded = _run(model, batch, weights, pack=False)
    full = _run(model, batch, weights, share_prompt=False)
    assert len(spy) == 1
    for a, b, c in zip(packed, padded, full):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)
    assert (packed[0][batch[3] == 0] == 0).all()  # padding positions carry no log-prob


def test_packed_rows_with_checkpointing_and_two_stage_prompt_backward(spy):
    model, _ = tiny_model_and_tokenizer(seed=4)
    batch = _batch(seed=2)
    weights = torch.randn(batch[2].shape, generator=torch.Generator().manual_seed(3))
    want = _run(model, batch, weights, pack=False)
    model.zero_grad(set_to_none=True)
    stage = lp.PromptStage()
    logp, _ = lp.completion_logprobs(model, *batch[:4], group_ids=batch[4], checkpoint=True, prompt_stage=stage)
    (logp * weights).sum().backward()
    stage.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert len(spy) == 1
    torch.testing.assert_close(logp.detach(), want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads, want[2], atol=1e-5, rtol=1e-5)


def test_pack_inputs_layout_by_hand():
    # group 0: rows 0 (3 tokens) and 1 (2 tokens); group 1: row 2 (1 token). Inputs are each row's
    # tokens but the last: row 0 -> [a0 a1], row 1 -> [b0], row 2 -> [] ; packed widths 3 and 0 -> S = 3.
    ids = torch.tensor([[11, 12, 13], [21, 22, 0], [31, 0, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    inverse = torch.tensor([0, 0, 1])
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])  # group 0's prompt has 2 tokens, group 1's 3
    start, width, lengths = packed_layout(mask, inverse, 2)
    assert start.tolist() == [0, 2, 0] and width == 3 and lengths.tolist() == [2, 1, 0]
    input_ids, positions, add_mask, flat = pack_inputs(ids, mask, inverse, 2, prompt_mask.sum(-1), prompt_mask)
    assert input_ids.tolist() == [[11, 12, 21], [0, 0, 0]]
    assert positions[0].tolist() == [2, 3, 2]  # prompt length 2, then each completion's own index
    allowed = (add_mask[:, 0] == 0).int()
    # row 0 token a1 (query 1) sees the prompt's 2 real keys and a0, a1; b0 (query 2) sees the prompt and itself only
    assert allowed[0].tolist() == [[0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0], [0, 1, 1, 0, 0, 1]]
    assert allowed[1].tolist() == [[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1]]  # padding: itself only
    assert flat.tolist() == [[0, 1], [2, 0], [0, 0]]  # row b's input t -> index in the flattened [n * S] rows


def test_packing_pays_for_short_completions_not_for_one_long_row():
    model, _ = tiny_model_and_tokenizer(seed=0, hidden=64)
    decoder = model.get_decoder()
    short = torch.zeros(8, 32, dtype=torch.long)
    short[:, :4] = 1
    short[0] = 1  # one row at the cap: the padded layout runs 8 x 31 input positions for 7 x 3 + 31 real ones
    assert packing_pays(decoder, short, torch.zeros(8, dtype=torch.long), 1, 8)
    long = torch.ones(8, 1024, dtype=torch.long)  # no padding: one 8k-token row only adds attention
    assert not packing_pays(decoder, long, torch.zeros(8, dtype=torch.long), 1, 8)


def test_can_pack_refuses_windows_kernels_and_unknown_models():
    model, _ = tiny_model_and_tokenizer(seed=0)
    decoder = model.get_decoder()
    assert can_pack(decoder, 100)
    decoder.config.sliding_window = 64  # a window shorter than a sequence: the custom mask would drop it
    assert not can_pack(decoder, 100) and can_pack(decoder, 64)
    decoder.config.sliding_window = None
    decoder.config._attn_implementation = "flash_attention_2"
    assert not can_pack(decoder, 100)
    decoder.config._attn_implementation = "sdpa"
    decoder.config.model_type = "qwen2_vl"  # multimodal rope positions
    assert not can_pack(decoder, 100)
