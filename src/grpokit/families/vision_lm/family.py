"""The vision-language family: Qwen2-VL-style models over images and video (PAPO, DeepVideo-R1)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from grpokit.families import FAMILIES, Claim, Family
from grpokit.families.causal_lm.family import sequence_kl_problem
from grpokit.families.policy import Capabilities
from grpokit.families.vision_lm.loading import EMBEDDED_VISION, VISION_MODEL_TYPES, is_vision_model


class VisionLMFamily(Family):
    name = "vision_lm"
    description = "Qwen2-VL, units = tokens conditioned on images / video: tiny-qwen2vl or a Qwen2-VL folder"
    sections = ("vision",)
    embedded = EMBEDDED_VISION

    def claim(self, model_name: str) -> Claim:
        return Claim.SPECIFIC if is_vision_model(model_name) else Claim.NO

    def claim_model(self, model: torch.nn.Module, tokenizer: Any) -> Claim:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        return Claim.SPECIFIC if getattr(getattr(base, "config", None), "model_type", None) in VISION_MODEL_TYPES else Claim.NO

    def capabilities(self, cfg: Any) -> Capabilities:
        from grpokit.families.vision_lm.policy import VisionLMPolicy

        return VisionLMPolicy.capabilities_for()

    def config_problem(self, cfg: Any) -> Optional[str]:
        from grpokit.families.vision_lm.checks import vision_problem

        return vision_problem(cfg) or sequence_kl_problem(cfg)

    def data_problem(self, cfg: Any, rows: list[dict], needs: set[str]) -> Optional[str]:
        from grpokit.families.vision_lm.checks import data_problem

        return data_problem(cfg, rows, "aux_logp" in needs)

    def load(self, cfg: Any, device: torch.device) -> tuple[torch.nn.Module, Any]:
        from grpokit.families.vision_lm.loading import load_vision_model
        from grpokit.model.lora import apply_lora

        model, tokenizer, _ = load_vision_model(cfg.model.name, dtype=cfg.model.dtype, device=device)
        return (apply_lora(model, cfg.model.lora) if cfg.model.lora.enabled else model), tokenizer

    def build_policy(self, cfg: Any, model: torch.nn.Module, tokenizer: Any, *, reference: Optional[torch.nn.Module],
                     needs_ref: bool, needs_teacher: bool, learners: Any):
        """The :class:`~grpokit.families.vision_lm.policy.VisionLMPolicy` (processor from ``model.name``'s folder)."""
        from grpokit.families.vision_lm.loading import resolve
        from grpokit.families.vision_lm.policy import VisionLMPolicy
        from grpokit.families.vision_lm.processor import VisionProcessor

        v = cfg.vision
        processor = VisionProcessor.from_pretrained(resolve(cfg.model.name), tokenizer, too_large=v.too_large)
        return VisionLMPolicy(
            model, tokenizer, processor, reference=reference, use_reference=needs_ref,
            temperature=cfg.rollout.temperature if cfg.model.temperature_in_logprobs else 1.0,
            mask_probability=v.mask_probability, seed=cfg.train.seed, min_frames=v.min_frames,
        )

    def checkpoint_extras(self, policy: Any) -> tuple:
        return (policy.processor.image_processor,)


FAMILY = FAMILIES.register(VisionLMFamily())
