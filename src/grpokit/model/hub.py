"""Models in the Hugging Face Hub's cache layout, found offline (nothing here downloads).

``huggingface_hub`` (``snapshot_download``, ``hf download``, ``from_pretrained``) keeps the repo
``org/name`` in ``<cache>/models--org--name/``::

    refs/main          the commit hash ``main`` pointed to when it was downloaded
    snapshots/<hash>/  the files of that commit (symlinks into blobs/): a plain model folder
    blobs/             the file contents, named by their hash

``<cache>`` is ``$HF_HUB_CACHE`` (or the older ``$HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``,
else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``, as in
``huggingface_hub.constants`` (read here at call time, not at import). The layout is described in
https://huggingface.co/docs/huggingface_hub/guides/manage-cache. Every lookup returns
``(folder, None)`` or ``(None, one-line problem)``, so callers can refuse a name before loading.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Optional

logger = logging.getLogger(__name__)

REPO_PREFIX = "models--"
# A Hub model id: "name" or "org/name", letters, digits, "-", "_", "." (huggingface_hub's validate_repo_id).
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
Found = tuple[Optional[Path], Optional[str]]


def hub_cache_dir() -> Path:
    """The Hugging Face Hub cache folder that transformers reads, from the environment."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expandvars(os.environ[var])).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def is_hub_id(text: str) -> bool:
    """``text`` has the form of a Hub model id (``org/name`` or ``name``), not of a path or a .gguf file."""
    return bool(_HUB_ID.fullmatch(text)) and "--" not in text and ".." not in text and not text.lower().endswith(".gguf")


def repo_folder(hub_id: str, cache: Optional[Path] = None) -> Path:
    """``<cache>/models--org--name``: where the Hub cache keeps ``hub_id``."""
    return (cache or hub_cache_dir()) / (REPO_PREFIX + hub_id.replace("/", "--"))


def is_repo_folder(path: Path) -> bool:
    """``path`` is one repo of a Hub cache (``models--org--name`` with ``snapshots/``)."""
    return path.name.startswith(REPO_PREFIX) and (path / "snapshots").is_dir()


def cached_models(cache: Path) -> list[str]:
    """Hub ids of the models in cache folder ``cache`` (its ``models--*`` repos), sorted."""
    if not cache.is_dir():
        return []
    return sorted(hub_id_of(p) or p.name for p in cache.iterdir() if p.is_dir() and is_repo_folder(p))


def hub_id_of(path: Path) -> Optional[str]:
    """``org/name`` for a Hub cache repo folder or one of its snapshots, else None."""
    repo = path.parent.parent if path.parent.name == "snapshots" else path
    if not repo.name.startswith(REPO_PREFIX) or len(repo.name) == len(REPO_PREFIX):
        return None
    return repo.name[len(REPO_PREFIX):].replace("--", "/")


def snapshot(repo: Path) -> Found:
    """The snapshot folder ``refs/main`` of cache repo ``repo`` names (the only snapshot if it has no refs/main)."""
    ref = repo / "refs" / "main"
    snapshots = repo / "snapshots"
    if ref.is_file():
        commit = ref.read_text().strip()
        folder = snapshots / commit
        if folder.is_dir():
            return folder, None
        return None, (f"'{repo}' refs/main names snapshot {commit}, which is not in {snapshots}: "
                      f"download the model again, or give one of its snapshot folders")
    found = sorted(p for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []
    if len(found) == 1:  # downloaded by commit hash: no branch ref was written, the one snapshot is the model
        return found[0], None
    if not found:
        return None, f"'{repo}' has no snapshot in {snapshots}: download the model again"
    return None, (f"'{repo}' has {len(found)} snapshots and no refs/main to choose one: give the snapshot "
                  f"folder itself, e.g. {found[-1]}")


def find_cached(hub_id: str) -> Found:
    """The snapshot of Hub model ``hub_id`` in the Hub cache, or the one-line problem saying where it looked."""
    cache = hub_cache_dir()
    repo = repo_folder(hub_id, cache)
    if repo.is_dir():
        folder, problem = snapshot(repo)
        if folder is not None:
            logger.debug("model %s from the Hugging Face cache: %s", hub_id, folder)
        return folder, problem
    return None, (f"model '{hub_id}' is not in the Hugging Face cache (no {repo}; the cache is $HF_HUB_CACHE, "
                  f"else $HF_HOME/hub) and grpokit never downloads: run `hf download {hub_id}` (or "
                  f"`huggingface-cli download {hub_id}`) on a machine with internet and copy that cache here "
                  f"or point HF_HUB_CACHE at it, or give a local model folder")


def local_folder(path: Path) -> Found:
    """What an existing path loads: a Hub cache repo resolves to its snapshot; a whole cache folder is refused."""
    if is_repo_folder(path):
        return snapshot(path)
    if path.is_dir() and not (path / "config.json").is_file():
        names = cached_models(path)
        if names:
            return None, (f"'{path}' is a Hugging Face cache folder holding {', '.join(names)}: give one model, "
                          f"e.g. {repo_folder(names[0], path)}, or set HF_HUB_CACHE={path} and give its id '{names[0]}'")
    return path, None
