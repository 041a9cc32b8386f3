"""Scale-out: Ray rollout workers (SHARDCAST, TOPLOC, async staleness bound) and torchrun learners.

Ray is imported lazily: ``import grpokit.distributed`` works without the ``[ray]`` extra.
"""

from __future__ import annotations

from typing import Any


def make_trainer(cfg: Any, **kwargs: Any) -> Any:
    """The trainer for ``cfg``: :class:`AsyncTrainer` when ``distributed.rollout_workers > 0``, else ``Trainer``."""
    if cfg.distributed.rollout_workers > 0:
        from grpokit.distributed.async_loop import AsyncTrainer

        return AsyncTrainer(cfg, **kwargs)
    from grpokit.trainer.loop import Trainer

    return Trainer(cfg, **kwargs)
