"""SHARDCAST: versioned, checksummed weight broadcast from the learner to rollout workers.

INTELLECT-2 (arXiv 2505.07291, §2, Training Infrastructure) shards each checkpoint, serves the
shards over a tree of HTTP relays, and has every inference worker verify a SHA-256 checksum before
it switches to the new version. Here the relay tree is Ray's object store: the learner
``ray.put``s each shard and publishes a :class:`Manifest`
``{version, shards: [(ref, sha256, nbytes)]}``; a worker loads a version only when every shard
verifies, and otherwise keeps its old weights (and reports the old version with its batches, so
the learner's staleness bound still holds).

What is broadcast: the full ``state_dict`` of a full fine-tune, or only the LoRA adapter
weights when the model has ``peft_config`` (the frozen base is loaded by each worker from
``model.name``). The pure parts — split, serialise, verify, assemble — need no Ray.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

log = logging.getLogger(__name__)

MiB = 1024 * 1024


class ShardChecksumError(RuntimeError):
    """A shard's bytes do not match the manifest's SHA-256 / size: the version is refused."""


@dataclass
class ShardInfo:
    """One shard of a version: where it is (an ObjectRef, or the bytes themselves off Ray) and its checksum."""

    ref: Any
    sha256: str
    nbytes: int


@dataclass
class Manifest:
    """A published weight version: its learner step and its shards, in order."""

    version: int
    shards: list[ShardInfo] = field(default_factory=list)
    adapter_only: bool = False


def trainable_state(model: torch.nn.Module, full: Optional[dict[str, torch.Tensor]] = None) -> tuple[dict[str, torch.Tensor], bool]:
    """(detached CPU copy of what workers need, adapter_only): LoRA weights only for PEFT models.

    ``full``: the model's whole state dict when ``model.state_dict()`` would give shards (a sharded
    learner gathers it first, :func:`grpokit.distributed.fsdp.full_state_dict`).
    """
    if hasattr(model, "peft_config"):
        from peft import get_peft_model_state_dict

        state, adapter_only = get_peft_model_state_dict(model, state_dict=full), True
    else:
        state, adapter_only = (model.state_dict() if full is None else full), False
    # clone: the optimizer updates the live tensors in place, and tied weights must not share storage
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}, adapter_only


def split_state(state: dict[str, torch.Tensor], shard_mb: float) -> list[dict[str, torch.Tensor]]:
    """Group tensors, in key order, into shards of about ``shard_mb`` MiB.

    A tensor is never split, so a tensor larger than ``shard_mb`` is a shard of its own.
    """
    limit = max(1, int(shard_mb * MiB))
    shards: list[dict[str, torch.Tensor]] = []
    current: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > limit:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensor
        size += nbytes
    if current or not shards:
        shards.append(current)
    return shards


def serialise_shard(tensors: dict[str, torch.Tensor]) -> bytes:
    """The safetensors bytes of one shard."""
    from safetensors.torch import save

    return save(tensors)


def checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verify_shard(data: bytes, info: ShardInfo, version: int, index: int) -> None:
    """Raise :class:`ShardChecksumError` unless ``data`` has the manifest's size and SHA-256."""
    if len(data) != info.nbytes or checksum(data) != info.sha256:
        raise ShardChecksumError(
            f"SHARDCAST: shard {index} of weight version {version} fails its sha256 check "
            f"({len(data)} bytes, expected {info.nbytes}): the version is refused"
        )


def assemble(blobs: list[bytes]) -> dict[str, torch.Tensor]:
    """The state dict of a version from its verified shard bytes."""
    from safetensors.torch import load

    state: dict[str, torch.Tensor] = {}
    for blob in blobs:
        state.update(load(blob))
    return state


def build_manifest(
    state: dict[str, torch.Tensor], version: int, shard_mb: float, *, adapter_only: bool = False,
    put: Callable[[bytes], Any] = lambda data: data,
) -> Manifest:
    """Shard, serialise and checksum ``state``; ``put`` stores each shard (``ray.put`` on a cluster)."""
    shards = []
    for tensors in split_state(state, shard_mb):
        data = serialise_shard(tensors)
        shards.append(ShardInfo(ref=put(data), sha256=checksum(data), nbytes=len(data)))
    return Manifest(version=version, shards=shards, adapter_only=adapter_only)


def fetch_state(manifest: Manifest, get: Callable[[list[Any]], list[bytes]] = lambda refs: list(refs)) -> dict[str, torch.Tensor]:
    """Download (``get``: ``ray.get`` on a cluster) and verify every shard, then assemble the state dict."""
    blobs = get([s.ref for s in manifest.shards])
    for i, (blob, info) in enumerate(zip(blobs, manifest.shards)):
        verify_shard(blob, info, manifest.version, i)
    return assemble(blobs)


def load_into(model: torch.nn.Module, state: dict[str, torch.Tensor], adapter_only: bool) -> None:
    """Copy a broadcast state into ``model`` (the LoRA adapter, or every weight)."""
    if adapter_only:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state)
        return
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise RuntimeError(f"SHARDCAST: broadcast weights do not fit the worker's model (missing {missing[:3]}, unexpected {unexpected[:3]})")


class WeightReceiver:
    """A worker's side of SHARDCAST: the version it holds, and switching only to verified versions."""

    def __init__(self, model: torch.nn.Module, get: Callable[[list[Any]], list[bytes]] = lambda refs: list(refs)) -> None:
        self.model = model
        self.get = get
        self.version = -1  # the weights the worker was loaded with, before any broadcast
        self.refused: list[int] = []

    def update(self, manifest: Optional[Manifest]) -> int:
        """Load ``manifest`` if it is newer and verifies; return the version now held.

        A version whose shards fail the checksum is refused (logged, remembered in
        ``refused``, never retried) and the old weights stay.
        """
        if manifest is None or manifest.version <= self.version or manifest.version in self.refused:
            return self.version
        try:
            state = fetch_state(manifest, self.get)
        except ShardChecksumError as exc:
            log.warning("%s; keeping weight version %d", exc, self.version)
            self.refused.append(manifest.version)
            return self.version
        load_into(self.model, state, manifest.adapter_only)
        self.version = manifest.version
        return self.version
