"""Data-parallel learners on torch.distributed: one config, 1 or N learner processes (torchrun).

Launch ``torchrun --nproc_per_node N -m grpokit.cli train CONFIG``; without the torchrun
environment (``WORLD_SIZE`` unset or 1) the run is the plain single process, unchanged. With N
learners one step is:

1. rank 0 samples and scores the whole batch exactly as the single-process run does (same data
   order, same RNG stream) and broadcasts it (``broadcast_object_list``); sampling therefore
   happens on rank 0 only — the Ray rollout workers of ``distributed.rollout_workers`` are what
   spread sampling over machines;
2. every rank computes the advantages of the whole batch (identical on all ranks);
3. rank r learns a contiguous slice of *whole groups* (``group_slices``), cut into micro-batches;
   every micro-batch's loss is normalised by the WHOLE batch's sequence / token counts (as
   :func:`grpokit.trainer.learner.accumulate_gradients` does), so

       g = sum_r sum_{m in rank r} grad L_m  =  grad L(full batch)

   and an all-reduce with SUM of the ranks' gradients gives every rank the single-process
   gradient before clipping;
4. every rank clips and steps its own optimizer on that gradient, so the weights stay identical
   (the parameters are also broadcast from rank 0 once at start-up, as DDP does).

Learn metrics are reduced over ranks to the single-process values (``loss`` summed, the others
token-weighted means); ``grad_norm`` is computed after the all-reduce, so it is the global norm.
Logging, checkpoints, evaluation and the report happen on rank 0 only; other ranks log nothing
below WARNING. A resumed run loads the checkpoint on every rank, so ``logging.output_dir`` must be
on a file system all ranks see. Backend: ``distributed.learner_backend`` (``auto`` = NCCL when the
policy's parameters are on a GPU, else gloo). Algorithm: DeepSeekMath GRPO (arXiv 2402.03300);
data-parallel learners as in INTELLECT-2 (arXiv 2505.07291), whose trainer shards with FSDP instead;
``distributed.learner=fsdp`` does too (:mod:`grpokit.distributed.fsdp`).
"""

from __future__ import annotations

import atexit
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

import torch
from rich.console import Console

from grpokit.config.schema import DistributedConfig
from grpokit.devices import module_device, place_model
from grpokit.rollout.types import RolloutBatch
from grpokit.trainer.learner import micro_batches
from grpokit.trainer.metrics import RunLogger

log = logging.getLogger(__name__)
T = TypeVar("T")
_BUCKET_BYTES = 32 << 20  # gradients are all-reduced in flat buckets of at most 32 MiB


def group_slices(group_ids: torch.Tensor, world_size: int) -> list[slice]:
    """Contiguous row ranges, one per rank, that never split a group; balanced by row count.

    group_ids: ``[B]``, each group's rows adjacent (prompt-major, as every backend returns them).
    The cut before rank r is the group boundary nearest to ``r * B / world_size`` (ties: the later one); a rank may get
    an empty slice when there are fewer groups than ranks.
    """
    b = len(group_ids)
    change = (group_ids[1:] != group_ids[:-1]).nonzero().squeeze(-1) + 1
    bounds = [0] + change.tolist() + [b]
    if len(bounds) - 1 != int(torch.unique(group_ids).numel()):
        raise ValueError("data-parallel learners need each group's rows to be adjacent in the batch")
    cuts = [0]
    for r in range(1, world_size):
        target = r * b / world_size
        cuts.append(min((x for x in bounds if x >= cuts[-1]), key=lambda x: (abs(x - target), -x)))  # ties: earlier ranks get more
    cuts.append(b)
    return [slice(cuts[r], cuts[r + 1]) for r in range(world_size)]


def rank_micro_batches(batch: RolloutBatch, size: int, rows: slice) -> list[tuple[torch.Tensor, RolloutBatch]]:
    """``(row indices into the full batch, trimmed micro-batch)`` pairs covering ``rows`` in steps of ``size``.

    :func:`grpokit.trainer.learner.micro_batches` restricted to ``rows``; it equals that function's
    result when ``rows`` is the whole batch, and no index leaves ``rows``.
    """
    return micro_batches(batch, size, rows)


def resolve_backend(name: str, model: torch.nn.Module) -> str:
    """``gloo`` or ``nccl`` for ``distributed.learner_backend`` (``auto`` follows the policy's device)."""
    on_gpu = module_device(model).type == "cuda"
    if name == "auto":
        return "nccl" if on_gpu else "gloo"
    if name == "nccl" and not on_gpu:
        raise ValueError("distributed.learner_backend=nccl needs the policy on a GPU; set it to auto or gloo")
    return name


@dataclass
class Learners:
    """This process's place among the data-parallel learners (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world_size: int = 1
    backend: Optional[str] = None
    sharded = False  # FSDP learners (grpokit.distributed.fsdp.ShardedLearners) hold 1/N of the model each

    def prepare(self, policy: Any) -> None:
        """Before the optimizer is built: nothing here (sharded learners shard the policy)."""

    def clip_gradients(self, params: list[torch.nn.Parameter], max_norm: float) -> float:
        """Clip the (all-reduced) gradients to ``max_norm``; returns their norm before clipping."""
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    def write_shards(self, ckpt_root: Any, step: int, model: torch.nn.Module, optimizer: Any) -> tuple[None, None]:
        """(sharded checkpoint folder, gathered weights): none for whole-model learners, rank 0 saves as one process does."""
        return None, None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def on_main(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on rank 0 only and hand its (picklable) result to every rank."""
        if not self.distributed:
            return fn()
        box = [fn() if self.is_main else None]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def agree(self, value: T) -> T:
        """Rank 0's ``value`` on every rank (e.g. whether the time budget is spent)."""
        return self.on_main(lambda: value)

    def parts(self, batch: RolloutBatch, size: int, keep: Optional[torch.Tensor] = None) -> list[tuple[slice, RolloutBatch]]:
        """This rank's micro-batches: its slice of whole groups, in steps of ``size`` rows.

        ``keep`` ([B] bool, single process only): the rows to learn from; the others are left out.
        """
        if keep is not None and self.distributed:
            raise ValueError("Learners.parts: row selection is not supported with several learners")
        rows = group_slices(batch.group_ids, self.world_size)[self.rank] if self.distributed else slice(0, len(batch))
        if keep is not None:
            rows = keep.nonzero().squeeze(-1)
        return rank_micro_batches(batch, size, rows)

    def all_sum(self, value: float) -> float:
        """Sum of ``value`` over ranks (a scalar partial sum of a whole-batch quantity)."""
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self._device())
        torch.distributed.all_reduce(t)
        return float(t)

    def all_reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """``p.grad <- sum over ranks of p.grad`` for every trainable parameter, in flat buckets.

        A parameter no rank has a gradient for keeps ``grad = None`` (the optimizer skips it, as in
        the single process); one that only some ranks touched gets zeros on the others first.
        """
        if not self.distributed:
            return
        has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=self._device())
        torch.distributed.all_reduce(has)
        used = [p for p, h in zip(params, has.tolist()) if h > 0]
        for p in used:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket: list[torch.Tensor] = []
        size = 0
        for p in used:
            if bucket and (size > _BUCKET_BYTES or bucket[0].dtype != p.grad.dtype):
                _all_reduce_flat(bucket)
                bucket, size = [], 0
            bucket.append(p.grad)
            size += p.grad.numel() * p.grad.element_size()
        if bucket:
            _all_reduce_flat(bucket)

    def reduce_metrics(self, metrics: dict[str, float], parts: list[tuple[slice, RolloutBatch]], loss_mask: torch.Tensor) -> dict[str, float]:
        """Whole-batch learn metrics from each rank's ``accumulate_gradients`` metrics.

        ``loss`` is a sum over micro-batches (each normalised by the whole batch), so it is summed
        over ranks; every other metric is a mean weighted by the rank's loss-mask tokens
        ``w_r``: ``m = sum_r m_r w_r / max(sum_r w_r, 1)``, the single-process value.
        """
        if not self.distributed:
            return metrics
        weight = sum(float(loss_mask[rows].sum()) for rows, _ in parts if rows is not None)  # None: a sharded learner's padding pass
        gathered: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(gathered, (metrics, weight))
        total_w = sum(w for _, w in gathered)
        keys = sorted({k for m, _ in gathered for k in m})
        out = {}
        for k in keys:
            if k == "loss":
                out[k] = sum(m.get(k, 0.0) for m, _ in gathered)
            else:
                out[k] = sum(m.get(k, 0.0) * max(w, 1.0) for m, w in gathered if k in m) / max(total_w, 1.0)
        return out

    def sync_parameters(self, model: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers to every rank (identical starting weights)."""
        if not self.distributed:
            return
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                torch.distributed.broadcast(t.data, src=0)

    def _device(self) -> torch.device:
        """Where collectives' tensors live: this rank's GPU under NCCL, the CPU under gloo."""
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")


class SilentLogger(RunLogger):
    """The RunLogger of ranks > 0: same interface, writes and prints nothing (rank 0 owns the run folder)."""

    def __init__(self) -> None:
        self.run_dir, self.writer = None, None
        self.console = Console(stderr=True, quiet=True)

    def _append(self, name: str, record: dict[str, Any]) -> None:
        pass

    def truncate_after(self, step: int) -> None:
        pass


def _all_reduce_flat(grads: list[torch.Tensor]) -> None:
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def local_cuda_device() -> torch.device:
    """``cuda:LOCAL_RANK``: the GPU of this torchrun learner (one GPU per rank, ranks of a node in order)."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    count = torch.cuda.device_count()
    if local >= count:
        raise ValueError(
            f"distributed.learner_backend=nccl: LOCAL_RANK={local} but this node has {count} CUDA device(s); "
            "launch at most one learner per GPU (torchrun --nproc_per_node)"
        )
    return torch.device("cuda", local)


def init_learners(cfg: DistributedConfig, model: torch.nn.Module) -> Learners:
    """Join the torchrun process group (if launched by torchrun) and sync the starting weights.

    Reads ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` from the environment; without them (or with
    ``WORLD_SIZE=1``) returns the single-process ``Learners()`` and touches nothing. Under NCCL
    rank r uses ``cuda:LOCAL_RANK`` (:func:`local_cuda_device`) and the policy is moved there if it
    was placed elsewhere (parameters keep their identity, so an optimizer built before still holds them).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    sharded = cfg.learner == "fsdp"  # under torchrun (checked at load), even on one rank
    if world <= 1 and not sharded:
        return Learners()
    backend = resolve_backend(cfg.learner_backend, model)
    if backend == "nccl":
        local = local_cuda_device()
        torch.cuda.set_device(local)
        if module_device(model) != local:  # model.device=cuda put every rank on cuda:0 before the ranks were known
            place_model(model, local)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend=backend)
        atexit.register(_shutdown)
    ranks = dict(rank=torch.distributed.get_rank(), world_size=torch.distributed.get_world_size(), backend=backend)
    if sharded:
        from grpokit.distributed.fsdp import ShardedLearners

        learners: Learners = ShardedLearners(**ranks, shard_cfg=cfg)
    else:
        learners = Learners(**ranks)
    if not learners.is_main:
        logging.getLogger("grpokit").setLevel(logging.WARNING)  # rank 0 speaks for the run
    learners.sync_parameters(model)
    log.info("%s learners: %d ranks over %s", "sharded (FSDP)" if sharded else "data-parallel", learners.world_size, backend)
    return learners


def _shutdown() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
