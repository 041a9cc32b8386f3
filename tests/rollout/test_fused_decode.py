"""The fused decode step computes what the transformers forward computes, and the sampler uses it safely."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from grpokit.model.logprobs import output_cache
from grpokit.rollout.fused_decode import FusedDecoder
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer

SMALL = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True)


def _model(cls, cfg_cls, seed=0, **extra):
    torch.manual_seed(seed)
    model = cls(cfg_cls(**{**SMALL, **extra})).eval()
    with torch.no_grad():  # larger weights than the init's 0.02 std, so differences would show
        for p in model.parameters():
            p.mul_(8.0) if p.dim() == 2 else p.add_(0.1 * torch.randn_like(p))
    return model


def _compare_steps(model, steps=5):
    """Max |fused logits - transformers logits| over ``steps`` decode steps after a left-padded prefill."""
    torch.manual_seed(1)
    n, group, p = 2, 3, 6
    ids = torch.randint(0, 97, (n, p))
    att = torch.ones(n, p, dtype=torch.long)
    att[0, :2] = 0  # left padding in one prompt
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
        cache = output_cache(out)
        fused = FusedDecoder.build(model, rows_hint=n * group)
        assert fused is not None
        expand = torch.arange(n).repeat_interleave(group)
        fused.start(cache, att, expand, steps + 1)
        cache.reorder_cache(expand)
        att, nxt = att[expand], pos[expand, -1] + 1
        worst = 0.0
        for _ in range(steps):
            tok = torch.randint(0, 97, (n * group,))
            mine = fused.step(tok, nxt)
            att = torch.cat([att, torch.ones(n * group, 1, dtype=att.dtype)], 1)
            ref = model(input_ids=tok[:, None], attention_mask=att, position_ids=nxt[:, None], use_cache=True,
                        past_key_values=cache).logits[:, -1]
            assert ref.abs().max() > 1.0  # logits of a real spread, not all ~0
            worst = max(worst, float((mine - ref).abs().max()))
            nxt = nxt + 1
    return worst


@pytest.mark.parametrize("cls,cfg_cls,extra", [
    (LlamaForCausalLM, LlamaConfig, {}),
    (LlamaForCausalLM, LlamaConfig, {"tie_word_embeddings": False, "attention_bias": True, "mlp_bias": True}),
    (Qwen2ForCausalLM, Qwen2Config, {}),  # q/k/v biases
])
def test_fused_step_equals_transformers_forward(cls, cfg_cls, extra):
    assert _compare_steps(_model(cls, cfg_cls, **extra)) < 1e-4


def test_fused_step_folds_lora_adapters_in():
    peft = pytest.importorskip("peft")
    model = _model(LlamaForCausalLM, LlamaConfig)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    with torch.no_grad():  # LoRA's B starts at zero: give the adapters a visible effect
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    lora.eval()
    assert _compare_steps(lora) < 1e-4
    with lora.disable_adapter():  # the base model only
        assert _compare_steps(lora) < 1e-4


def test_unsupported_models_fall_back_to_the_transformers_loop():
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=97, n_embd=32, n_layer=1, n_head=2))
    assert FusedDecoder.build(gpt2, rows_hint=4) is None
    windowed = LlamaConfig(**SMALL)
    windowed.model_type = "mistral"
    windowed.sliding_window = 16
    assert FusedDecoder.build(LlamaForCausalLM(windowed), rows_hint=4) is None


@pytest.mark.parametrize("compact_fraction", [0.125, 0.99])  # compact at once / keep finished rows in the batch
def test_backend_gives_the_same_greedy_completions_fused_or_not(compact_fraction):
    model, tok = tiny_model_and_tokenizer(seed=3)
    with torch.no_grad():  # sharper than the init, so greedy completions differ between prompts
        for p in model.parameters():
            p.mul_(6.0) if p.dim() == 2 else None
    texts = [tok.apply_chat_template([{"role": "user", "content": c}], tokenize=False, add_generation_prompt=True)
             for c in ("hi", "a longer question here", "what is 2+3", "name a color")]
    rows = [{"prompt": t} for t in texts]
    params = SamplingParams(max_new_tokens=12, greedy=True)
    plain = HFBackend(model, tok, fused_decode=False)
    probe = plain.generate(texts, rows, 2, params).completion_ids
    # An "EOS" that one prompt's completion emits part-way and another's never does.
    eos = int(probe[0, -1])
    assert probe[0, 0] != eos and not (probe == eos).any(-1).all()
    plain.eos_ids = [eos]
    fused = HFBackend(model, tok)
    fused.eos_ids, fused.COMPACT_FRACTION = [eos], compact_fraction
    a, b = plain.generate(texts, rows, 2, params), fused.generate(texts, rows, 2, params)
    lengths = a.completion_mask.sum(-1)
    assert lengths.min() < lengths.max()  # some rows stopped early
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.completion_mask, b.completion_mask)
    torch.testing.assert_close(a.sampling_logp, b.sampling_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.entropy, b.entropy, atol=1e-5, rtol=0)


def test_final_norm_hooks_still_see_every_decode_step():
    """TOPLOC captures the final norm's output with a forward hook; the fused path calls that module."""
    model, tok = tiny_model_and_tokenizer(seed=4)
    seen = []
    handle = model.get_decoder().norm.register_forward_hook(lambda _m, _i, out: seen.append(tuple(out.shape)))
    texts = [tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)]
    HFBackend(model, tok).generate(texts, [{"prompt": texts[0]}], 2, SamplingParams(max_new_tokens=5, min_new_tokens=5))
    handle.remove()
    assert len(seen) == 5 and seen[1] == (2, 1, model.config.hidden_size)  # prefill + 4 decode steps of [B, 1, H]
