"""Intel MKL's AVX2 GEMM kernels on AMD CPUs, through a one-function ``LD_PRELOAD`` shim.

PyTorch's x86 CPU wheels link Intel MKL for fp32 matmuls (``aten::mm``/``addmm``: 80% of a
learner step here). On a non-Intel CPU, MKL's dispatcher asks ``mkl_serv_intel_cpu_true()``
and, when it answers 0, runs a generic code path instead of its AVX2/FMA kernels, although the
CPU has both. Measured on this project's 2-core AMD EPYC (Zen 3, AVX2) with torch 2.13:

    shape [M, K] x [K, N]      stock MKL    with the shim   (GFLOP/s, 2 threads)
    2048 x 2048 x 2048           83-91        110-128
    2200 x 576 x 1536            87-93        112-147
    1536 x 2200 x 576            87-113       129-131
    learner step (32 x 102 tokens, checkpointing)   29.7 s -> 25.5 s

The shim is a shared library defining only ``int mkl_serv_intel_cpu_true(void) { return 1; }``;
the dynamic linker resolves MKL's call to it when it is in ``LD_PRELOAD``. MKL still reads the
CPU's feature flags (CPUID) to choose among its kernels, so it picks the AVX2 ones on an AVX2
CPU (the long-known workaround for MKL on AMD; no effect on Intel CPUs, where the real function
already answers 1). ``LD_PRELOAD`` is read when a process starts, so :func:`reexec_with_shim`
restarts the current command once with it set (``grpokit train|demo|eval`` do this when their
``model.device`` puts the run on the CPU, :func:`runs_on_cpu`; a GPU run is never restarted);
``GRPOKIT_MKL_AMD=0`` turns it off. Library users can export ``LD_PRELOAD=$(python -m
grpokit.mkl_amd)`` themselves. The shim is compiled on first use with the system C compiler
into ``~/.cache/grpokit/mkl_amd/``; without a compiler nothing changes.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import logging
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional

log = logging.getLogger(__name__)

SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
ENV_SWITCH = "GRPOKIT_MKL_AMD"  # "0" turns the shim off
ENV_DONE = "GRPOKIT_MKL_AMD_REEXEC"  # set in the restarted process: never restart twice


def cache_dir() -> Path:
    """Where the compiled shim lives: ``<grpokit cache>/mkl_amd`` (``$GRPOKIT_CACHE`` or ``~/.cache/grpokit``)."""
    from grpokit.model.loading import cache_dir as grpokit_cache  # torch-free import

    return grpokit_cache() / "mkl_amd"


def is_amd_cpu(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True on an x86-64 Linux machine whose CPU vendor is AMD."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return "AuthenticAMD" in line
    except OSError:
        return False
    return False


def shim_path(build: bool = True) -> Optional[Path]:
    """Path of the compiled shim (built now if missing and ``build``); None without a C compiler."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    lib = cache_dir() / f"libgrpokit_mkl_amd_{digest}.so"
    if lib.exists() or not build:
        return lib if lib.exists() else None
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if compiler is None:
        log.debug("no C compiler: MKL keeps its generic code path on this AMD CPU")
        return None
    lib.parent.mkdir(parents=True, exist_ok=True)
    src = lib.with_suffix(".c")
    src.write_text(SOURCE)
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    proc = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        log.debug("compiling the MKL shim failed: %s", proc.stderr.strip())
        return None
    os.replace(tmp, lib)  # atomic: concurrent builders never see half a file
    return lib


def active(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process was started with the shim preloaded."""
    return any(Path(p).name.startswith("libgrpokit_mkl_amd") for p in env.get("LD_PRELOAD", "").replace(":", " ").split())


def preload_env(env: Mapping[str, str], lib: Path) -> dict[str, str]:
    """``env`` with ``lib`` prepended to ``LD_PRELOAD`` (kept entries after it)."""
    out = dict(env)
    out["LD_PRELOAD"] = " ".join([str(lib)] + env.get("LD_PRELOAD", "").replace(":", " ").split())
    return out


def gpu_present(env: Mapping[str, str] = os.environ) -> bool:
    """Whether torch would likely see a GPU, answered without importing torch (which costs seconds).

    A torch wheel built without CUDA (version ``+cpu``), ``CUDA_VISIBLE_DEVICES`` set to nothing or
    -1, or no GPU device node (``/dev/nvidia<N>``, ROCm's ``/dev/kfd``) means no. A wrong guess costs
    only speed: a CPU run without the shim, or a GPU run restarted once with it (MKL is then idle).
    """
    try:
        if "+cpu" in importlib.metadata.version("torch"):
            return False
    except importlib.metadata.PackageNotFoundError:
        return False
    if env.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")


def runs_on_cpu(device: str, env: Mapping[str, str] = os.environ) -> bool:
    """Whether a run whose ``model.device`` is ``device`` runs on the CPU: 'cpu', or 'auto' without a GPU."""
    spec = str(device).strip().lower()
    return spec == "cpu" or (spec == "auto" and not gpu_present(env))


def wanted(env: Mapping[str, str] = os.environ, device: str = "cpu") -> bool:
    """The shim helps here: an AMD x86-64 Linux CPU running the model, not switched off, not already preloaded or tried."""
    return (
        env.get(ENV_SWITCH, "1") != "0" and ENV_DONE not in env and not active(env) and is_amd_cpu()
        and runs_on_cpu(device, env)
    )


def reexec_with_shim(device: str = "cpu") -> None:
    """Restart this process once with the shim preloaded when :func:`wanted`; otherwise return.

    Call it first thing in a command-line entry point, before any work: the process image is
    replaced (same interpreter, same arguments, same environment plus ``LD_PRELOAD``). ``device``
    is the run's ``model.device``; a run that will be on a GPU is not restarted.
    """
    if not wanted(device=device):
        return
    lib = shim_path()
    if lib is None:
        return
    env = preload_env(os.environ, lib)
    env[ENV_DONE] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.orig_argv[1:], env)


if __name__ == "__main__":  # `LD_PRELOAD=$(python -m grpokit.mkl_amd) python train.py`
    path = shim_path()
    if path is None:
        sys.exit("grpokit.mkl_amd: no C compiler found (cc/gcc/clang); the shim cannot be built")
    print(path)
