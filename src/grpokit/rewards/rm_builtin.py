"""Reward models grpokit builds on first use: ``safety-rm``, the three-aspect regression RM.

``safety-rm`` is what this command writes, trained on the generated safety set
(:mod:`grpokit.data.safety_task`, 600 rows, seed 0) over a frozen all-MiniLM-L6-v2::

    grpokit rm train --kind regression --data generated:safety_aspects --rows 600 \\
        --aspects helpfulness,harmlessness,format --prompt-column prompt --freeze-backbone \\
        --epochs 200 --lr 3e-3 --max-length 64 --out DIR

The first ``rm_score`` with ``model_path: safety-rm`` builds it into ``<cache>/models/safety-rm-v1``
(``<cache>`` = ``$GRPOKIT_CACHE`` or ``~/.cache/grpokit``) in a child process with the CPU
numerics pinned (:func:`grpokit.model.fingerprint.pinned_build`), about a minute on one core, and
logs its fingerprint; later runs load that folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

VERSION = 1  # bump when the data or the recipe changes, so a stale cached model is rebuilt
SAFETY_RM = "safety-rm"
SAFETY_RM_ARGS = ("--kind", "regression", "--data", "generated:safety_aspects", "--rows", "600",
                  "--aspects", "helpfulness,harmlessness,format", "--prompt-column", "prompt", "--freeze-backbone",
                  "--epochs", "200", "--lr", "3e-3", "--max-length", "64", "--seed", "0")
BUILT_RMS = {SAFETY_RM: SAFETY_RM_ARGS}
_LOGGED: set[Path] = set()  # folders whose fingerprint was logged (once per process, not per reward call)


def built_rm_folder(name: str) -> Path:
    """The cache folder of the built-in reward model ``name``."""
    from grpokit.model.loading import cache_dir

    return cache_dir() / "models" / f"{name}-v{VERSION}"


def resolve_rm_path(model_path: str | os.PathLike[str]) -> Path:
    """``model_path`` as a folder: a built-in name is built on first use (module docstring), a path is kept."""
    name = str(model_path)
    if name not in BUILT_RMS:
        return Path(name).expanduser()
    from grpokit.model.fingerprint import log_fingerprint, pinned_build
    from grpokit.rewards.reward_model import CONFIG_FILE

    folder = built_rm_folder(name)
    if not (folder / CONFIG_FILE).is_file():
        pinned_build("grpokit.rewards.rm_builtin:build_rm", folder, name=name)
    if folder not in _LOGGED:
        log_fingerprint(folder, name)
        _LOGGED.add(folder)
    return folder


def build_rm(out: Path, *, name: str) -> Path:
    """Train the built-in ``name`` with ``grpokit rm train`` into ``out`` (atomically) and record its fingerprint."""
    from grpokit.model.fingerprint import record
    from grpokit.rm_cli import rm_train_main

    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if rm_train_main([*BUILT_RMS[name], "--out", str(tmp), "--quiet"]) != 0:
        raise RuntimeError(f"building reward model '{name}' failed; run `grpokit rm train {' '.join(BUILT_RMS[name])} "
                           "--out DIR` to see why")
    record(tmp, name, {"args": " ".join(BUILT_RMS[name]), "version": VERSION})
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out
