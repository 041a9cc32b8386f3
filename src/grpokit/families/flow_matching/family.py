"""The flow-matching image family (Flow-GRPO, Pref-GRPO / DPP-GRPO image presets): UNet velocity field, SDE sampler."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch

from grpokit.families import FAMILIES, Claim, Family
from grpokit.families.flow_matching.loading import EMBEDDED_FLOW, is_flow_model
from grpokit.families.policy import Capabilities


class FlowMatchingFamily(Family):
    name = "flow_matching"
    description = "flow-matching image model (Flow-GRPO SDE sampler), units = denoising steps: tiny-flow or a flow folder"
    sections = ("flow",)
    embedded = EMBEDDED_FLOW

    def claim(self, model_name: str) -> Claim:
        return Claim.SPECIFIC if is_flow_model(model_name) else Claim.NO

    def claim_model(self, model: torch.nn.Module, tokenizer: Any) -> Claim:
        return Claim.SPECIFIC if getattr(model, "grpokit_family", None) == "flow" else Claim.NO

    def capabilities(self, cfg: Any) -> Capabilities:
        from grpokit.families.flow_matching.policy import FlowMatchingPolicy

        return FlowMatchingPolicy.capabilities_for()

    def requirement_problem(self, cfg: Any) -> Optional[str]:
        from grpokit.families.flow_matching.loading import flow_problem

        return flow_problem(cfg)  # without diffusers: the one-line install hint, before any other check

    def data_problem(self, cfg: Any, rows: list[dict], needs: set[str]) -> Optional[str]:
        from grpokit.families.flow_matching.loading import flow_data_problem

        return flow_data_problem(cfg, rows)

    def load(self, cfg: Any, device: torch.device) -> tuple[torch.nn.Module, Any]:
        from grpokit.families.flow_matching.loading import load_flow_model

        return load_flow_model(cfg.model.name, device=device)  # its "tokenizer" is the condition names

    def build_policy(self, cfg: Any, model: torch.nn.Module, tokenizer: Any, *, reference: Optional[torch.nn.Module],
                     needs_ref: bool, needs_teacher: bool, learners: Any):
        from grpokit.families.flow_matching.policy import FlowMatchingPolicy, FlowSettings

        settings = FlowSettings(**dataclasses.asdict(cfg.flow))
        return FlowMatchingPolicy(model, settings, reference=reference, seed=cfg.train.seed)


FAMILY = FAMILIES.register(FlowMatchingFamily())
