"""Co-GRPO's image-token family: the 8x8 palette mask predictor trained with its inference schedule."""

from __future__ import annotations

from typing import Any, Optional

import torch

from grpokit.families import FAMILIES, Claim, Family
from grpokit.families.palette.policy import EMBEDDED_PALETTE, is_palette_model
from grpokit.families.policy import Capabilities


class PaletteFamily(Family):
    name = "palette"
    description = ("Co-GRPO: 8x8 palette image tokens + a learned inference schedule, units = MaskGIT steps and schedule "
                   "actions: tiny-palette-mdm")
    sections = ("diffusion",)
    embedded = EMBEDDED_PALETTE

    def claim(self, model_name: str) -> Claim:
        return Claim.SPECIFIC if is_palette_model(model_name) else Claim.NO

    def claim_model(self, model: torch.nn.Module, tokenizer: Any) -> Claim:
        from grpokit.families.palette.images import PaletteTokenizer

        return Claim.SPECIFIC if isinstance(tokenizer, PaletteTokenizer) else Claim.NO

    def capabilities(self, cfg: Any) -> Capabilities:
        from grpokit.families.palette.policy import CoGRPOPolicy

        return CoGRPOPolicy.capabilities_for()

    def config_problem(self, cfg: Any) -> Optional[str]:
        from grpokit.families.masked_diffusion.checks import mdm_problem

        return mdm_problem(cfg)  # the masked-diffusion checks, with Co-GRPO's own branch

    def load(self, cfg: Any, device: torch.device) -> tuple[torch.nn.Module, Any]:
        from grpokit.families.palette.policy import load_cogrpo

        d = cfg.diffusion
        return load_cogrpo(cfg.model.name, d.steps or 8, tuple(d.schedule_knobs), d.schedule_std, d.schedule_lr_scale, device=device)

    def build_policy(self, cfg: Any, model: torch.nn.Module, tokenizer: Any, *, reference: Optional[torch.nn.Module],
                     needs_ref: bool, needs_teacher: bool, learners: Any):
        from grpokit.families.palette.policy import CoGRPOPolicy

        return CoGRPOPolicy(model, tokenizer, reference=reference, seed=cfg.train.seed, use_reference=needs_ref)


FAMILY = FAMILIES.register(PaletteFamily())
