"""Which ``model.name`` is a flow-matching image model, loading one, and the load-time checks of a flow run.

A flow model is the embedded name ``tiny-flow`` (built and noisy-prior pretrained by
:mod:`grpokit.families.flow_matching.pretrain` on first use, cached), a folder holding grpokit's
``flow_config.json``, or a grpokit run folder whose newest checkpoint is one. Recognising the name
needs no diffusers; loading does, and without it the run stops at load time with the one-line
install hint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

EMBEDDED_FLOW = {"tiny-flow": "grpokit's tiny class-conditional UNet2DModel flow-matching image model (0.17 M params, noisy-prior pretrained here)"}


def _folder(name: str) -> Optional[Path]:
    from grpokit.families.flow_matching.model import is_flow_folder
    from grpokit.trainer.checkpoint import family_folder

    return family_folder(name, is_flow_folder)


def is_flow_model(name: str) -> bool:
    return name in EMBEDDED_FLOW or _folder(name) is not None


def diffusers_missing() -> bool:
    try:
        import diffusers  # noqa: F401
    except ImportError:
        return True
    return False


def load_flow_model(name: str, device: Any = None) -> tuple[Any, Any]:
    """``(TinyFlowModel, FlowConditions)`` of ``name``; the embedded model is built on first use."""
    from grpokit.families.flow_matching.model import FlowConditions, TinyFlowModel, require_diffusers

    require_diffusers()
    if name in EMBEDDED_FLOW:
        from grpokit.families.flow_matching.pretrain import ensure_tiny_flow

        folder = ensure_tiny_flow()
    else:
        folder = _folder(name)
        if folder is None:
            raise ValueError(f"model.name '{name}' is not a flow model folder (no flow_config.json)")
    model = TinyFlowModel.from_pretrained(folder)
    if device is not None:
        model.to(device)
    return model, FlowConditions(model.class_names)


def flow_problem(cfg: Any) -> Optional[str]:
    """Why a flow-matching run cannot be set up as configured (one line with the fix), or None."""
    from grpokit.families.flow_matching.model import INSTALL_HINT

    if diffusers_missing():
        return f"model.name '{cfg.model.name}': {INSTALL_HINT}"
    a = cfg.algorithm
    unsupported = [
        (cfg.rollout.backend != "hf", "rollout.backend", "set rollout.backend=hf"),
        (bool(cfg.environment.name), "environment.name", "episodes are text-only: set environment.name=null"),
        (cfg.train.sequence_chunk > 0, "train.sequence_chunk", "StreamBP is text-only: set train.sequence_chunk=0"),
        (cfg.distributed.rollout_workers > 0, "distributed.rollout_workers", "rollout workers sample text only: set distributed.rollout_workers=0"),
        (bool(cfg.model.teacher), "model.teacher", "the flow policy has no teacher role: set model.teacher=null"),
        (cfg.model.lora.enabled, "model.lora.enabled", "the tiny flow model trains all its weights: set model.lora.enabled=false"),
        (a.dynamic_sampling, "algorithm.dynamic_sampling", "refilled batches would drop the stored denoising states: set algorithm.dynamic_sampling=false"),
        (a.beta > 0, "algorithm.beta", "the per-step Gaussian KL (closed form, FlowMatchingPolicy.unit_kl) is not wired into the loss: set algorithm.beta=0"),
        (a.ratio != "token", "algorithm.ratio", "the units are denoising steps, each with its own ratio (Flow-GRPO): set algorithm.ratio=token"),
        (bool(a.plan_delimiter), "algorithm.plan_delimiter", "images have no text spans: set algorithm.plan_delimiter=null"),
        (cfg.verification.enabled, "verification.enabled", "self-verification is text-only: set verification.enabled=false"),
        (cfg.variational.enabled, "variational.enabled", "the variational posterior is text-only: set variational.enabled=false"),
        (a.overlong_cache > 0, "algorithm.overlong_cache", "images have no length: set algorithm.overlong_cache=0"),
    ]
    for bad, field, fix in unsupported:
        if bad:
            return f"{field} is not supported with the flow-matching image policy '{cfg.model.name}': {fix}"
    f = cfg.flow
    if int(f.train_fraction * f.steps + 1e-9) < 1:
        return f"flow.train_fraction={f.train_fraction} trains no step of flow.steps={f.steps}: raise one of them"
    return None


def flow_data_problem(cfg: Any, rows: list[dict]) -> Optional[str]:
    """Why the training rows cannot condition the flow policy (they need a ``class_id`` column), or None."""
    if not rows:
        return None
    missing = [i for i, row in enumerate(rows) if row.get("class_id") is None]
    if missing:
        return (f"training row {missing[0]} has no 'class_id' column, which the flow-matching image policy is conditioned on: "
                "use data.task=flow_images or give each row a class_id")
    return None
