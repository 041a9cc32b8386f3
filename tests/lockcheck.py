"""The installed distributions against the lock the suite is tested with.

The lock is ``requirements/cpu.lock`` (every package of ``grpokit[dev,ray]`` on CPU, written by
``make lock``) plus ``requirements/models.txt`` (the two embedded-model packages); ``GRPOKIT_LOCK``
names another lock file (e.g. ``requirements/tracking.lock`` for an environment with that extra).
Shared by ``tests/conftest.py`` (the pytest header) and ``tests/test_install_lock.py``.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
KEY = ("torch", "transformers", "peft", "trl", "gguf", "numpy", "ray")  # the packages named in the header
NOT_LOCKED = {"pip", "grpokit"}  # pip: pinned by the Makefile; grpokit: this checkout, installed editable
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def lock_files() -> list[Path]:
    """The lock in force, then the embedded-model pins."""
    main = Path(os.environ.get("GRPOKIT_LOCK") or ROOT / "requirements" / "cpu.lock")
    return [main if main.is_absolute() else ROOT / main, ROOT / "requirements" / "models.txt"]


def locked() -> dict[str, str]:
    """``{canonical name: version}`` of every ``name==version`` line of the lock files."""
    pins = {}
    for path in lock_files():
        for line in path.read_text().splitlines():
            match = PIN.match(line)
            if match:
                pins[canonicalize_name(match[1])] = match[2]
    return pins


def installed() -> dict[str, str]:
    """``{canonical name: version}`` of the distributions installed in this environment (under ``sys.prefix``).

    A folder outside it that lands on ``sys.path`` while the suite runs (seen once: the base
    interpreter's site-packages, with a colorama the lock does not hold) is not the install the
    lock describes; the first distribution of a name on ``sys.path`` is the one counted, as import finds it.
    """
    prefix = os.path.realpath(sys.prefix)
    out: dict[str, str] = {}
    for d in metadata.distributions():
        where = os.path.realpath(str(d.locate_file("")))
        if d.metadata["Name"] and (where == prefix or where.startswith(prefix + os.sep)):
            out.setdefault(canonicalize_name(d.metadata["Name"]), d.version)
    return out


def mismatches() -> list[str]:
    """Each difference between the installed set and the lock: another version, missing, or not in the lock.

    The lock pins torch as ``2.13.0``; the installed CPU wheel is ``2.13.0+cpu``, which ``==2.13.0``
    admits (a local version label is ignored by a public ``==``, PEP 440).
    """
    pins, have = locked(), installed()
    out = []
    for name, version in sorted(pins.items()):
        if name not in have:
            out.append(f"{name} missing (lock {version})")
        elif not SpecifierSet(f"=={version}").contains(have[name], prereleases=True):
            out.append(f"{name} {have[name]} (lock {version})")
    out += [f"{name} {have[name]} not in the lock" for name in sorted(set(have) - set(pins) - NOT_LOCKED)]
    return out


AT_START: dict[str, object] = {}  # installed() and mismatches() as the session began, before any test ran


def snapshot() -> None:
    """Record the install as the session starts (``tests/conftest.py``'s ``pytest_configure``).

    The check is of the install: a full run once showed a colorama 0.4.6 inside the environment
    part-way through the suite that was gone after it (not found: what put it there), and a
    check at the end would judge that instead of what ``make install`` installed.
    """
    AT_START.update(installed=installed(), mismatches=mismatches())


def header() -> list[str]:
    """Two lines for the pytest header: key versions, then whether everything matched the lock as the session began."""
    have = AT_START.get("installed") or installed()
    versions = ", ".join(f"{name} {have.get(name, '-')}" for name in KEY)
    lock = os.path.relpath(lock_files()[0], ROOT)
    bad = AT_START["mismatches"] if "mismatches" in AT_START else mismatches()
    status = (f"all {len(have)} installed distributions match {lock}" if not bad
              else f"MISMATCH with {lock} ({len(bad)}): {'; '.join(bad)}")
    return [f"python {sys.version.split()[0]}, {versions}", status]
