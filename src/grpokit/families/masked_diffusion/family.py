"""The masked-diffusion LM family (LLaDA-style mask predictors; diffu-GRPO, ESPO, Mask-GRPO units)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from grpokit.families import FAMILIES, Claim, Family
from grpokit.families.masked_diffusion.checks import EMBEDDED_MDM, is_mdm_model
from grpokit.families.policy import Capabilities


class MaskedDiffusionFamily(Family):
    name = "masked_diffusion"
    description = ("masked-diffusion LM (LLaDA sampler), units by diffusion.likelihood: stand_in tokens (d1), espo_elbo "
                   "sequence (ESPO), mask_grpo_step steps: tiny-mdm or an MDM folder")
    sections = ("diffusion",)
    embedded = EMBEDDED_MDM

    def claim(self, model_name: str) -> Claim:
        return Claim.SPECIFIC if is_mdm_model(model_name) else Claim.NO

    def claim_model(self, model: torch.nn.Module, tokenizer: Any) -> Claim:
        from grpokit.families.masked_diffusion.model import MDMTokenizer

        return Claim.SPECIFIC if isinstance(tokenizer, MDMTokenizer) else Claim.NO

    def capabilities(self, cfg: Any) -> Capabilities:
        from grpokit.families.masked_diffusion.policy import MaskedDiffusionPolicy

        return MaskedDiffusionPolicy.capabilities_for(cfg.diffusion.likelihood)

    def config_problem(self, cfg: Any) -> Optional[str]:
        from grpokit.families.masked_diffusion.checks import mdm_problem

        return mdm_problem(cfg)

    def load(self, cfg: Any, device: torch.device) -> tuple[torch.nn.Module, Any]:
        from grpokit.families.masked_diffusion.checks import resolve
        from grpokit.families.masked_diffusion.model import load_mdm

        return load_mdm(resolve(cfg.model.name), device=device)

    def build_policy(self, cfg: Any, model: torch.nn.Module, tokenizer: Any, *, reference: Optional[torch.nn.Module],
                     needs_ref: bool, needs_teacher: bool, learners: Any):
        """The :class:`~grpokit.families.masked_diffusion.policy.MaskedDiffusionPolicy` (sampler and likelihood from ``diffusion``)."""
        from grpokit.families.masked_diffusion.policy import MaskedDiffusionPolicy
        from grpokit.families.masked_diffusion.sampler import SamplerOptions

        d = cfg.diffusion
        options = SamplerOptions(steps=d.steps, block_length=d.block_length, temperature=cfg.rollout.temperature, remasking=d.remasking)
        return MaskedDiffusionPolicy(
            model, tokenizer, options, likelihood=d.likelihood, likelihood_options=d.likelihood_options,
            reference=reference, use_reference=needs_ref, seed=cfg.train.seed,
            temperature=cfg.rollout.temperature if cfg.model.temperature_in_logprobs else 1.0,
        )


FAMILY = FAMILIES.register(MaskedDiffusionFamily())
