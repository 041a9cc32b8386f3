"""VLLMBackend's plumbing against a fake ``vllm`` module (this machine has no GPU and no vLLM).

What runs here: the exact LLM / SamplingParams arguments, the conversion of vLLM's outputs into a
RolloutBatch, weight pushes after optimizer steps, and the error without vLLM. What does not:
real vLLM sampling and ``load_weights`` inside a vLLM worker.
"""

import sys
import types
from types import SimpleNamespace as NS

import pytest
import torch

from grpokit.config import load_config
from grpokit.rollout import make_backend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer

EOS = 2  # the tiny tokenizer's <|im_end|>


class FakeLLM:
    """Records its arguments; ``generate`` returns canned outputs; ``apply_model`` runs on a fake model."""

    def __init__(self, **kwargs):
        self.kwargs, self.generated, self.loaded, self.cache_resets = kwargs, [], [], 0
        self.outputs = None

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.generated.append((prompts, sampling_params))
        return self.outputs

    def apply_model(self, func):
        worker_model = NS(load_weights=lambda weights: self.loaded.append(dict(weights)))
        return [func(worker_model)]

    def reset_prefix_cache(self):
        self.cache_resets += 1


def completion(index, token_ids, logps, finish):
    return NS(index=index, token_ids=token_ids, finish_reason=finish,
              logprobs=[{t: NS(logprob=lp)} for t, lp in zip(token_ids, logps)])


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kwargs: NS(**kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


@pytest.fixture
def backend(fake_vllm, tmp_path):
    model, tok = tiny_model_and_tokenizer()
    model.save_pretrained(tmp_path)  # so model.name_or_path is a folder, as after load_model
    model.name_or_path = str(tmp_path)
    cfg = load_config(overrides=["rollout.backend=vllm", "rollout.backend_options={gpu_memory_utilization: 0.3}"])
    return make_backend(cfg.rollout, model, tok, seed=7)


def test_engine_and_sampling_arguments(backend, tmp_path):
    assert backend.llm.kwargs == {"model": str(tmp_path), "dtype": "float32", "seed": 7,
                                  "logprobs_mode": "processed_logprobs", "gpu_memory_utilization": 0.3}
    backend.llm.outputs = [NS(outputs=[completion(0, [EOS], [-0.1], "stop"), completion(1, [EOS], [-0.2], "stop")])]
    backend.generate(["ab"], [{"prompt": "ab"}], 2, SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, min_new_tokens=1))
    prompts, sp = backend.llm.generated[0]
    assert vars(sp) == {"n": 2, "temperature": 0.7, "top_p": 0.9, "top_k": -1, "max_tokens": 5, "min_tokens": 1, "logprobs": 0}
    ids = backend.tokenizer("ab", add_special_tokens=False).input_ids
    assert prompts == [{"prompt_token_ids": ids}]  # tokenized here, no padding sent to vLLM


def test_outputs_become_a_rollout_batch(backend):
    a, b, c = (backend.tokenizer.convert_tokens_to_ids(x) for x in "abc")
    backend.llm.outputs = [  # vLLM may list a request's samples out of order: index decides
        NS(outputs=[completion(1, [a, b, c], [-1.0, -2.0, -3.0], "length"), completion(0, [a, EOS], [-0.5, -0.25], "stop")]),
        NS(outputs=[completion(0, [c], [-4.0], "length"), completion(1, [b, c, EOS], [-0.1, -0.2, -0.3], "stop")]),
    ]
    rows = [{"prompt": "x", "answer": "1"}, {"prompt": "yy", "answer": "2"}]
    batch = backend.generate(["x", "yy"], rows, 2, SamplingParams(max_new_tokens=3))
    pad = backend.pad_id
    assert batch.completion_ids.tolist() == [[a, EOS, pad], [a, b, c], [c, pad, pad], [b, c, EOS]]
    assert batch.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]]  # EOS counts
    assert batch.truncated.tolist() == [False, True, True, False]  # finish_reason == "length"
    torch.testing.assert_close(batch.sampling_logp, torch.tensor([[-0.5, -0.25, 0], [-1, -2, -3], [-4, 0, 0], [-0.1, -0.2, -0.3]]))
    assert batch.group_ids.tolist() == [0, 0, 1, 1]
    assert batch.completions == ["a", "abc", "c", "bc"]
    assert batch.rows == [rows[0], rows[0], rows[1], rows[1]] and batch.prompts == ["x", "x", "yy", "yy"]
    assert batch.prompt_ids.shape == (4, 2) and batch.prompt_mask.tolist()[0] == [0, 1]  # left-padded like HF
    assert batch.entropy is None


def test_greedy_sampling_params(backend):
    backend.llm.outputs = [NS(outputs=[completion(0, [EOS], [0.0], "stop")])]
    backend.generate(["x"], [{"prompt": "x"}], 1, SamplingParams(max_new_tokens=4, greedy=True))
    assert vars(backend.llm.generated[0][1]) == {"n": 1, "temperature": 0.0, "max_tokens": 4, "min_tokens": 0, "logprobs": 0}


def test_weights_pushed_after_an_optimizer_step_only(backend):
    backend.llm.outputs = [NS(outputs=[completion(0, [EOS], [0.0], "stop")])]
    generate = lambda: backend.generate(["x"], [{"prompt": "x"}], 1, SamplingParams(max_new_tokens=2))
    generate()
    assert backend.llm.loaded == []  # vLLM loaded the same weights from disk
    model = backend.model
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)  # fused AdamW bumps no tensor versions
    model(torch.tensor([[5, 6]])).logits.sum().backward()
    opt.step()
    generate()
    generate()  # unchanged since the last push: nothing sent
    assert len(backend.llm.loaded) == 1 and backend.llm.cache_resets == 1
    pushed = backend.llm.loaded[0]
    assert pushed.keys() == model.state_dict().keys()
    torch.testing.assert_close(pushed["model.norm.weight"], model.model.norm.weight.detach())
    with torch.no_grad():  # a resume copies weights in: versions change, pushed again
        model.model.norm.weight.copy_(torch.zeros_like(model.model.norm.weight))
    generate()
    assert len(backend.llm.loaded) == 2 and float(backend.llm.loaded[1]["model.norm.weight"].abs().sum()) == 0.0


def test_lora_policy_pushes_merged_weights_under_hf_names(fake_vllm, tmp_path):
    from grpokit.config.schema import LoraConfig
    from grpokit.model.lora import apply_lora
    from grpokit.rollout.vllm import hf_named_weights

    model, _ = tiny_model_and_tokenizer()
    peft = apply_lora(model, LoraConfig(enabled=True, r=2, target_modules=["q_proj"]))
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.fill_(0.5)  # a trained adapter: merged weights differ from the base
    base_q = model.model.layers[0].self_attn.q_proj.base_layer.weight.detach().clone()
    with hf_named_weights(peft) as named:
        named = dict(named)
        assert "model.layers.0.self_attn.q_proj.weight" in named and not any("lora" in n for n in named)
        assert not torch.equal(named["model.layers.0.self_attn.q_proj.weight"], base_q)
    torch.testing.assert_close(model.model.layers[0].self_attn.q_proj.base_layer.weight, base_q)  # unmerged after


def test_without_vllm_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    model, tok = tiny_model_and_tokenizer()
    cfg = load_config(overrides=["rollout.backend=vllm"])
    with pytest.raises(ImportError, match=r"pip install 'grpokit\[vllm\]'.*rollout.backend=hf"):
        make_backend(cfg.rollout, model, tok)


def test_hf_backend_rejects_vllm_options():
    model, tok = tiny_model_and_tokenizer()
    cfg = load_config(overrides=["rollout.backend_options={gpu_memory_utilization: 0.3}"])
    with pytest.raises(ValueError, match="rollout.backend=vllm"):
        make_backend(cfg.rollout, model, tok)
