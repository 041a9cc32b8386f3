"""The learner's handle on its rollout workers: assignment, in-order results, restarts.

Requests are assigned to the worker with the fewest requests in flight (lowest index on ties,
never the worker a re-issued request must avoid when another exists) and their results are
taken in issue order, so the prompt order of training is the sampler's order whatever the
workers' speeds. A worker that dies (``RayActorError``, ``WorkerCrashedError``, or Ray's
memory monitor killing it: ``OutOfMemoryError``) is replaced by
a fresh actor, at most ``distributed.max_restarts`` times per run, and every request it held
is handed back to be re-issued.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import ray
from ray.exceptions import OutOfMemoryError, RayActorError, WorkerCrashedError

# a worker is lost: it died, or Ray's memory monitor killed it mid-request (OutOfMemoryError is no RayActorError)
LOST = (RayActorError, WorkerCrashedError, OutOfMemoryError)

from grpokit.config.schema import Config
from grpokit.distributed.ledger import Request
from grpokit.distributed.workers import init_ray, spawn_board, spawn_worker

log = logging.getLogger(__name__)


class WorkerPool:
    """N RolloutWorker actors, the manifest board, and the requests in flight."""

    def __init__(self, cfg: Config, checked: set[int], object_store_bytes: int, rows: Optional[list[dict]] = None) -> None:
        d = cfg.distributed
        self.cfg, self.checked, self.rows = cfg, checked, rows
        self.started_ray = init_ray(d.rollout_workers, d.ray_address, d.ray_num_cpus, object_store_bytes)
        self.board = spawn_board()
        self.workers = [spawn_worker(cfg, i, self.board, i in checked, rows) for i in range(d.rollout_workers)]
        ray.get([w.ready.remote() for w in self.workers])  # model loading errors surface here
        self.in_flight: dict[int, tuple[Any, int, Request]] = {}  # request id -> (ref, worker, request)
        self.restarts = 0

    def publish(self, manifest: Any) -> None:
        ray.get(self.board.publish.remote(manifest))

    def load(self, worker: int) -> int:
        return sum(1 for _, w, _ in self.in_flight.values() if w == worker)

    def pick(self, avoid: Optional[int]) -> int:
        """The least busy worker (lowest index on ties), not ``avoid`` when another exists."""
        candidates = [i for i in range(len(self.workers)) if i != avoid] or list(range(len(self.workers)))
        return min(candidates, key=lambda i: (self.load(i), i))

    def submit(self, req: Request, payload: dict[str, Any], worker: Optional[int] = None) -> int:
        """Send ``payload`` (the request's texts, rows, RNG) to ``worker`` or the one :meth:`pick` names; returns its index."""
        worker = self.pick(req.avoid) if worker is None else worker
        self.in_flight[req.id] = (self.workers[worker].generate.remote(payload), worker, req)
        return worker

    def next_result(self) -> tuple[Optional[dict[str, Any]], list[Request]]:
        """(result of the oldest request, []) — or (None, requests to re-issue) when its worker died."""
        oldest = min(self.in_flight)
        ref, worker, req = self.in_flight.pop(oldest)
        try:
            return ray.get(ref), []
        except LOST as exc:
            log.warning("rollout worker %d died (%s): restarting it and re-issuing its prompts", worker, type(exc).__name__)
            lost = [req] + [r for _, w, r in self.in_flight.values() if w == worker]
            for r in lost[1:]:
                del self.in_flight[r.id]
            for r in lost:  # the replacement needs seconds to load its model: others take these first
                r.avoid = worker
            self._restart(worker)
            return None, lost

    def _restart(self, worker: int) -> None:
        self.restarts += 1
        limit = self.cfg.distributed.max_restarts
        if self.restarts > limit:
            raise RuntimeError(
                f"rollout workers died {self.restarts} times, more than distributed.max_restarts={limit}: "
                "check the workers' logs (memory, model loading) or raise distributed.max_restarts"
            )
        try:
            ray.kill(self.workers[worker])
        except Exception:  # already gone
            pass
        self.workers[worker] = spawn_worker(self.cfg, worker, self.board, worker in self.checked, self.rows)

    def close(self) -> None:
        """Kill the actors; shut Ray down if this pool started it."""
        for actor in [*self.workers, self.board]:
            try:
                ray.kill(actor)
            except Exception:  # already gone
                pass
        self.in_flight.clear()
        if self.started_ray:
            ray.shutdown()
