"""Asynchronous GRPO with Ray rollout workers, as in INTELLECT-2 (arXiv 2505.07291).

The learner's step is the single-process step (:class:`grpokit.trainer.loop.Trainer`) with its
collect stage swapped: instead of sampling in-process it

1. keeps up to min(``distributed.queue_size``, k + 1) requests (``prompts_per_step`` prompts
   each) in flight on ``distributed.rollout_workers`` Ray actors, k = ``distributed.staleness``:
   a request issued after version v was published and m requests behind the oldest is trained
   at step v + m, so k + 1 in flight never makes a stale batch; while a batch is learned, new
   requests go out only up to k in flight (they are made with the pre-update weights);
2. takes the oldest request's batch. Staleness is bounded by admission control (at most k + 1
   requests in flight), not by dropping finished rollouts: a batch that is older than k anyway
   (a failure or a rejection reordered the queue) is trained like any other, and every stale
   batch is corrected for the weights that sampled it (``algorithm.correction``: decoupled PPO
   by default; ``async/over_staleness`` counts batches older than k);
3. checks the batch's TOPLOC commitment when its worker is untrusted (a no-grad prefill with the
   weights of version v, one extra forward per checked batch); a batch that fails is dropped and
   its prompts re-issued to another worker;
4. scores the rewards itself (workers return raw batches), learns, then publishes its weights as
   version ``step`` through SHARDCAST and appends the trained prompts to ``trained_prompts.jsonl``.

Under torchrun (``distributed.learner: ddp`` or ``fsdp``) rank 0 alone holds the worker pool and
runs 1-4; the batch reaches the other ranks through the learners' ``on_main`` broadcast, every
rank learns its slice, and every rank calls :meth:`AsyncTrainer.publish` (sharded weights are
gathered to rank 0 collectively; rank 0 publishes).

Departures from INTELLECT-2: no separate validator nodes (the learner verifies); data moves
through Ray's object store instead of Parquet files and HTTP relays. Prompts are assigned by
the learner (``distributed.prompt_source: learner``, the default: epochs and curricula apply) or,
as the paper, drawn by each worker from (seed, request id, worker id) and redrawn by the learner,
which refuses a batch with other prompts (``seeded``, :mod:`grpokit.distributed.prompt_draw`). With k = 0 each request carries the learner's torch RNG
state and the learner adopts the worker's state afterwards, so the run reproduces the
single-process run's metrics exactly (same seed, same threads).
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any, Optional

import torch

from grpokit.config.schema import Config
from grpokit.distributed import require_ray
from grpokit.distributed.ledger import Request, RequestLedger
from grpokit.distributed.prompt_draw import draw_indices, prompts_match
from grpokit.distributed.shardcast import MiB, build_manifest, load_into, trainable_state
from grpokit.distributed.toploc import ToplocSpec, check_commitment, prefill_hidden
from grpokit.trainer import checkpoint as ckpt_io
from grpokit.trainer.collect import score_batch
from grpokit.trainer.loop import Trainer

log = logging.getLogger(__name__)


def checked_workers(cfg: Config) -> set[int]:
    """Workers whose batches must pass TOPLOC: ``untrusted_workers``, or all when it is empty and ``verify_rollouts``."""
    d = cfg.distributed
    for name, values in (("untrusted_workers", d.untrusted_workers), ("tamper_worker", [d.tamper_worker] if d.tamper_worker >= 0 else [])):
        bad = [i for i in values if not 0 <= int(i) < d.rollout_workers]
        if bad:
            raise ValueError(f"distributed.{name} {bad} is not a worker index below distributed.rollout_workers={d.rollout_workers}")
    if d.untrusted_workers:
        return {int(i) for i in d.untrusted_workers}
    return set(range(d.rollout_workers)) if d.verify_rollouts else set()


class AsyncTrainer(Trainer):
    """A Trainer whose batches come from Ray rollout workers (used when ``distributed.rollout_workers > 0``)."""

    def __init__(self, cfg: Config, model: Optional[torch.nn.Module] = None, tokenizer: Any = None) -> None:
        require_ray()
        self.checked = checked_workers(cfg)
        self.toploc = ToplocSpec.from_config(cfg.distributed)
        super().__init__(cfg, model, tokenizer)
        from grpokit.distributed.pool import WorkerPool

        d = cfg.distributed
        self.sampler = RequestLedger(self.sampler, self.splits.train)
        self.seeded = d.prompt_source == "seeded"
        if self.seeded and cfg.data.curriculum:
            raise ValueError(f"distributed.prompt_source=seeded draws prompts uniformly: data.curriculum '{cfg.data.curriculum}' "
                             "cannot apply; set data.curriculum=null or distributed.prompt_source=learner")
        self.train_rows = list(getattr(self.sampler, "rows", self.splits.train))  # after the offline filter
        self.max_in_flight = min(d.queue_size, d.staleness + 1)
        if d.staleness > 0 and self.max_in_flight < d.rollout_workers and self.learners.is_main:
            log.warning("at most %d requests in flight (distributed.queue_size, staleness + 1) for %d rollout_workers: "
                        "some workers idle", self.max_in_flight, d.rollout_workers)
        published = self._published_state()  # collective on sharded learners
        self.pool: Optional[WorkerPool] = None  # torchrun learners: rank 0 alone talks to the workers
        if self.learners.is_main:
            state_bytes = sum(t.numel() * t.element_size() for t in published[0].values())
            rng = ckpt_io.rng_state()  # starting Ray and actors must not move the learner's RNG streams
            self.pool = WorkerPool(cfg, self.checked, object_store_bytes=max(256 * MiB, (d.staleness + 3) * state_bytes),
                                   rows=self.train_rows if self.seeded else None)
            ckpt_io.set_rng_state(rng)
        self.manifests: dict[int, Any] = {}
        self.versions: dict[int, dict[str, torch.Tensor]] = {}  # verification weights by version
        self._verifier: Optional[torch.nn.Module] = None
        self.counts = {"over_staleness": 0, "checked": 0, "rejected": 0, "reissued": 0, "wrong_prompts": 0}
        self.per_worker = {i: {"checked": 0, "rejected": 0} for i in self.checked}
        self.refused_versions: dict[int, int] = {}
        self._taken: list[tuple[Request, dict[str, Any]]] = []  # the requests of the step being learned
        self.trained_log = self.run_dir / "trained_prompts.jsonl"
        self.elapsed = 0.0  # train() sets it too; save() may come first when steps are driven by hand
        self.publish(published)

    # ------------------------------------------------------------------ weights out
    def _published_state(self) -> tuple[dict[str, torch.Tensor], bool]:
        """(what the workers load, adapter_only) on rank 0, ({}, False) on other ranks.

        Data-parallel ranks hold identical whole weights, so rank 0 reads its own; sharded
        (FSDP) ranks all take part in gathering the full weights to rank 0 first.
        """
        full = None
        if self.learners.sharded:
            from grpokit.distributed.fsdp import full_state_dict

            full = full_state_dict(self.model)  # collective: every rank gathers, rank 0 keeps
        if not self.learners.is_main:
            return {}, False
        return trainable_state(self.model, full)

    def publish(self, published: Optional[tuple[dict[str, torch.Tensor], bool]] = None) -> None:
        """SHARDCAST the current weights as version ``self.step``; forget versions no batch may use.

        Called on every rank (a sharded learner's weights are gathered collectively); rank 0 publishes.
        """
        import ray

        state, adapter_only = published or self._published_state()
        if not self.learners.is_main:
            return
        manifest = build_manifest(state, self.step, self.cfg.distributed.shard_mb, adapter_only=adapter_only, put=ray.put)
        self.pool.publish(manifest)
        self.manifests[self.step] = manifest
        if self.checked:
            self.versions[self.step] = state
        oldest = self.step - self.cfg.distributed.staleness
        for table in (self.manifests, self.versions):
            for v in [v for v in table if v < oldest]:
                del table[v]

    # ------------------------------------------------------------------ batches in
    def _fill(self, limit: int) -> None:
        """Issue requests until ``limit`` are outstanding at the workers."""
        n = self.cfg.rollout.prompts_per_step
        while len(self.pool.in_flight) < limit:
            chosen: dict[str, int] = {}

            def draw(req: Request) -> tuple[list[dict], list[int]]:  # seeded: the rows the chosen worker will draw
                chosen["worker"] = worker = self.pool.pick(req.avoid)
                idx = draw_indices(self.cfg.train.seed, req.id, worker, n, len(self.train_rows))
                return [self.train_rows[i] for i in idx], idx

            req = self.sampler.take(n, draw=draw if self.seeded else None)
            exact = self.cfg.distributed.staleness == 0
            payload = {
                "id": req.id, "rows": None if self.seeded else req.rows, "n": n,
                "texts": None if self.seeded else self._prompt_texts(req.rows),
                "rng_state": torch.get_rng_state() if exact else None,
                "seed": self.cfg.train.seed * 1_000_003 + req.id,
            }
            self.pool.submit(req, payload, worker=chosen.get("worker"))

    def _prompts_drawn(self, req: Request, result: dict[str, Any]) -> bool:
        """Seeded prompts: did the worker use its draw for this request (redrawn here, ``prompts_match``)?"""
        rows = [self.train_rows[i] for i in draw_indices(self.cfg.train.seed, req.id, result["worker"],
                                                         self.cfg.rollout.prompts_per_step, len(self.train_rows))]
        ok, why = prompts_match(result["batch"], rows, self._prompt_texts(rows), self.tokenizer, self.cfg.rollout.group_size)
        if not ok:
            self.counts["wrong_prompts"] += 1
            log.warning("batch of worker %d refused: not its seeded prompts (%s)", result["worker"], why)
        return ok

    def _verified(self, result: dict[str, Any]) -> bool:
        """TOPLOC check of a batch from a checked worker, with the weights of the batch's version."""
        worker, version, batch = result["worker"], result["version"], result["batch"]
        if version == self.step and not self.learners.sharded:
            model = self.model
        else:
            if self._verifier is None:  # a whole copy (a sharded learner's own module holds 1/N of each weight)
                self._verifier = self._whole_copy()
            load_into(self._verifier, self.versions[version], hasattr(self.model, "peft_config"))
            model = self._verifier
        hidden = prefill_hidden(model, batch)
        ok, info = check_commitment(result["commitment"], hidden, batch, self.toploc)
        self.counts["checked"] += 1
        self.per_worker[worker]["checked"] += 1
        if not ok:
            self.counts["rejected"] += 1
            self.per_worker[worker]["rejected"] += 1
            log.warning("TOPLOC: batch of worker %d rejected (%s)", worker, ", ".join(f"{k} {v:.3g}" for k, v in info.items()))
        return ok

    def _whole_copy(self) -> torch.nn.Module:
        """A no-grad whole copy of the policy for TOPLOC checks of older versions (a worker's copy when sharded)."""
        if not self.learners.sharded:
            return copy.deepcopy(self.model)
        from grpokit.trainer.setup import load_policy

        rng = ckpt_io.rng_state()  # a LoRA adapter's initialisation must not move the learner's RNG streams
        model, _ = load_policy(self.cfg)  # loaded as the workers load theirs; versions are loaded into it
        ckpt_io.set_rng_state(rng)
        for p in model.parameters():
            p.requires_grad_(False)
        return model.eval()

    def _next_accepted(self) -> tuple[Request, dict[str, Any]]:
        """The oldest batch that is fresh enough and verifies; everything else is re-issued."""
        k = self.cfg.distributed.staleness
        while True:
            self._fill(self.max_in_flight)
            req = self.pool.in_flight[min(self.pool.in_flight)][2]
            result, lost = self.pool.next_result()
            if result is None:
                for r in lost:
                    self.sampler.reissue(r, avoid=r.avoid)
                self.counts["reissued"] += len(lost)
                continue
            self.refused_versions[result["worker"]] = result["refused_versions"]
            if (self.seeded and not self._prompts_drawn(req, result)) or (result["worker"] in self.checked and not self._verified(result)):
                avoid = result["worker"]  # give the prompts to another worker
            else:
                if result["version"] < self.step - k:  # reordered past the bound: trained, corrected, counted
                    self.counts["over_staleness"] += 1
                return req, result
            self.sampler.reissue(req, avoid=avoid)
            self.counts["reissued"] += 1

    def _collect(self):
        """(batch, scores, metrics) from the workers, scored here; overrides in-process sampling.

        Dynamic sampling (when configured) draws worker batches as its rounds.
        """
        from grpokit.trainer.collect import collect_rounds

        before = dict(self.counts)
        taken = []

        def worker_round():
            req, result = self._next_accepted()
            self.sampler.trained(req)
            if self.cfg.distributed.staleness == 0:
                torch.set_rng_state(result["rng_state"])  # continue the stream exactly where sampling left it
            else:  # the workers generate the next batches while this one is learned (k in flight: none stale)
                self._fill(min(self.max_in_flight, self.cfg.distributed.staleness))
            batch = result["batch"]
            batch.weights_version = result["version"]
            scores, metrics = score_batch(self.cfg, batch, self.rewards, combine=lambda s, b: self.combiner(s, b, self))
            taken.append((req, result))
            return batch, scores, metrics

        batch, scores, metrics = collect_rounds(self.cfg, worker_round, self.policy.pad_id, outcome=self.judge.name)
        if hasattr(self.sampler, "observe"):  # curricula learn each prompt's difficulty
            self._observe_groups(batch, scores)
            metrics.update(self.sampler.metrics())
        self._taken = taken
        metrics.update(self._async_metrics(taken[-1][1], before))
        metrics["async/staleness"] = float(self.step - batch.weights_version)
        return batch, scores, metrics

    def _async_metrics(self, result: dict[str, Any], before: dict[str, int]) -> dict[str, float]:
        m = {
            "async/staleness": float(self.step - result["version"]),
            "async/version": float(result["version"]),
            "async/worker": float(result["worker"]),
            "async/over_staleness": float(self.counts["over_staleness"] - before["over_staleness"]),
            "async/reissued": float(self.counts["reissued"] - before["reissued"]),
            "async/wrong_prompts": float(self.counts["wrong_prompts"]),
            "async/worker_restarts": float(self.pool.restarts),
            "shardcast/refused_versions": float(sum(self.refused_versions.values())),
        }
        if self.checked:
            m["toploc/checked_batches"] = float(self.counts["checked"])
            m["toploc/rejected_batches"] = float(self.counts["rejected"])
            for i, c in self.per_worker.items():
                m[f"toploc/worker{i}/checked"] = float(c["checked"])
                m[f"toploc/worker{i}/rejected"] = float(c["rejected"])
        return m

    # ------------------------------------------------------------------ the step, checkpoints, the run
    def train_step(self) -> dict[str, float]:
        """The Trainer's step on a worker batch, then publish the new weights and log the trained prompts."""
        metrics = super().train_step()
        self.publish()
        if not self.learners.is_main:
            return metrics
        with self.trained_log.open("a") as f:
            for req, result in self._taken:
                for j, row_id in enumerate(req.row_ids):
                    f.write(json.dumps({"step": self.step, "request": req.id, "prompt": f"{req.id}:{j}", "row": row_id,
                                        "worker": result["worker"], "version": result["version"]}) + "\n")
        return metrics

    def resume(self) -> bool:
        """Resume the learner (weights, optimizer, data position, pending requests) and re-publish its weights."""
        resumed = super().resume()
        if resumed:
            if self.learners.is_main and self.trained_log.is_file():  # forget prompts of steps after the checkpoint
                lines = [ln for ln in self.trained_log.read_text().splitlines() if json.loads(ln)["step"] <= self.step]
                self.trained_log.write_text("".join(ln + "\n" for ln in lines))
            self.publish()
        return resumed

    def train(self, resume: bool = False) -> dict[str, Any]:
        try:
            return super().train(resume=resume)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the workers (and the local Ray cluster this run started)."""
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()
            self.pool = None
