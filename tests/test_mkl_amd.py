"""The MKL-on-AMD shim: built, preloaded once on restart, interposed, and matmuls stay right."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpokit import mkl_amd

needs_cc = pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler")


def test_switch_and_guards(monkeypatch):
    monkeypatch.setattr(mkl_amd, "is_amd_cpu", lambda: True)
    assert mkl_amd.wanted({})
    assert not mkl_amd.wanted({"GRPOKIT_MKL_AMD": "0"})
    assert not mkl_amd.wanted({mkl_amd.ENV_DONE: "1"})  # never restarts twice
    assert not mkl_amd.wanted({"LD_PRELOAD": "/x/libgrpokit_mkl_amd_abc.so"})
    monkeypatch.setattr(mkl_amd, "is_amd_cpu", lambda: False)
    assert not mkl_amd.wanted({})


def test_preload_env_keeps_existing_entries():
    env = mkl_amd.preload_env({"LD_PRELOAD": "/a.so:/b.so", "X": "1"}, Path("/c/libgrpokit_mkl_amd_1.so"))
    assert env["LD_PRELOAD"].split() == ["/c/libgrpokit_mkl_amd_1.so", "/a.so", "/b.so"] and env["X"] == "1"
    assert mkl_amd.active(env)


def test_is_amd_cpu_reads_vendor(tmp_path, monkeypatch):
    monkeypatch.setattr(mkl_amd.sys, "platform", "linux")
    monkeypatch.setattr(mkl_amd.platform, "machine", lambda: "x86_64")
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n")
    assert not mkl_amd.is_amd_cpu(str(info))
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n")
    assert mkl_amd.is_amd_cpu(str(info))
    monkeypatch.setattr(mkl_amd.platform, "machine", lambda: "aarch64")
    assert not mkl_amd.is_amd_cpu(str(info))


CHILD = r"""
import ctypes, os, sys
from grpokit import mkl_amd
mkl_amd.is_amd_cpu = lambda: True  # exercise the restart on any CPU
mkl_amd.reexec_with_shim()
import torch
lib = [p for p in os.environ["LD_PRELOAD"].split() if "libgrpokit_mkl_amd" in p][0]
resolved = ctypes.cast(ctypes.CDLL(None).mkl_serv_intel_cpu_true, ctypes.c_void_p).value
own = ctypes.cast(ctypes.CDLL(lib).mkl_serv_intel_cpu_true, ctypes.c_void_p).value
torch.manual_seed(0)
a, b = torch.randn(300, 200), torch.randn(200, 500)
err = float((a @ b - (a.double() @ b.double()).float()).abs().max())
print("RESULT", os.environ.get(mkl_amd.ENV_DONE), resolved == own, err, ctypes.CDLL(None).mkl_serv_intel_cpu_true())
"""


@needs_cc
def test_restart_preloads_shim_and_matmuls_stay_exact(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", mkl_amd.ENV_DONE, mkl_amd.ENV_SWITCH)}
    env["GRPOKIT_CACHE"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")][0].split()
    assert line[1] == "1"  # restarted exactly once, with the guard set
    assert line[2] == "True"  # the dynamic linker resolves MKL's CPU check to the shim
    assert float(line[3]) < 1e-3  # fp32 matmul still right
    assert line[4] == "1"
    assert list(tmp_path.glob("mkl_amd/libgrpokit_mkl_amd_*.so"))


def test_runs_on_a_gpu_are_not_restarted(monkeypatch):
    monkeypatch.setattr(mkl_amd, "is_amd_cpu", lambda: True)
    monkeypatch.setattr(mkl_amd, "gpu_present", lambda env: False)
    assert mkl_amd.wanted({}, device="cpu") and mkl_amd.wanted({}, device="auto")
    assert not mkl_amd.wanted({}, device="cuda") and not mkl_amd.wanted({}, device="cuda:1")
    monkeypatch.setattr(mkl_amd, "gpu_present", lambda env: True)
    assert not mkl_amd.wanted({}, device="auto")  # auto on a machine with a GPU: the run is on it
    assert mkl_amd.wanted({}, device="cpu")


def test_gpu_present_is_answered_without_torch(monkeypatch):
    monkeypatch.setattr(mkl_amd.importlib.metadata, "version", lambda name: "2.13.0+cpu")
    monkeypatch.setattr(mkl_amd.glob, "glob", lambda pattern: ["/dev/nvidia0"])
    assert not mkl_amd.gpu_present({})  # a CPU-only wheel never sees the GPU
    monkeypatch.setattr(mkl_amd.importlib.metadata, "version", lambda name: "2.13.0")
    assert mkl_amd.gpu_present({})
    assert not mkl_amd.gpu_present({"CUDA_VISIBLE_DEVICES": ""}) and not mkl_amd.gpu_present({"CUDA_VISIBLE_DEVICES": "-1"})
    if not os.path.exists("/dev/kfd"):
        monkeypatch.setattr(mkl_amd.glob, "glob", lambda pattern: [])
        assert not mkl_amd.gpu_present({})


def test_the_cli_reads_model_device_from_the_raw_config(tmp_path):
    from grpokit.cli import _requested_device, build_parser

    parse = build_parser().parse_args
    cfg = tmp_path / "run.yaml"
    cfg.write_text("preset: demo\nmodel: {device: 'cuda:1'}\n")
    assert _requested_device(parse(["demo"])) == "auto"
    assert _requested_device(parse(["demo", "--set", "model.device=cpu"])) == "cpu"
    assert _requested_device(parse(["train", str(cfg)])) == "cuda:1"
    assert _requested_device(parse(["train", str(cfg), "--set", "model.device=cpu"])) == "cpu"
    assert _requested_device(parse(["train", str(tmp_path / "missing.yaml")])) == "auto"  # the real load reports it
    assert _requested_device(parse(["rm", "train"])) == "cpu"
    probe = "import sys; from grpokit.cli import _requested_device, build_parser; _requested_device(build_parser().parse_args(['demo'])); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr  # decided before torch is imported
