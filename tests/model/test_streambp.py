"""Sequence-chunked backprop (StreamBP) gives the full backward's log-probs and gradients."""

import pytest
import torch

from grpokit.model.logprobs import completion_logprobs
from grpokit.model.streambp import streamed_backward, streamed_forward
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer


def _batch():
    torch.manual_seed(0)
    model, tok = tiny_model_and_tokenizer(seed=4)
    rows = [{"prompt": "a"}, {"prompt": "a much longer prompt"}, {"prompt": "mid"}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    b = HFBackend(model, tok).generate(texts, rows, 2, SamplingParams(max_new_tokens=13, temperature=1.0))
    assert b.completion_mask.sum(-1).min() < b.completion_mask.shape[1]  # ragged rows: padding is exercised
    return model, b


@pytest.mark.parametrize("chunk", [1, 4, 64])
@pytest.mark.parametrize("entropy", [False, True])
def test_streamed_gradients_equal_full_backward(chunk, entropy):
    model, b = _batch()
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask)
    g_lp = torch.randn(b.completion_ids.shape) * b.completion_mask
    g_ent = torch.randn(b.completion_ids.shape) * b.completion_mask if entropy else None

    model.zero_grad(set_to_none=True)
    logp, ent = completion_logprobs(model, *args, group_ids=b.group_ids, temperature=0.7, entropy_grad=entropy)
    ((logp * g_lp).sum() + ((ent * g_ent).sum() if entropy else 0)).backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]

    model.zero_grad(set_to_none=True)
    s_logp, s_ent, state = streamed_forward(model, *args, group_ids=b.group_ids, chunk=chunk, temperature=0.7, with_entropy=entropy)
    torch.testing.assert_close(s_logp, logp.detach(), atol=1e-5, rtol=1e-5)
    if entropy:
        torch.testing.assert_close(s_ent, ent.detach(), atol=1e-5, rtol=1e-5)
    streamed_backward(model, *args, g_lp, state, grad_entropy=g_ent, temperature=0.7)
    for p, ref in zip(model.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, ref, atol=1e-5, rtol=1e-5)

