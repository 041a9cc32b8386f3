#!/usr/bin/env python
"""The embedded tiny models, built on two instruction sets: do the builds come out bit-identical?

    python benchmarks/build_isa.py                      # every builder, 8 steps, native and under qemu
    python benchmarks/build_isa.py --models vision --steps 16 --cpus max Nehalem
    python benchmarks/build_isa.py --dry-run            # one step of tiny-flow, natively only: seconds

grpokit builds ``tiny-qwen2vl``, ``tiny-mdm``, ``tiny-flow`` and ``tiny-palette-mdm`` on first use
(docs/families/embedded_models.md). Each builder runs here exactly as ``ensure_*`` runs it, in a
child with the numerics pinned (:func:`grpokit.model.fingerprint.pinned_build`), once natively
and once per ``--cpus`` model under ``qemu-x86_64 -cpu MODEL`` (apt ``qemu-user``: a user-mode
emulator, so the same interpreter and wheels run on an emulated CPU: ``max`` has AVX2 and no
AVX-512, ``Nehalem`` SSE4.2 only). A short build (``--steps``) runs every kernel the full build
runs, so equal fingerprints at 8 steps say the kernels give the same floats; emulation is about
50x slower than native. The table lists each build's weights fingerprint; the last stdout line is
``identical=<n>/<m>`` (builds whose fingerprint equals the native one, over the emulated builds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

BUILDERS = {  # name: (builder, extra kwargs of a short build)
    "vision": ("grpokit.families.vision_lm.pretrain:build", {"seed": 0}),
    "mdm": ("grpokit.families.masked_diffusion.pretrain:build", {"seed": 0}),
    "flow": ("grpokit.families.flow_matching.pretrain:build", {"seed": 0}),
    "palette": ("grpokit.families.palette.policy:build_palette", {"seed": 0}),
}


def build(target: str, out: Path, kwargs: dict, cpu: str | None) -> tuple[str, float]:
    """One pinned build (``cpu`` None: natively; else under ``qemu-x86_64 -cpu cpu``); its fingerprint and seconds."""
    from grpokit.model.fingerprint import pinned_env, read

    cmd = [sys.executable, "-m", "grpokit.model.fingerprint", "--build", target, str(out), json.dumps(kwargs)]
    if cpu is not None:
        cmd = ["qemu-x86_64", "-cpu", cpu, *cmd]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=pinned_env(os.environ), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return read(out)["fingerprint"], time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--models", nargs="+", default=list(BUILDERS), choices=list(BUILDERS))
    ap.add_argument("--steps", type=int, default=8, help="optimiser steps of each build (the full builds run thousands)")
    ap.add_argument("--cpus", nargs="+", default=["max"], help="qemu CPU models to emulate (qemu-x86_64 -cpu help)")
    ap.add_argument("--dry-run", action="store_true", help="one step of tiny-flow natively, no emulation: seconds")
    ap.add_argument("--out", default=None, help="unused (the dry-run harness passes it)")
    args = ap.parse_args()
    if args.dry_run:
        args.models, args.steps, args.cpus = ["flow"], 1, []
    elif shutil.which("qemu-x86_64") is None:
        raise SystemExit("qemu-x86_64 is not installed: apt-get install qemu-user (or run with --dry-run)")
    rows, same, emulated = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            target, kwargs = BUILDERS[name]
            kwargs = {**kwargs, "steps": args.steps}
            native, seconds = build(target, Path(tmp) / f"{name}-native", kwargs, None)
            rows.append((name, "native", native, seconds))
            print(f"{name:8s} native     {native}  {seconds:7.1f} s", flush=True)
            for cpu in args.cpus:
                digest, seconds = build(target, Path(tmp) / f"{name}-{cpu}", kwargs, cpu)
                rows.append((name, f"qemu {cpu}", digest, seconds))
                emulated, same = emulated + 1, same + (digest == native)
                print(f"{name:8s} qemu {cpu:6s} {digest}  {seconds:7.1f} s  {'same' if digest == native else 'DIFFERS'}",
                      flush=True)
    print(f"identical={same}/{emulated} steps={args.steps}")


if __name__ == "__main__":
    main()
