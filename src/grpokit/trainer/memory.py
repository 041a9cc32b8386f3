"""Keep the process's resident memory close to what its live tensors need (glibc malloc).

PyTorch's CPU allocator takes every tensor from ``malloc``. glibc serves blocks above a
*dynamic* mmap threshold with ``mmap`` (returned to the OS on free) but raises that threshold
up to 32 MiB each time such a block is freed, after which the learner's activations (most of
them 0.1-30 MiB) come from the heap, where freed blocks stay resident between phases.

* :func:`configure_cpu_memory` applies ``train.cpu_memory``. ``release`` (the default):
  :func:`release_free_memory` (``malloc_trim``) hands freed heap pages back after sampling and
  after learning; measured on the benchmark step (SmolLM2-135M, 32 x 64 tokens, AMD EPYC): RSS
  between steps 1.96 GiB instead of 2.4-3.2 GiB. Every page handed back is faulted in again by
  the next step. ``reuse``: freed memory stays in the process for the next step's tensors (trim
  threshold at its maximum, mmap threshold fixed at glibc's 32 MiB cap, no ``malloc_trim``).
  On the efficacy study's demo step (Intel Xeon, 2 threads, 8 steps,
  ``benchmarks/step_arms.py --compare cpu_memory``): 577k -> 241k minor faults and 1.28 -> 0.74
  system seconds a step, steps 5.65 -> 5.49 s (1.03x), peak RSS 3.27 -> 3.51 GB (1.07x). The
  gradient block (:func:`allocate_gradients`, freed by ``zero_grad``) is still mapped afresh
  each step (~135k of the remaining faults).
* :func:`tune_malloc` fixes both thresholds at 1 MiB so every large tensor is ``mmap``-ed and
  unmapped. It is **opt-in** (``GRPOKIT_MALLOC_TUNING=1``): it barely lowers the *peak*
  (3383 vs 3406 MiB) and the page faults of fresh mappings cost ~20% of the step (73 s vs 57 s,
  system time x3) on this 2-core machine.

Both are CPU-only: given the policy's device (``device=``), they do nothing off the CPU, where the
activations live in the accelerator's caching allocator and the host heap is small.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os

import torch

from grpokit.devices import DeviceLike, is_cpu

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's mallopt refuses a larger mmap threshold on 64-bit (HEAP_MAX_SIZE / 2)
_RELEASE = True  # train.cpu_memory of the last configured run: hand freed pages back (release) or keep them (reuse)


@functools.lru_cache(maxsize=1)
def _libc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc (macOS, musl without the symbols, Windows)
        return None


def tune_malloc(threshold_bytes: int = 1 << 20, *, device: DeviceLike = "cpu") -> bool:
    """Fix glibc's mmap and trim thresholds when ``GRPOKIT_MALLOC_TUNING=1`` on CPU; else (or not glibc) False."""
    if os.environ.get("GRPOKIT_MALLOC_TUNING", "0") != "1" or not is_cpu(device):
        return False
    libc = _libc()
    if libc is None:
        return False
    ok = libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes) == 1 and libc.mallopt(M_TRIM_THRESHOLD, threshold_bytes) == 1
    if not ok:
        log.debug("mallopt refused the thresholds")
    return ok


def configure_cpu_memory(mode: str, *, device: DeviceLike = "cpu") -> bool:
    """Apply ``train.cpu_memory`` (``reuse`` or ``release``) to this process; True if glibc took the thresholds.

    ``reuse`` fixes the trim threshold at its maximum and the mmap threshold at 32 MiB (so freed
    blocks up to that size stay in the heap and the next step's tensors reuse them without page
    faults) and turns :func:`release_free_memory` into a no-op. ``GRPOKIT_MALLOC_TUNING=1``
    (:func:`tune_malloc`, every large tensor mapped and unmapped) takes precedence over ``reuse``.
    ``reuse`` off the CPU or without glibc could change nothing: refused with a one-line error
    (``release`` there does nothing, as before).
    """
    global _RELEASE
    if mode not in ("reuse", "release"):
        raise ValueError(f"train.cpu_memory={mode!r}: choose reuse or release")
    libc = _libc()
    if mode == "reuse" and (not is_cpu(device) or libc is None):
        where = f"model.device={device}" if not is_cpu(device) else "this platform (no glibc malloc)"
        raise ValueError(f"train.cpu_memory=reuse tunes glibc's CPU heap, which {where} does not use: set train.cpu_memory=release")
    _RELEASE = mode == "release" or os.environ.get("GRPOKIT_MALLOC_TUNING", "0") == "1"
    if _RELEASE or not is_cpu(device) or libc is None:
        return False
    return libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1 and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1


def release_free_memory(device: DeviceLike = "cpu") -> None:
    """Return freed heap memory to the OS (``malloc_trim(0)``) under ``train.cpu_memory=release``.

    A no-op under ``reuse``, where not glibc, or off the CPU.
    """
    if not is_cpu(device) or not _RELEASE:
        return
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def allocate_gradients(params: list[torch.nn.Parameter]) -> None:
    """Give every parameter without a gradient a zero one, all views of one flat buffer.

    Allocated before the first forward of a learning phase, the gradients sit in one block that
    the activations allocated and freed around them cannot fragment, and the backward adds into
    them in place instead of allocating each parameter's gradient mid-backward (measured peak RSS
    -0.2 GiB at 16 x 64 tokens). The optimizer's ``zero_grad(set_to_none=True)`` frees the block.
    Every trainable parameter then has a gradient (zero where the loss does not reach it).
    """
    missing = [p for p in params if p.requires_grad and p.grad is None]
    if not missing:
        return
    kind = (missing[0].dtype, missing[0].device)
    blocked = [p for p in missing if (p.dtype, p.device) == kind]
    flat = torch.zeros(sum(p.numel() for p in blocked), dtype=kind[0], device=kind[1])
    offset = 0
    for p in blocked:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    for p in missing:  # another dtype or device (rare): a gradient of its own
        if p.grad is None:
            p.grad = torch.zeros_like(p)
