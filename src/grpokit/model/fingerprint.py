"""Fingerprints of the models grpokit builds on first use, and building them with the CPU numerics pinned.

grpokit builds its embedded miniature models (``tiny-qwen2vl``, ``tiny-mdm``, ``tiny-flow``,
``tiny-palette-mdm``) on the user's machine. Thousands of optimiser steps amplify any change in
the last bit of a float, and which bits come out depends on which kernels run: Intel MKL picks
its GEMM code path from the CPU (and from the AMD ``LD_PRELOAD`` shim of :mod:`grpokit.mkl_amd`),
ATen picks DEFAULT / AVX2 / AVX512 vectorised kernels, oneDNN its ISA, glibc's libm an FMA or a
plain variant of ``expf`` / ``logf`` / ``sinf``. A tiny VLM built on an AMD AVX2 CPU was measured
to be a different model from the one built on an AVX-512 Intel CPU (issue 26: GRPO's held-out
result moved by 31 points).

Two things follow:

* :func:`record` writes ``grpokit-build.json`` into every built folder: a short sha256 of the
  saved weights (:func:`weights_digest`: every tensor in name order, its name, dtype, shape and
  bytes) and the build's settings (seed, steps, torch version, the CPU's ISA flags, threads, the
  pinned environment). Loaders log it with :func:`log_fingerprint`, so two results can be told
  apart by the model they started from.
* :func:`pinned_build` runs a builder in a child process whose numerics are pinned before torch
  is imported (:data:`PINNED_ENV`): one thread, ``MKL_CBWR=COMPATIBLE`` (MKL's conditional
  numerical reproducibility: its SSE2 code path, documented to give the same results on any x86
  CPU), ``ATEN_CPU_CAPABILITY=default`` (ATen's non-vectorised kernels), oneDNN held to SSE4.1,
  glibc's AVX2 / FMA / AVX-512 function variants masked, oneDNN and NNPACK off (convolutions as
  im2col + MKL GEMM), no MKL shim, deterministic algorithms.
  With the builders' fused AdamW (:func:`build_optimizer`) and NNPACK off, an 8-step build of
  every embedded model has the same fingerprint natively (AVX-512) and under ``qemu-x86_64 -cpu
  max`` (AVX2) and ``-cpu Nehalem`` (SSE4.2): ``benchmarks/build_isa.py``,
  docs/families/embedded_models.md.

    python -m grpokit.model.fingerprint FOLDER       # recompute a folder's digest and print its record
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

log = logging.getLogger(__name__)

FILE = "grpokit-build.json"
DIGEST_CHARS = 12
# Set in the child before torch loads; each neutralises one way the CPU picks the floats.
PINNED_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MKL_CBWR": "COMPATIBLE",
    "ATEN_CPU_CAPABILITY": "default",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "DNNL_MAX_CPU_ISA": "SSE41",
    "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX2,-FMA,-FMA4",
    "CUDA_VISIBLE_DEVICES": "",
}
# Removed in the child: they select kernels by CPU. All of LD_PRELOAD goes: the AMD MKL shim, or any library swapped in.
UNPINNED = ("LD_PRELOAD", "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE", "MKL_CBWR_BRANCH")
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile")


def build_optimizer(params: Any, *, lr: float, weight_decay: float) -> Any:
    """AdamW for a builder: PyTorch's fused kernel, the same floats on every x86 CPU.

    The default (foreach) AdamW divides by float32 ``torch.sqrt(v)``, whose vectorised kernel is
    not correctly rounded and rounds differently with and without AVX-512 (measured: an 8-step
    ``tiny-qwen2vl`` build had another fingerprint under ``qemu-x86_64 -cpu max``, an AVX2 CPU);
    the fused kernel under the pinned ``ATEN_CPU_CAPABILITY=default`` computes the update in
    plain scalar code (Loshchilov & Hutter, "Decoupled Weight Decay Regularization",
    arXiv:1711.05101, Algorithm 2).
    """
    import torch

    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)


def weights_digest(tensors: Mapping[str, Any]) -> str:
    """Short sha256 of a state dict: per tensor, in sorted name order, its name, dtype, shape and raw bytes."""
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:DIGEST_CHARS]


def saved_tensors(folder: str | Path) -> dict[str, Any]:
    """Every tensor of the ``*.safetensors`` files in ``folder`` (what a loader reads), by name."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors weights to fingerprint")
    out: dict[str, Any] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def cpu_settings() -> dict[str, Any]:
    """The build machine's numerics: torch version, ATen capability, threads, CPU model and ISA flags, pins."""
    import torch

    flags: set[str] = set()
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"torch": torch.__version__, "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "mkldnn": torch.backends.mkldnn.enabled,
            "nnpack": torch._C._get_nnpack_enabled(), "cpu": model, "isa": [f for f in ISA_FLAGS if f in flags],
            "pinned": {k: os.environ.get(k) for k in PINNED_ENV} if is_pinned() else None,
            "mkl_shim": any("libgrpokit_mkl_amd" in p for p in os.environ.get("LD_PRELOAD", "").split())}


def is_pinned(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process runs with :data:`PINNED_ENV` in effect (and none of :data:`UNPINNED`)."""
    return all(env.get(k) == v for k, v in PINNED_ENV.items()) and not any(env.get(k) for k in UNPINNED)


def record(folder: str | Path, model: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``folder/grpokit-build.json``: the digest of the saved weights, ``settings`` and :func:`cpu_settings`."""
    folder = Path(folder)
    entry = {"model": model, "fingerprint": weights_digest(saved_tensors(folder)), "settings": dict(settings),
             "build": cpu_settings()}
    (folder / FILE).write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    return entry


def read(folder: str | Path) -> Optional[dict[str, Any]]:
    """The record of ``folder``, or None when it has none (a folder grpokit did not build)."""
    path = Path(folder) / FILE
    return json.loads(path.read_text()) if path.is_file() else None


def describe(entry: Mapping[str, Any]) -> str:
    """One line: ``model NAME fingerprint DIGEST (built with seed=…, …, torch …, CPU …)``."""
    s, b = entry["settings"], entry["build"]
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(s.items()))
    pins = "numerics pinned" if b.get("pinned") else f"unpinned, ATen {b['aten_capability']}, MKL shim {b['mkl_shim']}"
    return (f"model {entry['model']} fingerprint {entry['fingerprint']} (built with {knobs}, torch {b['torch']}, "
            f"{b['threads']} thread(s), {pins}, CPU {b['cpu']} [{' '.join(b['isa'])}])")


def log_fingerprint(folder: str | Path, name: str) -> Optional[str]:
    """Log the INFO line of :func:`describe` for a folder grpokit built (DEBUG without a record); returns the digest."""
    entry = read(folder)
    if entry is None:
        log.debug("model %s at %s has no grpokit build record (not built by grpokit)", name, folder)
        return None
    log.info("%s", describe({**entry, "model": name}))
    return entry["fingerprint"]


def pinned_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with :data:`PINNED_ENV` set, :data:`UNPINNED` removed and this grpokit importable first."""
    out = {k: v for k, v in env.items() if k not in UNPINNED}
    out.update(PINNED_ENV)
    src = str(Path(__file__).resolve().parents[2])
    out["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return out


def pinned_build(target: str, out: str | Path, env: Optional[Mapping[str, str]] = None, **kwargs: Any) -> Path:
    """Run ``target(out, **kwargs)`` (``"module:function"``, JSON-able kwargs) in a child with the numerics pinned.

    ``env`` is the environment to pin (default: this process's); the child's log goes to this
    process's stderr. Raises RuntimeError naming the builder when the child fails.
    """
    cmd = [sys.executable, "-m", "grpokit.model.fingerprint", "--build", target, str(out), json.dumps(kwargs)]
    proc = subprocess.run(cmd, env=pinned_env(os.environ if env is None else env))
    if proc.returncode != 0:
        raise RuntimeError(f"building {out} with {target} in a pinned child process failed (exit {proc.returncode}); see its log above")
    return Path(out)


def _child_build(target: str, out: str, kwargs: str) -> None:
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    # oneDNN picks its convolution kernels and blocking by CPU and promises no cross-CPU results; without
    # it ATen's native convolutions run as im2col + MKL GEMM, which MKL_CBWR pins.
    torch.backends.mkldnn.enabled = False
    # NNPACK (picked for 2-D convolutions where its ISA-specific kernels run) is another convolution
    # library: measured, tiny-flow's first conv2d gave other floats natively (NNPACK) than under qemu
    # (NNPACK "unsupported hardware": ATen's im2col + GEMM). Off, every CPU takes im2col + MKL GEMM.
    torch.backends.nnpack.set_flags(False)
    module, func = target.split(":")
    getattr(importlib.import_module(module), func)(Path(out), **json.loads(kwargs))


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Recompute a built model folder's weights digest and check its record")
    p.add_argument("folder", nargs="?", help="a model folder (with *.safetensors)")
    p.add_argument("--build", nargs=3, metavar=("MODULE:FUNCTION", "OUT", "KWARGS_JSON"),
                   help=argparse.SUPPRESS)  # the pinned child of pinned_build
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if a.build:
        _child_build(*a.build)
        return 0
    if a.folder is None:
        p.error("give a model folder")
    entry, digest = read(a.folder), weights_digest(saved_tensors(a.folder))
    print(f"weights {digest}" + ("" if entry is None else f"; recorded: {describe(entry)}"))
    return 0 if entry is None or entry["fingerprint"] == digest else 1


if __name__ == "__main__":
    raise SystemExit(main())
