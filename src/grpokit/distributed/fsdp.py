"""Sharded learners: FSDP2 (``torch.distributed.fsdp.fully_shard``) over the policy's decoder layers.

``distributed.learner: fsdp`` under ``torchrun --nproc_per_node N -m grpokit.cli train CONFIG``.
Each decoder layer is one FSDP unit, then the root (embeddings, final norm, LM head — tied or
not) is the last, as in "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel"
(arXiv 2304.11277, Sec. 3) and its per-parameter successor FSDP2. Every rank keeps 1/N of each
parameter, its gradient and its AdamW moments; a unit's full weights exist only while its
forward or backward runs (all-gather before, reduce-scatter of the gradient after). The step is
the data-parallel one of :mod:`grpokit.distributed.ddp` (rank 0 samples and broadcasts the
batch, rank r learns its slice of whole groups, every micro-batch's loss normalised by the whole
batch) with three differences:

1. the reduce-scatter SUMS the ranks' gradients (divide factor 1, sum-only collectives, so gloo
   works too): each rank holds its shard of the single-process gradient, and the global gradient
   norm (clipping, ``grad_norm``) is reduced over the shards;
2. FSDP's collectives run in every forward and backward, so all ranks must run the same number
   of them: a rank with fewer micro-batches than the busiest one runs padding passes, marked
   ``(None, micro_batch)`` in its parts, whose forward and backward contribute exactly nothing
   (:func:`grpokit.trainer.learner.accumulate_gradients` backpropagates ``0 * logp``);
3. whatever rank 0 alone runs on the policy (sampling, evaluation, batch stages: ``on_main``)
   runs inside :meth:`ShardedLearners.gathered`: every rank all-gathers every unit first and
   frees it after, so rank 0's forwards need no collective (generation memory = the full
   parameters once, 1/4 of fp32 training state).

With LoRA (``model.lora.enabled``) the frozen base weights and the adapter are sharded alike (only
the adapter has gradients and AdamW state); the reference is the policy with its adapter
disabled, so it is sharded too, and checkpoints hold the adapter folder as a single process saves it.
Otherwise the frozen reference and teacher models stay whole on each rank (no gradient, no optimizer
state: 4 bytes per parameter against the 16 of the trained copy); they never run FSDP code.
With Ray rollout workers (``distributed.rollout_workers``) rank 0 drives them and every rank
takes part in gathering the full weights to rank 0 before each SHARDCAST publication
(:meth:`grpokit.distributed.async_loop.AsyncTrainer.publish`), as INTELLECT-2's FSDP2 trainer
(arXiv 2505.07291, Sec. 2) publishes whole checkpoints to its inference workers.
Checkpoints (:func:`save_shards`, :func:`load_shards`) go through ``torch.distributed.checkpoint``:
each rank writes its shards of the model and optimizer state, and a run on any number of ranks —
one plain process included — loads them resharded; rank 0 also writes the gathered full weights
as a plain Hugging Face folder (``save_pretrained``). Measured (tests/distributed/test_fsdp.py,
benchmarks/learner_memory.py --ranks): see docs/scaling.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from grpokit.distributed.ddp import Learners
from grpokit.rollout.types import RolloutBatch

log = logging.getLogger(__name__)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def sharding_problem(cfg: Any) -> Optional[str]:
    """One line saying why ``cfg`` cannot run with its ``distributed.learner``, or None (checked before any model loads)."""
    d = cfg.distributed
    if d.learner != "fsdp":
        if d.fsdp_param_dtype or d.fsdp_reduce_dtype or d.fsdp_cpu_offload:
            return "distributed.fsdp_param_dtype / fsdp_reduce_dtype / fsdp_cpu_offload apply to sharded learners: set distributed.learner=fsdp or leave them unset"
        return None
    if "WORLD_SIZE" not in os.environ:
        return ("distributed.learner=fsdp shards the model over torchrun learners: launch "
                "`torchrun --nproc_per_node N -m grpokit.cli train ...` or set distributed.learner=ddp")
    from grpokit.registries import get_registry

    gradient_combiner = "objective_grads" in get_registry("combiner").spec(cfg.reward_combiner.name).inputs
    refusals = [
        (gradient_combiner, f"reward_combiner.name={cfg.reward_combiner.name}: its per-objective gradients are taken on rank 0 alone, where sharded weights cannot back-propagate; set distributed.learner=ddp"),
        (cfg.variational.enabled, "variational.enabled: the posterior q is updated on rank 0 alone, where sharded weights cannot back-propagate; set distributed.learner=ddp"),
        (_reads_previous_policy(cfg), f"algorithm.loss={cfg.algorithm.loss}: its previous-policy snapshot (prev_logp) swaps whole weights into the module, never done on sharded ones; set distributed.learner=ddp"),
        (cfg.stage != "grpo", f"stage={cfg.stage}: the offline trainer has no sharded learner; set distributed.learner=ddp"),
        (cfg.model.lora.enabled and cfg.model.lora.save_merged, "model.lora.save_merged: merging needs the whole model in one process; set it to false and merge the saved adapter afterwards"),
        (cfg.rollout.backend == "vllm", "rollout.backend=vllm: the engine loads whole weights, not shards; set rollout.backend=hf or distributed.learner=ddp"),
        (cfg.train.sequence_chunk > 0, "train.sequence_chunk > 0: StreamBP's chunk count follows each rank's lengths, so the ranks' collectives would not line up; set train.sequence_chunk=0"),
        (cfg.algorithm.ref_sync_every > 0, "algorithm.ref_sync_every > 0: the whole reference cannot copy sharded weights yet; set algorithm.ref_sync_every=0 or distributed.learner=ddp"),
        (cfg.model.device == "cpu" and (d.fsdp_param_dtype or d.fsdp_reduce_dtype), "distributed.fsdp_param_dtype / fsdp_reduce_dtype: mixed precision is for CUDA; on model.device=cpu leave them unset"),
        (cfg.model.device == "cpu" and d.fsdp_cpu_offload, "distributed.fsdp_cpu_offload: the policy is already in CPU memory (model.device=cpu); set it to false"),
    ]
    return next((f"distributed.learner=fsdp with {why}" for bad, why in refusals if bad), None)


def _reads_previous_policy(cfg: Any) -> bool:
    """The run's method reads ``prev_logp``, the policy one update behind (Reg-GRPO)."""
    from grpokit.trainer.inputs import needed_inputs

    return "prev_logp" in needed_inputs(cfg)


def fsdp_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The FSDP units of ``model`` (decoder layers, then the root), [] when it is not sharded."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def shard_model(model: torch.nn.Module, cfg: Any) -> list[torch.nn.Module]:
    """``fully_shard`` each decoder layer, then the root; gradients are SUMMED over ranks. Returns the units.

    ``cfg``: DistributedConfig (mixed precision and CPU offload, CUDA only: refused on a CPU policy).
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    from grpokit.devices import module_device
    from grpokit.model.checkpointing import decoder_layers

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    if decoder is None or decoder is base:
        raise ValueError(f"distributed.learner=fsdp shards a causal LM's decoder layers; {type(base).__name__} has no decoder: set distributed.learner=ddp")
    on_gpu = module_device(model).type == "cuda"
    if not on_gpu and (cfg.fsdp_param_dtype or cfg.fsdp_reduce_dtype or cfg.fsdp_cpu_offload):
        raise ValueError("distributed.fsdp_param_dtype / fsdp_reduce_dtype / fsdp_cpu_offload need the policy on a GPU: leave them unset on CPU")
    mp = MixedPrecisionPolicy(param_dtype=DTYPES.get(cfg.fsdp_param_dtype), reduce_dtype=DTYPES.get(cfg.fsdp_reduce_dtype))
    offload = CPUOffloadPolicy() if cfg.fsdp_cpu_offload else OffloadPolicy()
    for layer in decoder_layers(decoder):
        fully_shard(layer, mp_policy=mp, offload_policy=offload, reshard_after_forward=True)
    fully_shard(model, mp_policy=mp, offload_policy=offload, reshard_after_forward=True)
    units = fsdp_modules(model)
    for unit in units:  # each micro-batch's loss is already normalised by the whole batch: sum, never average
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
    return units


def root_forward(model: torch.nn.Module, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(module, *args)`` run as a forward of the FSDP root ``model`` when ``module is model``.

    The learner's log-prob path calls the decoder and reads the LM head's weight directly (the
    chunked head), past ``model.forward``; registered as an FSDP forward method
    (``register_fsdp_forward_method``) the root's weights are gathered around it and its
    gradients reduce-scattered after the backward. Other modules (the whole reference) run plain.
    """
    from torch.distributed.fsdp import register_fsdp_forward_method

    model._grpokit_root_call = lambda call, *args, **kwargs: call(model, *args, **kwargs)
    register_fsdp_forward_method(model, "_grpokit_root_call")

    def run(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if module is model:
            return model._grpokit_root_call(fn, *args, **kwargs)
        return fn(module, *args, **kwargs)

    return run


@dataclass
class ShardedLearners(Learners):
    """Data-parallel learners whose policy is sharded with FSDP2 (see the module docstring)."""

    shard_cfg: Any = None  # DistributedConfig
    units: list = field(default_factory=list)  # FSDP units, after prepare()
    sharded = True

    def prepare(self, policy: Any) -> None:
        """Shard ``policy.module`` (before the optimizer is built) and route the policy's log-probs through the root."""
        if not hasattr(policy, "logprobs"):
            raise ValueError(f"distributed.learner=fsdp shards text causal-LM policies; {type(policy).__name__} is not one: set distributed.learner=ddp")
        self.units = shard_model(policy.module, self.shard_cfg)
        from grpokit.model.logprobs import completion_logprobs

        policy.logprobs = root_forward(policy.module, completion_logprobs)
        policy.split_prompt_backward = False  # its second backward would read the root's freed weights
        log.info("FSDP: %d units sharded over %d ranks", len(self.units), self.world_size)

    @contextlib.contextmanager
    def gathered(self) -> Iterator[None]:
        """Every unit's full weights on every rank for the block (rank 0 then runs forwards alone)."""
        if not self.units:
            yield
            return
        for unit in self.units:
            unit.set_reshard_after_forward(False, recurse=False)
            unit.unshard()
        try:
            yield
        finally:
            for unit in self.units:
                unit.reshard()
                unit.set_reshard_after_forward(True, recurse=False)

    def on_main(self, fn):
        with self.gathered():
            return Learners.on_main(self, fn)

    def agree(self, value):
        return Learners.on_main(self, lambda: value)  # a flag: no weights needed

    def parts(self, batch: RolloutBatch, size: int, keep: Optional[torch.Tensor] = None) -> list:
        """This rank's micro-batches, padded with ``(None, micro_batch)`` passes to the busiest rank's count."""
        real = Learners.parts(self, batch, size, keep)
        if not self.distributed:
            return real
        most = torch.tensor([len(real)], dtype=torch.int64, device=self._device())
        torch.distributed.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
        from grpokit.trainer.learner import trim

        pad = trim(batch.select(torch.zeros(1, dtype=torch.long, device=batch.group_ids.device)))
        return real + [(None, pad)] * (int(most) - len(real))

    def all_reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Nothing: FSDP reduce-scattered every gradient in the backward."""

    def clip_gradients(self, params: list[torch.nn.Parameter], max_norm: float) -> float:
        """Clip to the global norm over all shards; returns that norm."""
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def write_shards(self, ckpt_root: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        """(DCP folder of this step's sharded model + optimizer state, full weights on rank 0 / None elsewhere); collective."""
        staging = ckpt_root / f".dcp-step-{step}"
        if self.is_main:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        torch.distributed.barrier()
        save_shards(model, optimizer, staging)
        weights = full_state_dict(model)
        return staging, (untied(model, weights) if self.is_main else None)


def save_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path) -> None:
    """Write ``model`` and ``optimizer`` state to ``folder`` with ``torch.distributed.checkpoint`` (each rank its shards)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(folder))


def load_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path) -> None:
    """Load a :func:`save_shards` folder into ``model`` / ``optimizer``, sharded over any number of ranks or whole."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)  # the target layout: this run's shards (or whole tensors)
    state = {"model": model_state, "optimizer": optim_state}
    alone = not torch.distributed.is_initialized()  # one plain process resuming: DCP reads every shard itself
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)  # intended
        dcp.load(state, checkpoint_id=str(folder), no_dist=alone)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights, gathered to rank 0's CPU memory (collective; other ranks get an empty dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def untied(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``weights`` without the second name of a tied parameter (the LM head tied to the embedding), as ``save_pretrained`` writes it."""
    seen: set[int] = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            weights.pop(name, None)
        seen.add(id(param))
    return weights
