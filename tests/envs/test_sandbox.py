"""The tool sandbox against the escapes a policy would find: each is contained and comes back as a tool error.

Every hostile call runs on each backend this machine has (bwrap, landlock); the user tools are a
module written to ``tmp_path`` and referenced as ``/abs/file.py:function``, as a run names them.
The targets the tools aim at lie outside their scratch folder; each test checks the target is
untouched and the outcome is ``ok=False`` with a kind.
"""

import os
import socket
import textwrap
from pathlib import Path

import pytest

from grpokit.envs.sandbox import Limits, backends, run_tool, tool_reference
from grpokit.envs.tools import python

REPO_README = Path(__file__).resolve().parents[2] / "README.md"
AVAILABLE = [b for b in ("bwrap", "landlock") if backends.probe(b) is None]
pytestmark = pytest.mark.skipif(not AVAILABLE, reason="no sandbox backend on this machine")

USER_TOOLS = '''
import ctypes, os, socket, subprocess

def write_with_os_open(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"x")
    return "wrote"

def write_with_ctypes(path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(path.encode(), os.O_WRONLY | os.O_CREAT, 0o644)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "libc open failed")
    return "wrote"

def write_with_a_subprocess(path):
    subprocess.run(["sh", "-c", f"echo x > {path}"], check=True, capture_output=True)
    return "wrote"

def write_through_a_symlink(path):
    os.symlink(path, "link")
    with open("link", "w") as f:
        f.write("x")
    return "wrote"

def read(path):
    return open(path).read()[:20]

def home_and_cwd():
    return os.path.expanduser("~") + " " + os.getcwd()

def connect(port):
    # A bytes host needs no idna codec: under landlock as root the worker is nobody and cannot
    # import more of a stdlib beneath /root (see grpokit.envs.sandbox.backends).
    s = socket.socket()
    s.settimeout(2)
    s.connect((b"127.0.0.1", port))
    s.sendall(b"hello")
    return "connected"

def fork_bomb():
    while True:
        os.fork()

def flood_every_fd():
    for fd in range(1, 10):
        try:
            os.write(fd, b"x" * 20_000_000)
        except OSError:
            pass
    return "flooded"

def big_file():
    with open("big.bin", "wb") as f:
        f.write(b"x" * (2 << 20))
    return "wrote"

def big_memory():
    return len(bytearray(2 << 30))

def spin():
    while True:
        pass
'''


@pytest.fixture
def tools(tmp_path):
    path = tmp_path / "user_tools.py"
    path.write_text(USER_TOOLS)
    return lambda name: f"{path}:{name}"


@pytest.fixture(params=AVAILABLE)
def backend(request):
    return request.param


def _failed(out, *kinds):
    assert not out.ok and out.kind in kinds, out
    return out.text


# The introspection walk: from a tuple to os._wrap_close, whose __init__'s globals are os's.
WALK = "g = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__\n"


def test_an_introspection_walk_from_the_python_tool_cannot_write_outside_the_scratch_folder(tmp_path, backend):
    target = tmp_path / "escaped.txt"
    code = WALK + f"fd = g['open']({str(target)!r}, g['O_WRONLY'] | g['O_CREAT'], 0o644)\ng['write'](fd, b'x')\nprint('wrote')"
    text = _failed(run_tool(python, {"code": code}, sandbox=backend), "exception")
    assert ("Error" in text) and not target.exists()  # bwrap: EROFS or ENOENT; landlock: EACCES


def test_an_introspection_walk_reaches_socket_but_not_a_localhost_server(backend):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        code = WALK + ("s = g['sys'].modules['builtins'].__import__('socket')\n"
                       f"s.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hi')\nprint('connected')")
        text = _failed(run_tool(python, {"code": code}, sandbox=backend), "exception")
        assert "Error" in text
        with pytest.raises(socket.timeout):
            server.accept()  # nobody reached the server


@pytest.mark.parametrize("tool", ["write_with_os_open", "write_with_ctypes", "write_with_a_subprocess", "write_through_a_symlink"])
def test_a_user_tool_cannot_write_outside_its_scratch_folder(tmp_path, tools, backend, tool):
    target = tmp_path / "escaped.txt"
    _failed(run_tool(tools(tool), {"path": str(target)}, sandbox=backend), "exception")
    assert not target.exists()


def test_a_user_tool_cannot_write_into_the_repo(tools, backend):
    target = REPO_README.parent / f"escaped-by-a-tool-{backend}.txt"
    try:
        _failed(run_tool(tools("write_with_os_open"), {"path": str(target)}, sandbox=backend), "exception")
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)  # only if the sandbox failed


def test_a_user_tool_cannot_read_the_repo_or_files_outside_its_view(tmp_path, tools, backend):
    secret = tmp_path / "secret.txt"
    secret.write_text("the trainer's secret")
    for path in (secret, REPO_README):
        assert path.exists()
        _failed(run_tool(tools("read"), {"path": str(path)}, sandbox=backend), "exception")
    home, cwd = run_tool(tools("home_and_cwd"), {}, sandbox=backend).text.split()
    assert home == cwd and cwd != os.getcwd()  # $HOME is the scratch folder, not the trainer's


def test_a_user_tool_cannot_connect_to_a_localhost_tcp_server(tools, backend):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        text = _failed(run_tool(tools("connect"), {"port": server.getsockname()[1]}, sandbox=backend), "exception")
        assert "ConnectionRefusedError" in text or "PermissionError" in text  # bwrap: its own loopback; landlock: TCP denied
        with pytest.raises(socket.timeout):
            server.accept()


def _worker_processes():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if backends.WORKER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def test_a_fork_bomb_is_stopped_by_the_process_limit_and_leaves_no_process(tools, backend):
    limits = Limits(timeout_s=2.0, max_processes=16)
    _failed(run_tool(tools("fork_bomb"), {}, sandbox=backend, limits=limits), "exception", "timeout", "killed")
    assert _worker_processes() == []  # run_tool kills the whole sandbox before it returns
    assert run_tool(tools("home_and_cwd"), {}, sandbox=backend).ok  # the trainer can still start processes


def test_huge_outputs_are_refused_as_too_long(tools, backend):
    limits = Limits(max_output_chars=1000)
    text = _failed(run_tool(python, {"code": "print('x' * 10_000_000)"}, sandbox=backend, limits=limits), "too_long")
    assert "10000000 characters, over the 1000-character cap" in text  # refused inside: the 10 MB never crossed
    _failed(run_tool(tools("flood_every_fd"), {}, sandbox=backend, limits=limits), "too_long", "exception")


def test_file_size_memory_and_cpu_limits(tools, backend):
    limits = Limits(timeout_s=1.0, max_file_bytes=1 << 20, memory_bytes=512 << 20)
    assert "File too large" in _failed(run_tool(tools("big_file"), {}, sandbox=backend, limits=limits), "exception")
    assert "MemoryError" in _failed(run_tool(tools("big_memory"), {}, sandbox=backend, limits=limits), "exception")
    assert "did not finish within 1 s" in _failed(run_tool(tools("spin"), {}, sandbox=backend, limits=limits), "timeout")


def test_none_runs_the_same_worker_without_isolation(tmp_path, tools):
    target = tmp_path / "written-by-none.txt"
    assert run_tool(tools("write_with_os_open"), {"path": str(target)}, sandbox="none").text == "wrote"
    assert target.read_text() == "x"  # exactly what `sandbox: none` means: the trainer's own rights


def test_a_tool_no_import_can_reach_is_refused_in_one_line():
    def nested(x: int) -> int:
        return x

    for fn in (nested, lambda x: x):
        with pytest.raises(ValueError, match="module-level function importable as 'module:function'") as info:
            tool_reference(fn)
        assert "\n" not in str(info.value)
    assert tool_reference(python).ref == "grpokit.envs.tools:python"


def test_auto_picks_the_strongest_backend_here():
    from grpokit.envs.sandbox import choose

    assert choose("auto") == AVAILABLE[0]
