"""Which ``model.name`` is a vision-language model, and loading one (model, tokenizer, processor).

A VLM is a local Hugging Face folder whose ``config.json`` has ``model_type`` ``qwen2_vl`` (the
family grpokit tests) or ``qwen2_5_vl`` (same processor and RoPE interface), a grpokit run
folder whose checkpoint is one, or the embedded name ``tiny-qwen2vl``: grpokit's tiny Qwen2-VL,
built and given its noisy prior by :mod:`grpokit.families.vision_lm.pretrain` on first use and cached under
the grpokit cache (the same seeded command rebuilds it on a fresh machine).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VISION_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
EMBEDDED_VISION = {"tiny-qwen2vl": "the tiny Qwen2-VL of grpokit.families.vision_lm (0.56 M params, noisy-prior pretrained here)"}


def _folder(name: str) -> Path | None:
    """The model folder behind ``name``: a folder or run folder, a Hub-layout folder or a Hub id in the local cache."""
    from grpokit.model.loading import resolve_model_name
    from grpokit.trainer.checkpoint import CheckpointError, model_source

    name = resolve_model_name(name) or name  # a Hub id / Hub-layout folder: its snapshot (nothing is downloaded)
    try:
        source = model_source(name)
    except CheckpointError:
        return None
    path = Path(source).expanduser()
    return path if (path / "config.json").is_file() else None


def is_vision_model(name: str) -> bool:
    """True for an embedded VLM name or a folder (run folder, Hub-layout folder, cached Hub id) whose config is a supported VLM."""
    if name in EMBEDDED_VISION:
        return True
    folder = _folder(name)
    if folder is None:
        return False
    try:
        return json.loads((folder / "config.json").read_text()).get("model_type") in VISION_MODEL_TYPES
    except (OSError, ValueError):
        return False


def resolve(name: str) -> Path:
    """The folder to load: an embedded VLM's cache (built on first use), else the folder or run checkpoint."""
    if name in EMBEDDED_VISION:
        from grpokit.families.vision_lm.pretrain import ensure_tiny_vlm

        return ensure_tiny_vlm()
    folder = _folder(name)
    if folder is None:
        raise ValueError(f"model.name '{name}' is not a model folder with config.json")
    return folder


def load_vision_model(name: str, dtype: str = "float32", device: Any = None, **processor_options: Any):
    """``(model, tokenizer, processor)`` of a Qwen2-VL folder; the tokenizer pads on the left."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from grpokit.families.vision_lm.processor import VisionProcessor

    from grpokit.model.fingerprint import log_fingerprint

    folder = resolve(name)
    log_fingerprint(folder, name)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch_dtype, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if device is not None:
        model.to(device)
    return model, tokenizer, VisionProcessor.from_pretrained(folder, tokenizer, **processor_options)
