"""Where a run's tensors live: ``model.device`` and ``model.dtype`` resolved once, checked, applied.

Every tensor the library creates is created on the device of the data it belongs to
(``device=x.device``, ``x.new_*``, ``*_like``); this module only turns the two config strings
into a ``torch.device`` / ``torch.dtype`` with one-line errors naming the field, and places the
model. Rewards are plain Python on CPU; their score tensors are created on CPU explicitly and the
trainer moves them to the batch's device. CPU-only speed-ups (oneDNN-packed decoding, malloc_trim,
the MKL-on-AMD shim) test :func:`is_cpu` on the policy's device before they run.
"""

from __future__ import annotations

import re
from typing import Optional, Union

import torch

DEVICE_SPECS = "auto, cpu, cuda or cuda:N"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SPEC = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")

DeviceLike = Union[torch.device, str]


class DeviceError(ValueError):
    """``model.device`` / ``model.dtype`` asks for what this machine cannot do; one line naming the field."""


def _cuda_devices() -> str:
    n = torch.cuda.device_count()
    if n == 0:
        return "no CUDA device"
    names = ", ".join(f"cuda:{i}" for i in range(n))
    return f"{n} CUDA device{'s' if n > 1 else ''} ({names})"


def resolve_device(spec: str) -> torch.device:
    """The ``torch.device`` of ``model.device``: ``auto`` is the current CUDA device when there is one, else cpu.

    ``cuda`` without an index is the current CUDA device (``cuda:LOCAL_RANK`` once a torchrun learner
    called ``torch.cuda.set_device``), always returned with its index so devices compare equal.
    """
    text = str(spec).strip().lower()
    match = _SPEC.match(text)
    if match is None or (match.group(1) != "cuda" and match.group(2) is not None):
        raise DeviceError(f"model.device: {spec!r} is not a device: set model.device to {DEVICE_SPECS}")
    kind, index = match.group(1), match.group(2)
    if kind == "cpu" or (kind == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceError(
            f"model.device: {spec!r} was asked but torch.cuda.is_available() is False on this machine "
            f"(torch {torch.__version__}): set model.device=cpu (or auto)"
        )
    if index is None:
        return torch.device("cuda", torch.cuda.current_device())
    if int(index) >= torch.cuda.device_count():
        raise DeviceError(
            f"model.device: {spec!r} was asked but this machine has {_cuda_devices()}: "
            f"set model.device=cuda:0 (or auto)"
        )
    return torch.device("cuda", int(index))


def resolve_dtype(name: str, device: DeviceLike) -> torch.dtype:
    """The ``torch.dtype`` of ``model.dtype`` on ``device``; float16 needs CUDA, bfloat16 a GPU that has it."""
    if name not in DTYPES:
        raise DeviceError(f"model.dtype: {name!r} is not a dtype: set model.dtype to one of {', '.join(DTYPES)}")
    dtype, device = DTYPES[name], torch.device(device)
    if dtype is torch.float16 and device.type == "cpu":
        raise DeviceError(
            "model.dtype: 'float16' was asked with the model on cpu, where float16 matmuls are emulated "
            "and its training has no loss scaling: set model.dtype=float32 or bfloat16 (or model.device=cuda)"
        )
    if dtype is torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise DeviceError(
            f"model.dtype: 'bfloat16' was asked but {device} ({torch.cuda.get_device_name(device)}) "
            "has no bfloat16 support: set model.dtype=float16 or float32"
        )
    return dtype


def is_cpu(device: DeviceLike) -> bool:
    """Whether ``device`` is the CPU: the gate of every CPU-only fast path."""
    return torch.device(device).type == "cpu"


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of ``module``'s first parameter (or buffer); cpu for a module that has neither."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device("cpu")


def place_model(model: torch.nn.Module, device: DeviceLike, dtype: Optional[torch.dtype] = None) -> torch.nn.Module:
    """``model`` moved to ``device`` (and cast to ``dtype`` when given), in place; returns it.

    Parameters keep their identity (``nn.Module.to``), so an optimizer built before still holds them.
    """
    return model.to(device=torch.device(device), dtype=dtype) if dtype is not None else model.to(torch.device(device))
