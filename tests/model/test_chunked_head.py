"""The chunked LM head gives the same log-probs, entropies and gradients as full logits."""

import pytest
import torch

import grpokit.model.chunked_head as chunked_head
import grpokit.model.logprobs as lp_mod
from grpokit.model.chunked_head import head_logprobs
from grpokit.model.logprobs import completion_logprobs
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer


@pytest.mark.parametrize("vocab_slice", [12288, 16, 7])  # one slice / online log-sum-exp over 4 and 8 slices
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_head_logprobs_equal_full_softmax_values_and_grads(temperature, vocab_slice, monkeypatch):
    monkeypatch.setattr(chunked_head, "VOCAB_SLICE", vocab_slice)
    torch.manual_seed(0)
    h = torch.randn(37, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 50, (37,))
    g_lp, g_ent = torch.randn(37, dtype=torch.float64), torch.randn(37, dtype=torch.float64)

    logp, ent = head_logprobs(h, w, y, temperature=temperature, entropy_grad=True, chunk=5)
    full = torch.log_softmax(h @ w.t() / temperature, -1)
    ref_lp, ref_ent = full.gather(-1, y[:, None]).squeeze(-1), -(full.exp() * full).sum(-1)
    torch.testing.assert_close(logp, ref_lp)
    torch.testing.assert_close(ent, ref_ent)
    grads = torch.autograd.grad((logp * g_lp).sum() + (ent * g_ent).sum(), [h, w])
    ref = torch.autograd.grad((ref_lp * g_lp).sum() + (ref_ent * g_ent).sum(), [h, w])
    for a, b in zip(grads, ref):
        torch.testing.assert_close(a, b)


def test_head_entropy_is_a_detached_metric_unless_asked():
    h = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(6, 3, requires_grad=True)
    logp, ent = head_logprobs(h, w, torch.tensor([0, 1, 2, 3]), with_entropy=True)
    assert logp.requires_grad and not ent.requires_grad
    assert head_logprobs(h, w, torch.tensor([0, 1, 2, 3]))[1] is None


def _batch(seed):
    torch.manual_seed(0)
    model, tok = tiny_model_and_tokenizer(seed=seed)
    rows = [{"prompt": "a"}, {"prompt": "a much longer prompt"}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    b = HFBackend(model, tok).generate(texts, rows, 3, SamplingParams(max_new_tokens=9, temperature=1.0))
    return model, b


@pytest.mark.parametrize("share", [True, False])
def test_hidden_state_path_equals_logits_path(monkeypatch, share):
    """Model-level: head-from-hidden (padding never reaches the head) == full logits, values and grads."""
    model, b = _batch(seed=3)
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask)
    weights = torch.randn(b.completion_ids.shape)

    def run():
        model.zero_grad(set_to_none=True)
        logp, ent = completion_logprobs(
            model, *args, group_ids=b.group_ids, share_prompt=share, temperature=0.8, entropy_grad=True
        )
        ((logp * weights).sum() + 0.1 * ent.sum()).backward()
        return logp.detach(), ent.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])

    assert lp_mod.decoder_and_head(model) is not None
    fused = run()
    monkeypatch.setattr(lp_mod, "decoder_and_head", lambda m: None)
    plain = run()
    for a, c in zip(fused, plain):
        torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("share", [True, False])
def test_activation_checkpointing_gives_the_same_values_and_grads(share, monkeypatch):
    """Per-layer checkpointing over the read-only prompt cache: same log-probs and gradients."""
    model, b = _batch(seed=6)
    model.train()
    layer_cls, calls = type(model.get_decoder().layers[0]), []
    original = layer_cls.forward

    def counting(self, *a, **k):
        calls.append(1)
        return original(self, *a, **k)

    monkeypatch.setattr(layer_cls, "forward", counting)
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask)
    weights = torch.randn(b.completion_ids.shape)

    def run(checkpoint):
        model.zero_grad(set_to_none=True)
        logp, _ = completion_logprobs(model, *args, group_ids=b.group_ids, share_prompt=share, checkpoint=checkpoint)
        (logp * weights).sum().backward()
        return logp.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])

    plain = run(False)
    n_plain = len(calls)
    ckpt = run(True)
    assert len(calls) - n_plain > n_plain  # the layers ran again in the backward pass (recomputation)
    for a, c in zip(ckpt, plain):
        torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)
    assert all("forward" not in vars(layer) for layer in model.get_decoder().layers)  # wrappers removed
