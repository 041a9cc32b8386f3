"""LoRA adapters through peft."""

from __future__ import annotations

import logging

import torch

from grpokit.config.schema import LoraConfig

log = logging.getLogger(__name__)


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
    missing = [m for m in cfg.target_modules if m not in present]
    if missing and list(cfg.target_modules) != LoraConfig().target_modules:
        # names the user chose that match nothing would silently get no adapter (a typo, another architecture's name)
        raise ValueError(f"model.lora.target_modules: {missing} match no module of this model: drop them or pick from "
                         f"e.g. {sorted(present)[:12]}")
    if missing:  # the default list names every projection of a Llama-style block; other models lack some
        log.info("LoRA adapters on %s (%s not in this model)", targets, missing)
    peft_cfg = PeftLoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets, task_type="CAUSAL_LM"
    )
    return get_peft_model(model, peft_cfg)
