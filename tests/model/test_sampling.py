"""The sampler draws from the right distribution and honours min_new_tokens."""

import torch

from grpokit.rollout.hf import HFBackend, next_tokens, sample_categorical
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer


def test_sample_categorical_matches_probabilities_and_never_draws_zero_mass():
    torch.manual_seed(0)
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(40000, 1)
    draws = sample_categorical(probs)
    freq = torch.bincount(draws, minlength=6).float() / len(draws)
    assert freq[[0, 2, 5]].sum() == 0
    torch.testing.assert_close(freq, probs[0], atol=0.01, rtol=0)  # 0.01 > 4 standard errors


def test_banned_tokens_get_zero_probability_and_entropy_stays_the_learners():
    torch.manual_seed(0)
    logits = torch.randn(64, 10)
    params = SamplingParams(temperature=0.7)
    tok, logp, ent = next_tokens(logits, params, banned=torch.tensor([2, 3]))
    assert not torch.isin(tok, torch.tensor([2, 3])).any()
    shaped = torch.log_softmax((logits / 0.7).index_fill(-1, torch.tensor([2, 3]), float("-inf")), -1)
    torch.testing.assert_close(logp, shaped.gather(-1, tok[:, None]).squeeze(-1))
    tempered = torch.log_softmax(logits / 0.7, -1)
    torch.testing.assert_close(ent, -(tempered.exp() * tempered).sum(-1))  # finite, unbanned distribution


def test_banned_sampling_draws_the_renormalised_distribution():
    torch.manual_seed(0)
    logits = torch.tensor([[1.0, 2.0, 0.5, 3.0, -1.0, 0.0]]).repeat(40000, 1)
    tok, logp, _ = next_tokens(logits, SamplingParams(temperature=1.0), banned=torch.tensor([3]))
    want = torch.softmax(logits[0].index_fill(0, torch.tensor([3]), float("-inf")), -1)
    freq = torch.bincount(tok, minlength=6).float() / len(tok)
    torch.testing.assert_close(freq, want, atol=0.01, rtol=0)
    torch.testing.assert_close(logp, want.log()[tok])


def test_banned_sampling_when_the_banned_token_takes_all_the_mass():
    logits = torch.full((4, 6), -150.0)
    logits[:, 2] = 150.0  # allowed probabilities underflow to 0 in float32 after the softmax
    logits[:, 4] = -130.0
    tok, logp, _ = next_tokens(logits, SamplingParams(temperature=1.0), banned=torch.tensor([2]))
    assert (tok == 4).all()  # the allowed token with all but e^-20 of the allowed mass
    want = torch.log_softmax(logits.index_fill(-1, torch.tensor([2]), float("-inf")), -1)[:, 4]
    torch.testing.assert_close(logp, want)


def test_min_new_tokens_forbids_early_eos():
    torch.manual_seed(0)
    model, tok = tiny_model_and_tokenizer(seed=1)
    with torch.no_grad():  # make EOS (id 2) overwhelmingly likely
        model.lm_head.weight[2] += 50 * model.get_decoder().norm.weight
    texts = [tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)]
    backend = HFBackend(model, tok)
    free = backend.generate(texts, [{"prompt": "hi"}], 4, SamplingParams(max_new_tokens=8))
    fixed = backend.generate(texts, [{"prompt": "hi"}], 4, SamplingParams(max_new_tokens=8, min_new_tokens=5))
    assert free.completion_mask.sum(-1).max() < 5
    lengths = fixed.completion_mask.sum(-1)
    assert (lengths >= 5).all() and torch.isfinite(fixed.entropy).all()
