"""Checkpoints in Hugging Face format plus everything needed to resume exactly.

Layout of ``<output_dir>/checkpoints/step-<N>/``: the model (``save_pretrained``: full weights,
or the LoRA adapter), the tokenizer, ``optimizer.pt``, ``scheduler.pt`` and ``trainer_state.json``
(step, data position, RNG states, extra state). Written to a temporary folder and renamed, so
a crash never leaves a half-written checkpoint.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any, Optional

import torch


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def save_checkpoint(
    ckpt_root: Path,
    step: int,
    *,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: dict[str, Any],
    keep: int = 2,
    merged: bool = False,
    extra: Optional[dict[str, Any]] = None,
) -> Path:
    """Save step ``step`` and delete all but the ``keep`` most recent checkpoints."""
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / f"step-{step}"
    tmp = ckpt_root / f".tmp-step-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if merged and hasattr(model, "merge_and_unload"):
        # Merge a copy so the live adapter keeps training.
        import copy

        copy.deepcopy(model).merge_and_unload().save_pretrained(tmp / "merged")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    if extra is not None:  # algorithm state (e.g. drpo's per-domain history)
        torch.save(extra, tmp / "extra.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **state}, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in list_checkpoints(ckpt_root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete checkpoints under ``ckpt_root``, oldest first."""
    if not ckpt_root.is_dir():
        return []
    found = [p for p in ckpt_root.glob("step-*") if (p / "trainer_state.json").is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(ckpt_root: Path) -> Optional[Path]:
    ckpts = list_checkpoints(ckpt_root)
    return ckpts[-1] if ckpts else None


def load_training_state(ckpt: Path, optimizer: torch.optim.Optimizer, scheduler: Any) -> dict[str, Any]:
    """Restore optimizer, scheduler and RNG from ``ckpt``; return trainer_state.json."""
    optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=False))
    set_rng_state(torch.load(ckpt / "rng.pt", weights_only=False))
    return json.loads((ckpt / "trainer_state.json").read_text())


def load_model_weights(model: torch.nn.Module, ckpt: Path) -> None:
    """Load the trainable weights saved in ``ckpt`` into ``model`` (full or LoRA)."""
    from safetensors.torch import load_file

    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(str(ckpt / "adapter_model.safetensors")))
        return
    state: dict[str, torch.Tensor] = {}
    for f in sorted(ckpt.glob("model*.safetensors")):
        state.update(load_file(str(f)))
    if not state:
        raise FileNotFoundError(f"checkpoint '{ckpt}' has no model*.safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {k for k in missing if k.endswith("lm_head.weight")}
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"checkpoint '{ckpt}' does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
