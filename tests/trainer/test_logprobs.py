"""The learner scores exactly what the sampler produced."""

import torch

from grpokit.model.logprobs import completion_logprobs, token_logprobs_from_logits
from grpokit.rollout.hf import HFBackend, completion_mask_from_eos
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer


def test_completion_mask_from_eos():
    ids = torch.tensor([[5, 6, 2, 7], [5, 6, 7, 8], [2, 9, 9, 9]])
    mask, truncated = completion_mask_from_eos(ids, [2])
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


def test_chunked_logprobs_equal_full_log_softmax():
    torch.manual_seed(0)
    logits = torch.randn(3, 10, 17, requires_grad=True)
    targets = torch.randint(0, 17, (3, 10))
    logp, ent = token_logprobs_from_logits(logits, targets, chunk=3, with_entropy=True)
    full = torch.log_softmax(logits, -1)
    torch.testing.assert_close(logp, full.gather(-1, targets.unsqueeze(-1)).squeeze(-1))
    torch.testing.assert_close(ent, -(full.exp() * full).sum(-1))
    g1 = torch.autograd.grad(logp.sum(), logits)[0]
    g2 = torch.autograd.grad(full.gather(-1, targets.unsqueeze(-1)).sum(), logits)[0]
    torch.testing.assert_close(g1, g2)


def test_learner_logprobs_match_sampling_logprobs():
    torch.manual_seed(0)
    model, tok = tiny_model_and_tokenizer(seed=1)
    backend = HFBackend(model, tok)
    rows = [{"prompt": "a"}, {"prompt": "a much longer prompt"}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    batch = backend.generate(texts, rows, 3, SamplingParams(max_new_tokens=8, temperature=0.7))
    assert batch.completion_ids.shape[0] == 6 and batch.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask, temperature=0.7
        )
    torch.testing.assert_close(logp, batch.sampling_logp, atol=1e-4, rtol=1e-4)


def test_shared_prompt_path_equals_full_path_values_and_grads():
    torch.manual_seed(0)
    model, tok = tiny_model_and_tokenizer(seed=2)
    backend = HFBackend(model, tok)
    rows = [{"prompt": "a"}, {"prompt": "a much longer prompt"}, {"prompt": "mid size"}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    b = backend.generate(texts, rows, 3, SamplingParams(max_new_tokens=7, temperature=1.0))
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask)
    weights = torch.randn(b.completion_ids.shape)

    def run(share):
        model.zero_grad(set_to_none=True)
        logp, _ = completion_logprobs(model, *args, group_ids=b.group_ids, share_prompt=share)
        (logp * weights).sum().backward()
        return logp.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])

    lp_full, g_full = run(False)
    lp_shared, g_shared = run(True)
    torch.testing.assert_close(lp_shared, lp_full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_shared, g_full, atol=1e-5, rtol=1e-5)


def test_two_stage_prompt_backward_gives_the_same_gradients():
    """PromptStage cuts the graph after the shared prompt; prompt-first and prompt-last backward agree."""
    from contextlib import nullcontext

    from grpokit.model.grad_sinks import head_grad_in_place, in_place_embedding_grads
    from grpokit.model.logprobs import PromptStage
    from grpokit.trainer.memory import allocate_gradients

    torch.manual_seed(0)
    model, tok = tiny_model_and_tokenizer(seed=2)
    rows = [{"prompt": "a"}, {"prompt": "a much longer prompt"}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    b = HFBackend(model, tok).generate(texts, rows, 3, SamplingParams(max_new_tokens=7, temperature=1.0))
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask)
    weights = torch.randn(b.completion_ids.shape)
    params = list(model.parameters())

    def grads(two_stage, checkpoint, preallocate, in_place=False):
        model.zero_grad(set_to_none=True)
        if preallocate:
            allocate_gradients(params)
        stage = PromptStage() if two_stage else None
        with in_place_embedding_grads(model) if in_place else nullcontext():
            if in_place:
                assert model.get_input_embeddings().sparse and head_grad_in_place(model.lm_head.weight)
            logp, _ = completion_logprobs(model, *args, group_ids=b.group_ids, checkpoint=checkpoint, prompt_stage=stage)
            (logp * weights).sum().backward()
            if stage is not None:
                assert len(stage.leaves) == 1 + 2 * model.config.num_hidden_layers  # last hidden + K/V per layer
                stage.backward()
        assert not model.get_input_embeddings().sparse
        return torch.cat([p.grad.flatten() for p in params])

    plain = grads(False, False, False)
    assert plain.abs().max() > 0 and model.lm_head.weight is model.get_input_embeddings().weight  # tied
    for case in [(True, False, False), (True, True, False), (True, False, True), (True, False, True, True), (False, True, True, True)]:
        torch.testing.assert_close(grads(*case), plain, atol=1e-6, rtol=1e-5)
    model.zero_grad(set_to_none=True)
    allocate_gradients(params)
    base = params[0].grad.untyped_storage().data_ptr()
    assert all(p.grad.untyped_storage().data_ptr() == base for p in params)  # one flat block


def test_two_stage_prompt_backward_replays_dropout():
    from grpokit.model.logprobs import PromptStage

    model, tok = tiny_model_and_tokenizer(seed=2)
    rows = [{"prompt": "a"}, {"prompt": "a much longer prompt"}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    b = HFBackend(model, tok).generate(texts, rows, 2, SamplingParams(max_new_tokens=5, temperature=1.0))
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.5
    model.train()

    def grads(two_stage):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        stage = PromptStage() if two_stage else None
        logp, _ = completion_logprobs(model, b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask,
                                      group_ids=b.group_ids, prompt_stage=stage)
        logp.sum().backward()
        if stage is not None:
            stage.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    torch.testing.assert_close(grads(True), grads(False), atol=1e-6, rtol=1e-5)


def test_allocate_gradients_gives_mixed_dtypes_their_own_zero_gradients():
    from grpokit.trainer.memory import allocate_gradients

    a, b, c = (torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, dtype=torch.float64)),
               torch.nn.Parameter(torch.ones(4)))
    allocate_gradients([a, b, c])
    assert a.grad.untyped_storage().nbytes() == 7 * 4  # one block of exactly a's and c's elements
    assert a.grad.untyped_storage().data_ptr() == c.grad.untyped_storage().data_ptr()
    assert b.grad.dtype == torch.float64 and float(a.grad.abs().sum() + b.grad.abs().sum() + c.grad.abs().sum()) == 0
