"""Devices: ``model.device`` / ``model.dtype`` resolution, CPU-only paths gated, no tensor created without a device.

The implicit-device catchers run the library's tensor code with its data explicitly on the CPU
while something else is the default device:

* ``torch.set_default_device("meta")``: a tensor created without ``device=`` is a meta tensor, and
  mixing it with a CPU tensor raises. Not every op raises, though: ``torch.isin(cpu, meta)`` and
  indexing a CPU tensor with a meta index run and return garbage (checked below), so each run is
  also compared with the same run under the CPU default. transformers' tokenizer creates its
  ``return_tensors="pt"`` tensors without a device (``tokenization_utils_base.py``), so under meta
  the tiny tokenizer is wrapped to tokenize with the CPU as default; its model forward needs no help.
* :class:`FactoryRecorder`, a TorchFunctionMode that records every tensor factory called without a
  ``device`` from a file of the library, with its line: precise where meta is silent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

import grpokit
from grpokit.devices import DeviceError, is_cpu, module_device, place_model, resolve_device, resolve_dtype
from grpokit.model.logprobs import completion_logprobs
from grpokit.model.streambp import streamed_backward, streamed_forward
from grpokit.rewards import NamedReward, score_completions
from grpokit.rewards.builtin import answer_match
from grpokit.rewards.group import dpp
from grpokit.rollout.fused_decode import FusedDecoder
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer

LIBRARY = Path(grpokit.__file__).parent
TORCH = Path(torch.__file__).parent
FACTORIES = _device_constructors()  # torch.zeros, torch.tensor, torch.arange, torch.rand, ... (what set_default_device redirects)


# ----------------------------------------------------------------------------- resolve_device / resolve_dtype


def _one_line(info) -> str:
    message = str(info.value)
    assert "\n" not in message
    return message


def test_auto_and_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")


def test_cuda_asked_without_cuda_is_one_line_naming_the_field(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(DeviceError) as info:
            resolve_device(spec)
        assert _one_line(info) == (
            f"model.device: '{spec}' was asked but torch.cuda.is_available() is False on this machine "
            f"(torch {torch.__version__}): set model.device=cpu (or auto)"
        )


def test_cuda_index_beyond_the_devices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(DeviceError) as info:
        resolve_device("cuda:3")
    assert _one_line(info) == (
        "model.device: 'cuda:3' was asked but this machine has 1 CUDA device (cuda:0): set model.device=cuda:0 (or auto)"
    )


def test_cuda_resolves_with_an_index(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)  # e.g. after set_device(LOCAL_RANK)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("auto") == torch.device("cuda", 1)


@pytest.mark.parametrize("spec", ["gpu", "cpu:1", "auto:0", "cuda:x", ""])
def test_not_a_device(spec):
    with pytest.raises(DeviceError) as info:
        resolve_device(spec)
    assert _one_line(info) == f"model.device: {spec!r} is not a device: set model.device to auto, cpu, cuda or cuda:N"


def test_dtypes():
    assert resolve_dtype("float32", "cpu") is torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) is torch.bfloat16
    assert resolve_dtype("float16", "cuda:0") is torch.float16  # a device object; no CUDA call for float16
    with pytest.raises(DeviceError) as info:
        resolve_dtype("float16", "cpu")
    assert _one_line(info).startswith("model.dtype: 'float16' was asked with the model on cpu")
    assert "set model.dtype=float32 or bfloat16" in str(info.value)
    with pytest.raises(DeviceError) as info:
        resolve_dtype("float64", "cpu")
    assert _one_line(info) == "model.dtype: 'float64' is not a dtype: set model.dtype to one of float32, bfloat16, float16"


def test_bfloat16_on_a_gpu_without_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla P100")
    with pytest.raises(DeviceError) as info:
        resolve_dtype("bfloat16", "cuda:0")
    assert _one_line(info) == (
        "model.dtype: 'bfloat16' was asked but cuda:0 (Tesla P100) has no bfloat16 support: set model.dtype=float16 or float32"
    )


def test_placement_helpers():
    model, _ = tiny_model_and_tokenizer()
    assert is_cpu("cpu") and is_cpu(torch.device("cpu")) and not is_cpu("meta") and not is_cpu("cuda:0")
    assert module_device(model) == torch.device("cpu") and module_device(torch.nn.ReLU()) == torch.device("cpu")
    weight = model.lm_head.weight
    assert place_model(model, "cpu", torch.bfloat16) is model
    assert model.lm_head.weight is weight and weight.dtype is torch.bfloat16  # same Parameter, cast in place
    place_model(model, "meta")
    assert module_device(model).type == "meta"


# ----------------------------------------------------------------------------- CPU-only paths are gated


def test_cpu_only_paths_are_off_elsewhere(monkeypatch):
    from grpokit.distributed import ddp
    from grpokit.trainer import memory

    model, _ = tiny_model_and_tokenizer()
    assert FusedDecoder.build(model, rows_hint=4) is not None
    assert FusedDecoder.build(model.to("meta"), rows_hint=4) is None  # "meta" stands in for a GPU here

    def no_libc():
        raise AssertionError("malloc_trim / mallopt called off the CPU")

    monkeypatch.setenv("GRPOKIT_MALLOC_TUNING", "1")
    monkeypatch.setattr(memory, "_libc", no_libc)
    memory.release_free_memory(torch.device("cuda", 0))
    assert memory.tune_malloc(device="cuda:0") is False

    cpu_model, _ = tiny_model_and_tokenizer()
    assert ddp.resolve_backend("auto", cpu_model) == "gloo"
    with pytest.raises(ValueError, match="learner_backend=nccl needs the policy on a GPU"):
        ddp.resolve_backend("nccl", cpu_model)
    monkeypatch.setattr(ddp, "module_device", lambda m: torch.device("cuda", 0))
    assert ddp.resolve_backend("auto", cpu_model) == "nccl"


def test_nccl_ranks_use_their_local_gpu(monkeypatch):
    from grpokit.distributed.ddp import local_cuda_device

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert local_cuda_device() == torch.device("cuda", 1)
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ValueError, match="LOCAL_RANK=2 but this node has 2 CUDA device"):
        local_cuda_device()


# ----------------------------------------------------------------------------- implicit-device catchers


class FactoryRecorder(TorchFunctionMode):
    """Records ``(file, line, factory)`` for each tensor factory called without ``device`` from a file under ``root``."""

    def __init__(self, root: Path = LIBRARY) -> None:
        super().__init__()
        self.root = str(root)
        self.hits: set[tuple[str, int, str]] = set()
        self.elsewhere: set[tuple[str, int, str]] = set()  # the same from other libraries (transformers, ...)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(str(TORCH)):
                frame = frame.f_back  # skip torch's own wrappers (nn.Module init, overrides)
            if frame is not None:
                where = (frame.f_code.co_filename, frame.f_lineno, func.__name__)
                (self.hits if where[0].startswith(self.root) else self.elsewhere).add(where)
        return func(*args, **kwargs)


@pytest.fixture
def meta_default():
    previous = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(previous)


def test_meta_default_catches_an_implicit_factory(meta_default):
    x = torch.ones(3, device="cpu")
    with pytest.raises(RuntimeError, match="meta"):
        torch.zeros(3) + x  # the bug this file hunts
    torch.testing.assert_close(torch.zeros(3, device=x.device) + x, x)
    torch.testing.assert_close(torch.zeros_like(x) + x.new_zeros(3) + x, x)


def test_the_recorder_catches_what_meta_lets_through():
    here = Path(__file__).parent
    x = torch.tensor([1.0, 2.0, 3.0], device="cpu")
    with FactoryRecorder(root=here) as rec:
        torch.isin(x, torch.tensor([1.0]))  # under a meta default: all True, no error
        torch.isin(x, torch.tensor([1.0], device=x.device))
    assert [(Path(f).name, name) for f, _, name in rec.hits] == [("test_devices.py", "tensor")]


class CpuTokenizer:
    """The tokenizer with the CPU as default device while it runs (transformers creates its tensors without one)."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    def __call__(self, *args, **kwargs):
        with torch.device("cpu"):
            return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def _cpu_model():
    with torch.device("cpu"):  # whatever the default device: the model sits on the CPU
        model, tok = tiny_model_and_tokenizer(seed=3)
    return model, CpuTokenizer(tok)


def _library_paths(model, tok):
    """Every tensor path under test, on the tiny CPU model; returns the tensors it produced (for comparison)."""
    torch.manual_seed(0)
    rows = [{"prompt": "a", "answer": "7"}, {"prompt": "a longer prompt", "answer": "12"}]
    texts = ["<|im_start|>user\na<|im_end|>\n", "<|im_start|>user\na longer prompt<|im_end|>\n"]
    params = SamplingParams(max_new_tokens=9, temperature=0.9, top_k=20, min_new_tokens=1)
    out = {}
    for fused in (True, False):
        b = HFBackend(model, tok, fused_decode=fused).generate(texts, rows, 3, params)
        out[f"ids/fused={fused}"], out[f"logp/fused={fused}"] = b.completion_ids, b.sampling_logp
    args = (b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask)
    for share, head in ((True, True), (False, True), (True, False)):
        with torch.no_grad():
            lp, ent = completion_logprobs(model, *args, group_ids=b.group_ids, share_prompt=share, fused_head=head, with_entropy=True)
        out[f"nograd/{share}/{head}"], out[f"ent/{share}/{head}"] = lp, ent
        model.zero_grad(set_to_none=True)
        lp, ent = completion_logprobs(model, *args, group_ids=b.group_ids, share_prompt=share, fused_head=head, entropy_grad=True)
        (lp.sum() + 0.1 * ent.sum()).backward()
        out[f"grad/{share}/{head}"] = model.lm_head.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    s_lp, s_ent, state = streamed_forward(model, *args, group_ids=None, chunk=4, with_entropy=True)
    streamed_backward(model, *args, torch.ones_like(s_lp) * b.completion_mask, state, grad_entropy=0.1 * b.completion_mask.float())
    out["stream/logp"], out["stream/grad"] = s_lp, model.lm_head.weight.grad.clone()
    rewards = [NamedReward("answer_match", answer_match), NamedReward("dpp", dpp, 0.5)]
    scores = score_completions(rewards, b.prompts, b.completions, b.columns(), group_ids=b.group_ids.tolist())
    out["reward/total"], out["reward/dpp"] = scores.total, scores.per_reward["dpp"]
    return out


def test_library_paths_create_no_tensor_without_a_device(meta_default):
    got = _library_paths(*_cpu_model())
    torch.set_default_device("cpu")
    expected = _library_paths(*_cpu_model())
    assert got.keys() == expected.keys()
    for key, value in got.items():
        assert value.device == torch.device("cpu"), key
        torch.testing.assert_close(value, expected[key], rtol=0, atol=0, msg=key)


def test_the_recorder_finds_no_implicit_factory_in_the_library():
    model, tok = _cpu_model()
    with FactoryRecorder() as rec:
        _library_paths(model, tok)
    assert not rec.hits, "tensors created without a device: " + ", ".join(
        f"{Path(f).relative_to(LIBRARY)}:{line} torch.{name}" for f, line, name in sorted(rec.hits)
    )
    # transformers' tokenizer creates its tensors without a device (hence CpuTokenizer); its model forward does not
    assert {Path(f).name for f, _, _ in rec.elsewhere} <= {"tokenization_utils_base.py"}
