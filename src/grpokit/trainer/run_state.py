"""What a run writes to resume from, and how it resumes: checkpoints of a :class:`~grpokit.trainer.loop.Trainer`.

A checkpoint holds the weights (sharded learners: DCP shards plus the gathered HF folder), the
optimizer and scheduler, the prompt sampler's position and the training wall time, and every
stateful part of the method (:func:`stateful_parts`). Resuming restores all of it, so a resumed
run continues exactly (same prompts, same RNG streams, same learning-rate schedule).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

import torch

from grpokit.distributed.fsdp import load_shards
from grpokit.trainer import checkpoint as ckpt_io
from grpokit.trainer.inputs import RunContractError
from grpokit.trainer.stages import PreviousWeights

if TYPE_CHECKING:
    from grpokit.trainer.loop import Trainer

log = logging.getLogger(__name__)


def stateful_parts(trainer: "Trainer") -> dict[str, Any]:
    """Algorithm parts with state that checkpoints must carry (advantage history, curricula, combiners, a synced reference, stages)."""
    parts = {
        "advantage_state": trainer.advantage_state,
        "curriculum": getattr(trainer.sampler, "curriculum", None),
        "combiner_state": trainer.combiner.state,
        "reference": trainer.policy.reference if trainer.cfg.algorithm.ref_sync_every else None,  # it follows the policy
        "previous_weights": PreviousWeights(trainer.policy) if "prev_logp" in trainer.needs else None,  # pi_old of Reg-GRPO
        # batch stages with weights or state of their own (e.g. a posterior model and its optimizer)
        **{f"stage/{type(s).__name__}": s for s in trainer.stages if hasattr(s, "state_dict")},
    }
    return {k: v for k, v in parts.items() if v is not None}


def save_run(trainer: "Trainer") -> Optional[Path]:
    """A checkpoint of the trainer's current step under ``output_dir/checkpoints`` (None on ranks other than 0)."""
    # sharded learners: every rank writes its shards (DCP), rank 0 gets the gathered weights for the HF folder
    shards, weights = trainer.learners.write_shards(trainer.run_dir / "checkpoints", trainer.step, trainer.model, trainer.optimizer)
    if not trainer.learners.is_main:
        return None
    return ckpt_io.save_checkpoint(
        trainer.run_dir / "checkpoints",
        trainer.step,
        model=trainer.model,
        tokenizer=trainer.tokenizer,
        optimizer=trainer.optimizer,
        scheduler=trainer.scheduler,
        state={"sampler": trainer.sampler.state(), "elapsed_s": trainer.elapsed},
        extra={k: v.state_dict() for k, v in stateful_parts(trainer).items()},
        keep=trainer.cfg.logging.keep_checkpoints,
        merged=trainer.cfg.model.lora.save_merged,
        processors=trainer.family.checkpoint_extras(trainer.policy),
        state_dict=weights,
        shards=shards,
    )


def resume_run(trainer: "Trainer") -> bool:
    """Load the latest complete checkpoint of ``output_dir`` into ``trainer`` (none is a one-line error); True when resumed."""
    ckpt = ckpt_io.require_checkpoint(trainer.run_dir / "checkpoints")
    if (ckpt / ckpt_io.SHARDS).is_dir():  # model + optimizer from DCP shards: any number of ranks, sharded or whole
        load_shards(trainer.model, trainer.optimizer, ckpt / ckpt_io.SHARDS)
        state = ckpt_io.load_training_state(ckpt, None, trainer.scheduler)
    elif trainer.learners.sharded:
        raise ckpt_io.CheckpointError(f"distributed.learner=fsdp resumes from sharded checkpoints; {ckpt} has no {ckpt_io.SHARDS}/ folder: resume it with distributed.learner=ddp")
    else:
        ckpt_io.load_model_weights(trainer.model, ckpt)
        state = ckpt_io.load_training_state(ckpt, trainer.optimizer, trainer.scheduler)
    trainer.sampler.load_state(state["sampler"])
    parts = stateful_parts(trainer)
    if parts:
        extra = torch.load(ckpt / "extra.pt", weights_only=False) if (ckpt / "extra.pt").is_file() else {}
        for key, part in parts.items():
            if key not in extra:  # e.g. Reg-GRPO's previous-policy snapshot, saved only by newer grpokit
                raise RunContractError(f"{ckpt} holds no '{key}' state, which this run's method resumes from (the checkpoint "
                                       "predates it): resume from a newer checkpoint or start the run again")
            part.load_state_dict(extra[key])
    trainer.step = state["step"]
    trainer.elapsed = state.get("elapsed_s", 0.0)
    trainer.logger.truncate_after(trainer.step)
    log.info("resumed from %s (step %d)", ckpt, trainer.step)
    return True


@contextlib.contextmanager
def checkpoint_on_interrupt(trainer: "Trainer") -> Iterator[None]:
    """Ctrl-C saves the last completed step before leaving, so ``--resume`` loses nothing."""
    try:
        yield
    except KeyboardInterrupt:
        if trainer.step > 0:
            if trainer._step_start is not None:  # rewind data and RNG to the unfinished step's start
                trainer.sampler.load_state(trainer._step_start[0])
                ckpt_io.set_rng_state(trainer._step_start[1])
            log.warning("interrupted: saving step %d to resume from (grpokit train ... --resume)", trainer.step)
            trainer.save()
        raise
