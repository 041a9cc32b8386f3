"""Load-time checks of a run with images or video: one line naming the field (or row and column) and the fix."""

from __future__ import annotations

from typing import Optional

from grpokit.config.schema import Config
from grpokit.data.chat import is_visual


def vision_problem(cfg: Config) -> Optional[str]:
    """Why a vision-language run cannot be set up as configured, or None."""
    unsupported = [
        (cfg.rollout.backend != "hf", f"rollout.backend={cfg.rollout.backend}", "set rollout.backend=hf"),
        (bool(cfg.environment.name), "environment.name", "multi-turn episodes are text-only: set environment.name=null"),
        (cfg.train.sequence_chunk > 0, "train.sequence_chunk", "StreamBP is text-only: set train.sequence_chunk=0"),
        (cfg.distributed.rollout_workers > 0, "distributed.rollout_workers", "rollout workers sample text only: set distributed.rollout_workers=0"),
        (bool(cfg.model.teacher), "model.teacher", "the vision-language policy has no teacher role: set model.teacher=null"),
    ]
    for bad, field, fix in unsupported:
        if bad:
            return f"{field} is not supported with the vision-language policy '{cfg.model.name}': {fix}"
    if cfg.algorithm.loss == "papo" and cfg.algorithm.loss_options.get("aux_grad"):
        return ("algorithm.loss_options.aux_grad=true: the masked-image pass is scored once without gradient before the "
                "update (the PAPO authors' default); set aux_grad=false")
    return None


def data_problem(cfg: Config, rows: list[dict], needs_aux: bool) -> Optional[str]:
    """Why the training rows cannot feed the run's policy and method, or None (rows are checked, not loaded)."""
    visual = [i for i, row in enumerate(rows) if is_visual(row)]
    if needs_aux and not visual:
        return (f"algorithm.loss '{cfg.algorithm.loss}' needs rows with images or video (its perception term compares "
                "the original and the masked image), and no training row has an 'images' or 'video' column")
    return None
