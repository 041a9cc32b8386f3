"""Checkpoints in Hugging Face format plus everything needed to resume exactly.

Layout of ``<output_dir>/checkpoints/step-<N>/``: the model (``save_pretrained``: full weights,
or the LoRA adapter), the tokenizer, ``optimizer.pt``, ``scheduler.pt`` and ``trainer_state.json``
(step, data position, RNG states, extra state). A sharded (FSDP) run writes ``dcp/`` instead of
``optimizer.pt``: its model and optimizer state as ``torch.distributed.checkpoint`` shards, next to
the gathered full weights (``grpokit.distributed.fsdp``). Written to a temporary folder and renamed, so
a crash never leaves a half-written checkpoint; a disk that fills or a file damaged later still
can, so resuming checks each checkpoint (``checkpoint_problem``) and takes the newest complete one.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
from pathlib import Path
from typing import Any, Optional

import torch

log = logging.getLogger(__name__)

STATE_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "rng.pt")  # what resuming reads besides weights
SHARDS = "dcp"  # a sharded run's model + optimizer state (torch.distributed.checkpoint); replaces optimizer.pt
_warned: set[tuple[Path, Path]] = set()  # (skipped, used): the CLI and Trainer.resume both check; warn once


class CheckpointError(ValueError):
    """No complete checkpoint to resume from; one line naming the folder, what is wrong and what to do."""


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
    processors: tuple = (),
    state_dict: Optional[dict[str, torch.Tensor]] = None,
    shards: Optional[Path] = None,
) -> Path:
    """Save step ``step`` and delete all but the ``keep`` most recent checkpoints.

    ``processors``: more ``save_pretrained`` objects the folder needs to load as a model (a
    vision-language policy's image processor). A LoRA adapter's base model is recorded by the name
    that loads it on any machine (the embedded name, the Hub id), not by the cache folder of this
    one that peft would write (``grpokit.model.lora.make_adapter_portable``). ``state_dict``: the
    weights to write instead of the model's own (a sharded model's gathered full weights);
    ``shards``: a folder of model + optimizer shards moved in as ``dcp/`` (then no ``optimizer.pt``).
    """
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / f"step-{step}"
    tmp = ckpt_root / f".tmp-step-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if merged and hasattr(model, "merge_and_unload"):
        # Merge a copy so the live adapter keeps training.
        import copy

        copy.deepcopy(model).merge_and_unload().save_pretrained(tmp / "merged")
    model.save_pretrained(tmp, state_dict=state_dict)
    if (tmp / "adapter_config.json").is_file():
        from grpokit.model.lora import make_adapter_portable

        make_adapter_portable(tmp)
    tokenizer.save_pretrained(tmp)
    for processor in processors:
        processor.save_pretrained(tmp)
    if shards is not None:
        shutil.move(str(shards), str(tmp / SHARDS))
    else:
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


def _step_folders(ckpt_root: Path) -> list[Path]:
    """``step-<N>`` folders under ``ckpt_root`` (complete or not), oldest first."""
    if not ckpt_root.is_dir():
        return []
    found = [p for p in ckpt_root.iterdir() if p.is_dir() and re.fullmatch(r"step-\d+", p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    """Saved checkpoints (renamed into place: they hold trainer_state.json), oldest first; not validated."""
    return [p for p in _step_folders(ckpt_root) if (p / "trainer_state.json").is_file()]


def _weight_files(ckpt: Path) -> tuple[list[Path], list[str]]:
    """(weight files present, weight files missing) of ``ckpt``: the LoRA adapter, or the (sharded) model."""
    if (ckpt / "adapter_model.safetensors").is_file():
        return [ckpt / "adapter_model.safetensors"], []
    index = ckpt / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError):
            return [], [f"{index.name} (unreadable)"]
        return [ckpt / s for s in shards if (ckpt / s).is_file()], [s for s in shards if not (ckpt / s).is_file()]
    found = sorted(ckpt.glob("model*.safetensors"))
    return found, [] if found else ["model.safetensors"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:120] if text else ''}"


def checkpoint_problem(ckpt: Path) -> Optional[str]:
    """What makes ``ckpt`` unusable for resuming, e.g. ``model.safetensors unreadable (...)``; None = complete.

    Checks what ``Trainer.resume`` reads: every file present, each safetensors header readable
    (``safe_open``), trainer_state.json parseable with its step and data position, and the
    ``torch.save`` files loadable (memory-mapped: their structure is read, not their tensors).
    """
    weights, missing = _weight_files(ckpt)
    sharded = (ckpt / SHARDS).is_dir()
    missing += [f for f in STATE_FILES if not (ckpt / f).is_file() and not (sharded and f == "optimizer.pt")]
    if sharded and not (ckpt / SHARDS / ".metadata").is_file():  # DCP's index, written after every shard
        missing.append(f"{SHARDS}/.metadata")
    if missing:
        return f"missing {', '.join(missing)}"
    from safetensors import safe_open

    for f in weights:
        try:
            with safe_open(str(f), framework="pt") as st:
                st.keys()
        except Exception as exc:  # safetensors raises its own SafetensorError (and OSError)
            return f"{f.name} unreadable ({_first_line(exc)})"
    try:
        state = json.loads((ckpt / "trainer_state.json").read_text())
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return f"trainer_state.json unreadable ({_first_line(exc)})"
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) or "sampler" not in state:
        return "trainer_state.json lacks its step or data position"
    for name in ("optimizer.pt", "scheduler.pt", "rng.pt", "extra.pt"):
        if name in ("extra.pt", "optimizer.pt") and not (ckpt / name).is_file():
            continue  # only runs with stateful algorithm parts write extra.pt; sharded runs keep the optimizer in dcp/
        try:
            torch.load(ckpt / name, mmap=True, weights_only=False)
        except Exception as exc:  # torch.load raises RuntimeError, EOFError, pickle errors, ...
            return f"{name} unreadable ({_first_line(exc)})"
    return None


def _scan(ckpt_root: Path) -> tuple[Optional[Path], list[str]]:
    """(newest complete checkpoint or None, ``"step-N is incomplete: why"`` for each newer one)."""
    skipped: list[tuple[Path, str]] = []
    for ckpt in reversed(_step_folders(ckpt_root)):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            for bad, why in skipped:
                if (bad, ckpt) not in _warned:
                    _warned.add((bad, ckpt))
                    log.warning("%s is incomplete: %s; resuming from the older %s", bad, why, ckpt)
            break
        skipped.append((ckpt, problem))
    else:
        ckpt = None
    return ckpt, [f"{bad.name} is incomplete: {why}" for bad, why in skipped]


def latest_checkpoint(ckpt_root: Path) -> Optional[Path]:
    """The newest complete checkpoint under ``ckpt_root`` (a warning names each newer incomplete one), or None."""
    return _scan(ckpt_root)[0]


def require_checkpoint(ckpt_root: Path) -> Path:
    """The checkpoint ``--resume`` continues from: the newest complete one; CheckpointError when there is none."""
    ckpt, skipped = _scan(ckpt_root)
    if ckpt is None:
        raise CheckpointError(
            f"cannot resume: no complete checkpoint in '{ckpt_root}' ({'; '.join(skipped) or 'none found'}); "
            "drop --resume to start a fresh run there, or point logging.output_dir at the run to continue"
        )
    return ckpt


def model_source(text: str) -> str:
    """A model source with a grpokit run folder resolved to its newest complete checkpoint.

    ``runs/demo`` (a folder holding ``checkpoints/``) becomes ``runs/demo/checkpoints/step-N``;
    anything else (an embedded name, a model folder, a .gguf file) is returned unchanged.
    CheckpointError when the run folder holds no complete checkpoint.
    """
    root = Path(text).expanduser() / "checkpoints"
    if not root.is_dir():
        return text
    ckpt, skipped = _scan(root)
    if ckpt is None:
        raise CheckpointError(f"'{text}' is a run folder without a complete checkpoint ({'; '.join(skipped) or 'none found'}): finish or rerun that training first")
    return str(ckpt)


def family_folder(name: str, accepts: Any) -> Optional[Path]:
    """The model folder behind ``name`` (a folder, or a grpokit run folder's newest checkpoint) when
    ``accepts(folder)`` says it holds that policy family's model, else None (not a path, or no checkpoint)."""
    if not Path(name).expanduser().exists():
        return None
    try:
        source = Path(model_source(name)).expanduser()
    except CheckpointError:
        return None
    return source if accepts(source) else None


def load_training_state(ckpt: Path, optimizer: Optional[torch.optim.Optimizer], scheduler: Any) -> dict[str, Any]:
    """Restore optimizer (None: loaded from the shards), scheduler and RNG from ``ckpt``; return trainer_state.json."""
    if optimizer is not None:
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
