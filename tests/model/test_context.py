"""context_length: what the model states (GGUF metadata, config.json), with no model cache and no tokenizer."""

import numpy as np
import pytest

from grpokit.model.context import context_length
from grpokit.model.loading import ModelLoadError


def _gguf(path, arch, context=None):
    """A GGUF with only metadata and one 1-element tensor, written by the gguf package's own writer."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), arch)
    if context is not None:
        writer.add_context_length(context)
    writer.add_tensor("token_embd.weight", np.zeros((1, 1), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_embedded_model_limit_comes_from_its_gguf_with_an_empty_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("GRPOKIT_CACHE", str(cache))
    # SmolLM2-135M-Instruct's GGUF metadata: general.architecture = llama, llama.context_length = 8192
    assert context_length("smollm2-135m-instruct") == 8192
    assert not cache.exists()  # read from the package's GGUF; no model cache built or needed


def test_gguf_key_follows_its_architecture(tmp_path):
    assert context_length(_gguf(tmp_path / "q.gguf", "qwen2", 4096)) == 4096  # qwen2.context_length
    assert context_length(_gguf(tmp_path / "none.gguf", "qwen2")) is None  # states no length: no limit


def test_hf_folder_limit_is_its_config(tmp_path):
    from transformers import GPT2Config

    from grpokit.testing import save_tiny_model

    assert context_length(save_tiny_model(tmp_path / "llama")) == 1024  # LlamaConfig(max_position_embeddings=1024)
    GPT2Config(n_positions=256, n_layer=1, n_embd=8, n_head=2).save_pretrained(tmp_path / "gpt2")
    assert context_length(tmp_path / "gpt2") == 256  # GPT-2 names it n_positions; AutoConfig maps it


def test_unreadable_gguf_is_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelLoadError) as err:
        context_length(bad)
    assert "cannot read the GGUF metadata of" in str(err.value) and "\n" not in str(err.value)
