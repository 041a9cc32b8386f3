"""Inside the sandbox: confine this process, import one tool by reference, call it, print the outcome as JSON.

Run as a script (``python -I worker.py``), never imported by the trainer, so nothing of grpokit
is imported before the confinement is in place. The parent writes one JSON request on stdin::

    {"ref": "package.module:function" | "/abs/file.py:function", "arguments": {...},
     "max_output_chars": N, "limits": {"cpu_s", "memory_bytes", "file_bytes", "processes"},
     "drop_to_uid": 65534 | null, "landlock": {"read": [...], "write": [...]} | null,
     "sys_path": [...], "cwd": "/scratch"}

and reads one JSON line ``{"ok": bool, "text": str, "kind": str | null}`` from stdout. Order:
read the request, import the tool (the run's own code), drop root (so ``RLIMIT_NPROC`` applies:
the kernel exempts uid 0), restrict the file system and TCP with Landlock (landlock backend), set
the rlimits, write ``S`` (the call starts), call. The tool's own writes to fd 1 go to /dev/null; the result leaves on a duplicate of it.
"""

from __future__ import annotations

import json
import os
import resource
import sys

# Landlock's ABI v4 TCP rights and ABI v6 scopes (linux/landlock.h); the `landlock` package
# covers the file-system rights only, so the network part of the ruleset is declared here.
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


def _landlock_ruleset(read: list[str], write: list[str]) -> int:
    """A Landlock ruleset (its fd) denying file access outside ``read`` (read/execute) and ``write`` (all), every TCP bind/connect, abstract unix sockets and signals out."""
    import ctypes

    import landlock
    from landlock.plumbing import get_add_rule, get_libc

    abi = landlock.landlock_abi_version()
    fs = landlock.FSAccess.all()

    class Attr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    attr = Attr(int(fs), _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0, _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(ctypes.c_uint64) * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    syscall = get_libc()["syscall"]  # 444: landlock_create_ruleset, one number on every architecture
    syscall.restype = ctypes.c_long
    fd = syscall(ctypes.c_long(444), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    F = landlock.FSAccess
    reading = F.READ_FILE | F.READ_DIR | F.EXECUTE
    for paths, rights in ((read, reading), (write, fs)):
        for path in paths:
            pfd = os.open(path, os.O_PATH)
            try:
                rights_here = rights if os.path.isdir(path) else rights & landlock.FSAccess.all_file()
                get_add_rule()(fd, 1, ctypes.byref(landlock.plumbing.PathBeneathAttr(rights_here, pfd)), 0)
            finally:
                os.close(pfd)
    return fd


def _landlock_apply(fd: int) -> None:
    from landlock.plumbing import get_libc, get_restrict_self

    get_libc().prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: required by landlock_restrict_self without CAP_SYS_ADMIN
    get_restrict_self()(fd, 0)
    os.close(fd)


def _own_processes() -> int:
    """Processes of this real uid now: outside a user namespace RLIMIT_NPROC counts all of them, not only the sandbox's."""
    uid, n = os.getuid(), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            n += os.stat(f"/proc/{pid}").st_uid == uid
        except OSError:
            pass
    return n


def _confine(request: dict) -> None:
    lim = request["limits"]
    processes = lim["processes"] + (_own_processes() if lim["count_host_processes"] else 0)  # /proc: before Landlock
    rules = request.get("landlock")
    ruleset = _landlock_ruleset(rules["read"], rules["write"]) if rules else None  # opens the paths: before the uid drop
    uid = request.get("drop_to_uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from 0 to another uid: every capability goes too
    if ruleset is not None:
        _landlock_apply(ruleset)
    for which, value in ((resource.RLIMIT_CPU, lim["cpu_s"]), (resource.RLIMIT_AS, lim["memory_bytes"]),
                         (resource.RLIMIT_FSIZE, lim["file_bytes"]), (resource.RLIMIT_NPROC, processes),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, (value, value))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({"HOME": request["cwd"], "TMPDIR": request["cwd"], "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})


def _resolve(ref: str):
    source, _, attr = ref.rpartition(":")
    if source.endswith(".py"):
        import importlib.util

        spec = importlib.util.spec_from_file_location("grpokit_user_tool", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        import importlib

        module = importlib.import_module(source)
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn


def _outcome(fn, request: dict) -> dict:
    try:
        text = str(fn(**request["arguments"]))
    except BaseException as exc:  # the tool's failure is the model's observation
        line = f"{type(exc).__name__}: {exc}".splitlines()
        return {"ok": False, "text": (line[0] if line else type(exc).__name__)[:500], "kind": "exception"}
    cap = request["max_output_chars"]
    if len(text) > cap:
        return {"ok": False, "text": f"the result has {len(text)} characters, over the {cap}-character cap", "kind": "too_long"}
    return {"ok": True, "text": text, "kind": None}


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    result_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # stray prints of the tool cannot corrupt the result line
    sys.path[:0] = request["sys_path"]
    try:  # the run's own code, imported before the confinement: as root, nobody cannot read a stdlib beneath /root
        fn = _resolve(request["ref"])
    except BaseException as exc:
        out = {"ok": False, "text": f"cannot import the tool {request['ref']}: {type(exc).__name__}: {exc}"[:500], "kind": "exception"}
    else:
        try:
            _confine(request)
        except BaseException as exc:
            out = {"ok": False, "text": f"the sandbox could not confine the tool: {type(exc).__name__}: {exc}"[:500], "kind": "sandbox"}
        else:
            _write(result_fd, b"S")  # the parent's call timeout starts now
            out = _outcome(fn, request)
    _write(result_fd, (json.dumps(out) + "\n").encode())
    os._exit(0)  # no atexit or thread joins left to the tool's code


if __name__ == "__main__":
    main()
