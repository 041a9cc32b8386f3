"""Scale-out: Ray rollout workers (SHARDCAST, TOPLOC, async staleness bound) and torchrun learners.

Ray is imported lazily: ``import grpokit.distributed`` works without the ``[ray]`` extra.
"""

from __future__ import annotations

import importlib.util
from typing import Any


class MissingExtraError(ImportError):
    """An optional dependency of the requested feature is not installed (one-line user error)."""


def require_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        raise MissingExtraError(
            "distributed.rollout_workers > 0 needs Ray: pip install 'grpokit[ray]' (or set distributed.rollout_workers=0)"
        )


def make_trainer(cfg: Any, **kwargs: Any) -> Any:
    """The trainer for ``cfg``: :class:`AsyncTrainer` when ``distributed.rollout_workers > 0``, else ``Trainer``."""
    if cfg.distributed.rollout_workers > 0:  # under torchrun rank 0 drives the workers, every rank learns
        require_ray()
        from grpokit.distributed.async_loop import AsyncTrainer

        return AsyncTrainer(cfg, **kwargs)
    from grpokit.trainer.loop import Trainer

    return Trainer(cfg, **kwargs)
