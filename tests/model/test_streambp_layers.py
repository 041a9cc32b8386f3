"""StreamBP's layer scheme (train.streambp=layer): a plain backward's gradients, one chunk of layer internals at a time."""

import pytest
import torch

from grpokit.model.logprobs import PromptStage, completion_logprobs
from grpokit.model.streambp_layers import streamed_layers
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer


def _ragged_batch(model, tok):
    rows = [{"prompt": "a"}, {"prompt": "a much longer prompt"}, {"prompt": "mid"}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    torch.manual_seed(0)
    b = HFBackend(model, tok).generate(texts, rows, 2, SamplingParams(max_new_tokens=13, temperature=1.0))
    assert b.completion_mask.sum(-1).min() < b.completion_mask.shape[1]  # ragged rows: the padding mask is sliced
    return (b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask), b.group_ids


def _even_batch():
    """No padding anywhere: SDPA gets no mask from transformers, the chunk's causal block is built here."""
    g = torch.Generator().manual_seed(1)
    b, p, t = 4, 5, 11
    ids = lambda n: torch.randint(5, 60, (b, n), generator=g)  # noqa: E731
    return (ids(p), torch.ones(b, p, dtype=torch.long), ids(t), torch.ones(b, t, dtype=torch.long)), torch.tensor([0, 0, 1, 1])


def _grads(model, args, group_ids, weights, **kw):
    """Parameter gradients of sum(w_logp * logp + w_ent * H), H with gradient (an entropy bonus)."""
    model.zero_grad(set_to_none=True)
    stage = PromptStage() if kw.pop("prompt_stage", False) else None
    logp, ent = completion_logprobs(model, *args, group_ids=group_ids, temperature=0.7, entropy_grad=True, prompt_stage=stage, **kw)
    ((logp * weights[0]).sum() + (ent * weights[1]).sum()).backward()
    if stage is not None:
        stage.backward()
    return logp.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("batch", ["ragged", "even"])
@pytest.mark.parametrize("chunk,path", [(1, {}), (4, {}), (64, {}), (3, {"prompt_stage": True}), (5, {"share_prompt": False})])
def test_layer_streamed_gradients_equal_a_plain_backward(attention, batch, chunk, path):
    model, tok = tiny_model_and_tokenizer(seed=4)
    model.config._attn_implementation = attention
    args, group_ids = _ragged_batch(model, tok) if batch == "ragged" else _even_batch()
    g = torch.Generator().manual_seed(2)
    weights = [torch.randn(args[2].shape, generator=g) * args[3] for _ in range(2)]
    ref_logp, ref = _grads(model, args, group_ids, weights, share_prompt=path.get("share_prompt", True))
    logp, grads = _grads(model, args, group_ids, weights, stream_chunk=chunk, **path)
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=1e-5)
    scale = max(r.abs().max() for r in ref)
    assert scale > 0
    for got, want in zip(grads, ref):  # exact up to float summation order (arXiv 2506.03077): 1e-5 of the largest gradient
        assert (got - want).abs().max() <= 1e-5 * scale


def _rows_seen_by_the_mlps(model, run):
    """[(grad enabled, rows)] of every decoder MLP call during ``run()``."""
    seen = []
    hooks = [layer.mlp.register_forward_hook(lambda m, i, o: seen.append((torch.is_grad_enabled(), i[0].shape[1])))
             for layer in model.model.layers]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_layer_internals_exist_one_chunk_at_a_time():
    """With a graph, each layer's MLP runs on at most `chunk` rows, once per chunk per layer; no MLP activation is saved."""
    model, tok = tiny_model_and_tokenizer(seed=4)
    args, group_ids = _even_batch()  # 11 completion tokens: 10 rows through the completion forward
    saved = []

    def step():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
            logp, _ = completion_logprobs(model, *args, group_ids=group_ids, stream_chunk=4)
        logp.sum().backward()

    seen = _rows_seen_by_the_mlps(model, step)
    with_graph = [rows for grad, rows in seen if grad]
    layers = len(model.model.layers)
    # per layer: the prompt forward (5 rows, plain), then the completion's chunks [8, 10), [4, 8), [0, 4) in the backward
    assert sorted(with_graph) == sorted([5] * layers + [2, 4, 4] * layers), seen
    # the no-grad forward runs by chunks too (the key/value pass of the backward stops before the MLP)
    assert sorted(rows for grad, rows in seen if not grad) == sorted([2, 4, 4] * layers), seen
    ffn = model.config.intermediate_size
    assert not [s for s in saved if s[-1] == ffn and len(s) == 3 and s[1] == 10], saved  # no [B, T, d_ff] kept for the backward


def test_plain_checkpointing_would_fail_the_chunk_check():
    """The check above can fail: without the streamed layers, the MLP sees the whole completion with a graph."""
    model, tok = tiny_model_and_tokenizer(seed=4)
    args, group_ids = _even_batch()
    seen = _rows_seen_by_the_mlps(model, lambda: completion_logprobs(model, *args, group_ids=group_ids, checkpoint=True)[0].sum().backward())
    assert max(rows for grad, rows in seen if grad) == 10


def test_dropout_and_missing_chunk_are_refused_in_one_line():
    model, _ = tiny_model_and_tokenizer(seed=4)
    args, group_ids = _even_batch()
    with pytest.raises(ValueError, match="train.sequence_chunk > 0"):
        with streamed_layers(model.model, 0):
            pass
    model.train()
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.1
    with pytest.raises(ValueError, match="train.streambp=layer .* dropout"):
        completion_logprobs(model, *args, group_ids=group_ids, stream_chunk=4)


def test_lora_adapters_get_the_plain_gradients():
    """Frozen embeddings: no layer input carries a graph, yet the adapters inside the layers get their gradients."""
    from grpokit.config.schema import LoraConfig
    from grpokit.model.lora import apply_lora

    model, _ = tiny_model_and_tokenizer(seed=4)
    model = apply_lora(model, LoraConfig(enabled=True, target_modules=["q_proj", "v_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # peft starts B at 0: make the adapters matter
            torch.nn.init.normal_(p, std=0.1, generator=torch.Generator().manual_seed(3))
    args, group_ids = _even_batch()
    weight = torch.randn(args[2].shape, generator=torch.Generator().manual_seed(2))

    def grads(**kw):  # one forward over [prompt; completion]: no prompt keys/values enter the layers with a graph either
        model.zero_grad(set_to_none=True)
        (completion_logprobs(model, *args, group_ids=group_ids, share_prompt=False, **kw)[0] * weight).sum().backward()
        return [p.grad for p in model.parameters() if p.requires_grad]

    ref, got = grads(), grads(stream_chunk=3)
    assert len(ref) == 8 and all(g is not None for g in got)
    scale = max(r.abs().max() for r in ref)
    assert all((g - r).abs().max() <= 1e-5 * scale for g, r in zip(got, ref))
