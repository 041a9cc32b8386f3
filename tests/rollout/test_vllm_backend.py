"""VLLMBackend's plumbing against a fake ``vllm`` module (this machine has no GPU and no vLLM).

The fake keeps vLLM 0.30's call shapes: ``LLM(model, *, dtype, seed, **EngineArgs fields)``,
``generate(prompts, sampling_params, *, use_tqdm, lora_request)``, ``apply_model(fn)``,
``prompt_logprobs`` as ``[None, {token: Logprob}, ...]`` and ``LoRARequest(lora_name,
lora_int_id, lora_path)`` cached by id. Its "engine" is a real copy of the tiny model, loaded
from the folder vLLM is given, that receives the pushed weights / adapters and scores the sync
probe, so the sync check compares two real forwards. What does not run here: vLLM's kernels,
its sampler and ``load_weights`` inside a vLLM worker.
"""

import copy
import dataclasses
import sys
import types
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from grpokit.config import load_config
from grpokit.rollout import make_backend
from grpokit.rollout.types import SamplingParams
from grpokit.rollout.vllm import VLLMBackend, WeightSyncError
from grpokit.testing import tiny_model_and_tokenizer

EOS = 2  # the tiny tokenizer's <|im_end|>


@dataclasses.dataclass
class FakeEngineArgs:  # a few of vllm.EngineArgs' fields (LLM passes its **kwargs to it)
    gpu_memory_utilization: float = 0.92
    enforce_eager: bool = False
    enable_lora: bool = False
    max_lora_rank: int = 16
    max_loras: int = 1
    logprobs_mode: str = "raw_logprobs"


class FakeLoRARequest:  # vllm.lora.request.LoRARequest (a msgspec Struct there)
    def __init__(self, lora_name, lora_int_id, lora_path=""):
        if lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {lora_int_id}")
        assert lora_path, "lora_path cannot be empty"
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path


class FakeLLM:
    """Records its arguments; samples canned ``outputs``; pushes and probes reach a real engine model."""

    def __init__(self, model, *, dtype="auto", seed=0, **kwargs):
        self.kwargs = {"model": model, "dtype": dtype, "seed": seed, **kwargs}
        self.engine = AutoModelForCausalLM.from_pretrained(model).eval()
        self.generated, self.probes, self.loaded, self.lora_loads, self.cache_resets = [], [], [], [], 0
        self.adapters = {}  # lora_int_id -> engine with that adapter: vLLM loads an id once
        self.drop = set()  # names load_weights ignores, as vLLM skips names its model does not have
        self.outputs = None

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None):
        if getattr(sampling_params, "prompt_logprobs", None) is not None:
            self.probes.append(lora_request)
            return [self._score(p["prompt_token_ids"], lora_request) for p in prompts]
        self.generated.append((prompts, sampling_params, lora_request))
        return self.outputs

    def _score(self, ids, lora_request):
        model = self.engine
        if lora_request is not None:
            if lora_request.lora_int_id not in self.adapters:
                from peft import PeftModel

                with safe_open(str(Path(lora_request.lora_path) / "adapter_model.safetensors"), "pt") as f:
                    self.lora_loads.append((lora_request.lora_int_id, list(f.keys())))
                self.adapters[lora_request.lora_int_id] = PeftModel.from_pretrained(copy.deepcopy(self.engine), lora_request.lora_path).eval()
            model = self.adapters[lora_request.lora_int_id]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
        return NS(prompt_logprobs=[None] + [{t: NS(logprob=float(logp[i - 1, t]))} for i, t in enumerate(ids) if i], outputs=[])

    def apply_model(self, func):
        def load_weights(weights):
            weights = dict(weights)
            self.loaded.append(weights)
            self.engine.load_state_dict({k: v for k, v in weights.items() if k not in self.drop}, strict=False)

        return [func(NS(load_weights=load_weights))]

    def reset_prefix_cache(self):
        self.cache_resets += 1


def completion(index, token_ids, logps, finish):
    return NS(index=index, token_ids=token_ids, finish_reason=finish,
              logprobs=[{t: NS(logprob=lp)} for t, lp in zip(token_ids, logps)])


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.EngineArgs = FakeLLM, FakeEngineArgs
    module.SamplingParams = lambda **kwargs: NS(**kwargs)
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest
    for name, mod in {"vllm": module, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return module


def saved_policy(tmp_path):
    model, tok = tiny_model_and_tokenizer()
    model.save_pretrained(tmp_path)  # so model.name_or_path is a folder, as after load_model
    model.name_or_path = str(tmp_path)
    return model, tok


def vllm_backend(model, tok, **options):
    sets = ["rollout.backend=vllm"] + ([f"rollout.backend_options={options}".replace("'", "")] if options else [])
    return make_backend(load_config(overrides=sets).rollout, model, tok, seed=7)


@pytest.fixture
def backend(fake_vllm, tmp_path):
    return vllm_backend(*saved_policy(tmp_path), gpu_memory_utilization=0.3)


def sample(backend, **params):
    backend.llm.outputs = [NS(outputs=[completion(0, [EOS], [-0.5], "stop")])]
    return backend.generate(["x"], [{"prompt": "x"}], 1, SamplingParams(max_new_tokens=2, **params))


def optimizer_step(model, lr=0.1):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, fused=True)  # fused: no version bumps
    model(torch.tensor([[5, 6, 7]])).logits.sum().backward()
    opt.step()
    opt.zero_grad()


def test_engine_and_sampling_arguments(backend, tmp_path):
    assert backend.llm.kwargs == {"model": str(tmp_path), "dtype": "float32", "seed": 7,
                                  "logprobs_mode": "processed_logprobs", "gpu_memory_utilization": 0.3}
    backend.llm.outputs = [NS(outputs=[completion(0, [EOS], [-0.1], "stop"), completion(1, [EOS], [-0.2], "stop")])]
    backend.generate(["ab"], [{"prompt": "ab"}], 2, SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, min_new_tokens=1))
    prompts, sp, lora_request = backend.llm.generated[0]
    # min_tokens and logprobs=0 under processed_logprobs: the sampled token's log-prob after EOS banning
    assert vars(sp) == {"n": 2, "temperature": 0.7, "top_p": 0.9, "top_k": -1, "max_tokens": 5, "min_tokens": 1, "logprobs": 0}
    ids = backend.tokenizer("ab", add_special_tokens=False).input_ids
    assert prompts == [{"prompt_token_ids": ids}] and lora_request is None  # tokenized here, no padding sent


def test_sampler_logprobs_become_the_batchs_sampling_logp(backend):
    a, b, c = (backend.tokenizer.convert_tokens_to_ids(x) for x in "abc")
    backend.llm.outputs = [  # vLLM may list a request's samples out of order: index decides
        NS(outputs=[completion(1, [a, b, c], [-1.0, -2.0, -3.0], "length"), completion(0, [a, EOS], [-0.5, -0.25], "stop")]),
        NS(outputs=[completion(0, [c], [-4.0], "length"), completion(1, [b, c, EOS], [-0.1, -0.2, -0.3], "stop")]),
    ]
    rows = [{"prompt": "x", "answer": "1"}, {"prompt": "yy", "answer": "2"}]
    batch = backend.generate(["x", "yy"], rows, 2, SamplingParams(max_new_tokens=3, min_new_tokens=1))
    pad = backend.pad_id
    assert batch.completion_ids.tolist() == [[a, EOS, pad], [a, b, c], [c, pad, pad], [b, c, EOS]]
    assert batch.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]]  # EOS counts
    assert batch.truncated.tolist() == [False, True, True, False]  # finish_reason == "length"
    torch.testing.assert_close(batch.sampling_logp, torch.tensor([[-0.5, -0.25, 0], [-1, -2, -3], [-4, 0, 0], [-0.1, -0.2, -0.3]]))
    assert batch.group_ids.tolist() == [0, 0, 1, 1]
    assert batch.completions == ["a", "abc", "c", "bc"]
    assert batch.rows == [rows[0], rows[0], rows[1], rows[1]] and batch.prompts == ["x", "x", "yy", "yy"]
    assert batch.prompt_ids.shape == (4, 2) and batch.prompt_mask.tolist()[0] == [0, 1]  # left-padded like HF
    assert batch.entropy is None and batch.engine == "vllm" and batch.select(slice(0, 2)).engine == "vllm"


def test_missing_sampler_logprobs_are_an_error(backend):
    backend.llm.outputs = [NS(outputs=[NS(index=0, token_ids=[EOS], finish_reason="stop", logprobs=None)])]
    with pytest.raises(RuntimeError, match="0 log-probs for 1 sampled tokens"):
        backend.generate(["x"], [{"prompt": "x"}], 1, SamplingParams())


def test_greedy_sampling_params(backend):
    sample(backend, greedy=True)
    assert vars(backend.llm.generated[0][1]) == {"n": 1, "temperature": 0.0, "max_tokens": 2, "min_tokens": 0, "logprobs": 0}


def test_weights_version_is_the_learner_step_of_the_last_push(backend):
    assert sample(backend).weights_version == 0  # vLLM's weights came from the policy folder
    backend.learner_step = 3
    assert sample(backend).weights_version == 0  # no optimizer step since: nothing pushed
    optimizer_step(backend.model)
    batch = sample(backend)
    assert batch.weights_version == 3 and batch.engine == "vllm"
    backend.learner_step = 4
    assert sample(backend).weights_version == 3


def test_weights_pushed_after_an_optimizer_step_only(backend):
    sample(backend)
    assert backend.llm.loaded == []  # vLLM loaded the same weights from disk
    model = backend.model
    optimizer_step(model)
    sample(backend)
    sample(backend)  # unchanged since the last push: nothing sent
    assert len(backend.llm.loaded) == 1 and backend.llm.cache_resets == 1
    pushed = backend.llm.loaded[0]
    assert pushed.keys() == model.state_dict().keys()
    torch.testing.assert_close(pushed["model.norm.weight"], model.model.norm.weight.detach())
    with torch.no_grad():  # a resume copies weights in: versions change, pushed again
        model.model.norm.weight.copy_(torch.zeros_like(model.model.norm.weight))
    sample(backend)
    assert len(backend.llm.loaded) == 2 and float(backend.llm.loaded[1]["model.norm.weight"].abs().sum()) == 0.0


def test_a_matching_sync_passes_and_records_the_difference(backend):
    sample(backend)  # before the first sampling: vLLM's weights from disk vs the policy
    assert len(backend.llm.probes) == 1 and backend.last_sync_diff < 1e-5  # the same fp32 forward on both sides
    optimizer_step(backend.model)
    sample(backend)
    sample(backend)  # nothing pushed: no probe
    assert len(backend.llm.probes) == 2 and backend.last_sync_diff < 1e-5
    assert backend.sync_tolerance == 1e-3  # the float32 default


def test_a_sync_whose_probe_disagrees_raises(backend):
    sample(backend)
    backend.llm.drop = {n for n in backend.model.state_dict() if "mlp" in n}  # names the engine silently skips
    optimizer_step(backend.model)
    backend.learner_step = 1
    with pytest.raises(WeightSyncError, match=r"learner step 1: max \|delta log-prob\| \S+ on the probe > "
                                              r"rollout.backend_options.sync_check_tolerance=0.001;.*sync_check: false") as err:
        sample(backend)
    assert "\n" not in str(err.value) and backend.last_sync_diff > 1e-3
    assert len(backend.llm.generated) == 1  # nothing sampled from the stale engine


def test_an_engine_loaded_from_other_weights_fails_before_sampling(fake_vllm, tmp_path):
    model, tok = saved_policy(tmp_path)
    with torch.no_grad():
        model.model.norm.weight.mul_(3.0)  # changed after saving: vLLM's folder is stale
    backend = vllm_backend(model, tok)
    with pytest.raises(WeightSyncError):
        sample(backend)
    assert backend.llm.generated == []


def test_sync_check_options(fake_vllm, tmp_path):
    model, tok = saved_policy(tmp_path)
    loose = vllm_backend(model, tok, sync_check_tolerance=100)
    loose.llm.drop = set(model.state_dict())
    optimizer_step(model)
    sample(loose)  # passes the loose tolerance; the difference is still reported
    assert loose.sync_tolerance == 100 and loose.last_sync_diff > 1e-3
    off = vllm_backend(model, tok, sync_check="false")
    optimizer_step(model)
    sample(off)
    assert off.llm.probes == [] and off.last_sync_diff is None
    assert VLLMBackend(model, tok, str(tmp_path), dtype="bfloat16").sync_tolerance == 0.5


@pytest.mark.parametrize("options, message", [
    ({"gpu_memory_utilisation": 0.3}, r"\['gpu_memory_utilisation'\] are not options of this vLLM \(did you mean "
                                      r"'gpu_memory_utilisation' -> 'gpu_memory_utilization'\?\): valid are grpokit's model, dtype, "
                                      r"sync_check, sync_check_tolerance and the keyword arguments of vllm.LLM / vllm.EngineArgs"),
    ({"seed": 1}, r"backend_options.seed: vLLM is seeded with train.seed"),
    ({"logprobs_mode": "raw_logprobs"}, r"only 'processed_logprobs' gives sampling_logp under the sampling distribution"),
    ({"sync_check": "yes"}, r"sync_check must be true or false"),
    ({"sync_check_tolerance": -1}, r"sync_check_tolerance must be a positive number"),
])
def test_invalid_backend_options_fail_in_one_line(fake_vllm, tmp_path, options, message):
    model, tok = saved_policy(tmp_path)
    with pytest.raises(ValueError, match=message) as err:
        VLLMBackend(model, tok, str(tmp_path), options=options)
    assert "\n" not in str(err.value)


def test_options_pass_through_when_vllms_signature_is_unknown(fake_vllm, tmp_path):
    class OpaqueLLM(FakeLLM):
        def __init__(self, **kwargs):
            super().__init__(kwargs.pop("model"), **kwargs)

    fake_vllm.LLM = OpaqueLLM
    del fake_vllm.EngineArgs
    model, tok = saved_policy(tmp_path)
    backend = VLLMBackend(model, tok, str(tmp_path), options={"some_new_engine_option": 1})
    assert backend.llm.kwargs["some_new_engine_option"] == 1  # vLLM itself judges it


def lora_backend(tmp_path):
    from grpokit.config.schema import LoraConfig
    from grpokit.model.lora import apply_lora

    model, tok = saved_policy(tmp_path)
    peft = apply_lora(model, LoraConfig(enabled=True, r=2, target_modules=["q_proj"]))
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.fill_(0.5)  # a trained adapter: the policy differs from the base vLLM loaded
    return vllm_backend(peft, tok)


def test_lora_sync_pushes_only_the_adapter_under_a_new_id(fake_vllm, tmp_path):
    backend = lora_backend(tmp_path)
    llm = backend.llm
    assert llm.kwargs["enable_lora"] is True and llm.kwargs["max_lora_rank"] == 8  # r=2 rounded up to a vLLM rank
    assert llm.kwargs["model"] == str(tmp_path)  # the base folder
    sample(backend)  # the adapter goes before the first sampling
    first = backend.lora_request
    assert (first.lora_int_id, first.lora_name) == (1, "grpokit-policy-v1")
    assert llm.generated[0][2] is first and llm.probes == [first] and backend.last_sync_diff < 1e-5
    optimizer_step(backend.model)
    sample(backend)
    second = backend.lora_request
    assert second.lora_int_id == 2 and second.lora_path != first.lora_path and not Path(first.lora_path).exists()
    assert llm.generated[1][2] is second and backend.last_sync_diff < 1e-5
    assert llm.loaded == [] and llm.cache_resets == 0  # no full weights sent
    assert [i for i, _ in llm.lora_loads] == [1, 2]
    assert all("lora_A" in k or "lora_B" in k for _, keys in llm.lora_loads for k in keys)


def test_an_adapter_reusing_its_id_is_caught(fake_vllm, tmp_path):
    backend = lora_backend(tmp_path)
    sample(backend)
    backend.lora_request.lora_int_id = 0  # the next push would reuse id 1: vLLM serves its cached adapter
    optimizer_step(backend.model)
    with pytest.raises(WeightSyncError):
        sample(backend)


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
