"""LoRA adapters through peft."""

from __future__ import annotations

import torch

from grpokit.config.schema import LoraConfig


def apply_lora(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """Wrap ``model`` with trainable LoRA adapters on ``cfg.target_modules`` (others frozen)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    present = {name.split(".")[-1] for name, _ in model.named_modules()}
    targets = [m for m in cfg.target_modules if m in present]
    if not targets:
        raise ValueError(
            f"model.lora.target_modules {cfg.target_modules} match no module of this model; "
            f"pick from e.g. {sorted(present)[:12]}"
        )
    peft_cfg = PeftLoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets, task_type="CAUSAL_LM"
    )
    return get_peft_model(model, peft_cfg)
