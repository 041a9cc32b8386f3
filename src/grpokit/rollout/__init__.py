"""Sampling G completions per prompt."""

from __future__ import annotations

from typing import Any

import torch

from grpokit.config.schema import RolloutConfig
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import GenerationBackend, RolloutBatch, SamplingParams

__all__ = ["GenerationBackend", "HFBackend", "RolloutBatch", "SamplingParams", "make_backend"]

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def make_backend(cfg: RolloutConfig, model: torch.nn.Module, tokenizer: Any, *, seed: int = 0) -> GenerationBackend:
    """The generation backend of ``rollout.backend``: ``hf`` (in-process transformers) or ``vllm``.

    vLLM starts from the policy's Hugging Face folder (``model.name_or_path``, or
    ``rollout.backend_options.model``), in the policy's dtype, and receives its weights as they train.
    """
    if cfg.backend == "hf":
        if cfg.backend_options:
            raise ValueError(f"rollout.backend_options {sorted(cfg.backend_options)} are for rollout.backend=vllm; remove them")
        return HFBackend(model, tokenizer, fused_decode=cfg.fused_decode)
    from grpokit.rollout.vllm import VLLMBackend, import_vllm

    import_vllm()  # without vLLM, the install hint comes first
    options = dict(cfg.backend_options)
    path = options.pop("model", None) or getattr(model, "name_or_path", None)
    if not path:
        raise ValueError("rollout.backend=vllm needs the policy's Hugging Face folder: set rollout.backend_options.model")
    dtype = _DTYPES.get(next(model.parameters()).dtype, "auto")
    return VLLMBackend(model, tokenizer, str(path), dtype=options.pop("dtype", dtype), seed=seed, options=options)
