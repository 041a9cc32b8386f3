"""Which prompts were issued to rollout workers and not yet trained on: the async queue position.

The :class:`RequestLedger` wraps the run's prompt sampler. Rows leave the sampler when a request
is issued, so the sampler's own position runs ahead of training; the ledger remembers every
issued-but-untrained request and puts them into checkpoints next to the sampler state
(``state()``), so a resumed run re-issues them first: no prompt is lost or trained twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


def row_key(row: dict) -> str:
    """A content key of a data row (rows survive a JSON round trip through checkpoints)."""
    return json.dumps(row, sort_keys=True, default=str)


@dataclass
class Request:
    """``prompts_per_step`` rows sampled for one learner step; ``row_ids`` index the training split.

    ``avoid``: a worker whose batch of this request failed verification (not checkpointed).
    """

    id: int
    rows: list[dict]
    row_ids: list[Optional[int]]
    avoid: Optional[int] = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "rows": self.rows, "row_ids": self.row_ids}


class RequestLedger:
    """The sampler seen through the async queue: issue, re-issue, mark trained, checkpoint.

    Attributes it does not define (``observe``, ``metrics``, ``curriculum``, ``rows``) come from
    the wrapped sampler, so the trainer's curriculum hooks work unchanged.
    """

    def __init__(self, sampler: Any, train_rows: list[dict]) -> None:
        self.inner = sampler
        self.index = {row_key(r): i for i, r in enumerate(train_rows)}
        self.outstanding: dict[int, Request] = {}  # issued, not trained; by id
        self.retry: list[Request] = []  # to issue again, oldest first
        self.next_id = 0

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def take(self, n: int, draw: Optional[Callable[[Request], tuple[list[dict], list[int]]]] = None) -> Request:
        """The next request to issue: a re-issue first, else ``n`` fresh rows from the sampler.

        ``draw(request) -> (rows, row_ids)`` (seeded prompts): the rows come from it instead, for
        re-issues too (another worker draws other prompts).
        """
        if self.retry:
            req = self.retry.pop(0)
        else:
            rows = self.inner.next_batch(n) if draw is None else []
            req = Request(self.next_id, rows, [self.index.get(row_key(r)) for r in rows])
            self.next_id += 1
            self.outstanding[req.id] = req
        if draw is not None:
            req.rows, req.row_ids = draw(req)
        return req

    def reissue(self, req: Request, avoid: Optional[int] = None) -> None:
        """Queue ``req`` again (its batch was lost, stale or rejected), keeping id order."""
        req.avoid = avoid
        self.retry.append(req)
        self.retry.sort(key=lambda r: r.id)

    def trained(self, req: Request) -> None:
        self.outstanding.pop(req.id, None)

    def state(self) -> dict[str, Any]:
        """The sampler's state plus every issued-but-untrained request, in id order."""
        pending = [self.outstanding[i].to_json() for i in sorted(self.outstanding)]
        return {**self.inner.state(), "pending": pending, "next_request": self.next_id}

    def load_state(self, state: dict[str, Any]) -> None:
        self.inner.load_state({k: v for k, v in state.items() if k not in ("pending", "next_request")})
        reqs = [Request(p["id"], p["rows"], p["row_ids"]) for p in state.get("pending", [])]
        self.outstanding = {r.id: r for r in reqs}
        self.retry = list(reqs)
        self.next_id = state.get("next_request", 0)
