"""A worker that Ray's memory monitor kills mid-request is restarted and its requests re-issued, not fatal."""

import pytest

ray = pytest.importorskip("ray")

from ray.exceptions import OutOfMemoryError  # noqa: E402

from grpokit.config import load_config  # noqa: E402
from grpokit.distributed import pool as pool_mod  # noqa: E402
from grpokit.distributed.ledger import Request  # noqa: E402


def test_an_oom_killed_worker_is_restarted_and_its_requests_handed_back(monkeypatch):
    p = object.__new__(pool_mod.WorkerPool)
    p.cfg, p.checked, p.rows, p.board, p.restarts = load_config(), set(), None, None, 0
    p.workers = ["w0", "w1"]
    reqs = [Request(0, [], []), Request(1, [], []), Request(2, [], [])]
    p.in_flight = {0: ("ref0", 1, reqs[0]), 1: ("ref1", 0, reqs[1]), 2: ("ref2", 1, reqs[2])}

    def get(ref):
        raise OutOfMemoryError("1 worker(s) were killed due to the node running low on memory")

    spawned = []
    monkeypatch.setattr(pool_mod.ray, "get", get)
    monkeypatch.setattr(pool_mod.ray, "kill", lambda actor: None)
    monkeypatch.setattr(pool_mod, "spawn_worker", lambda cfg, i, board, commit, rows: spawned.append(i) or f"new{i}")
    result, lost = p.next_result()
    assert result is None and [r.id for r in lost] == [0, 2]  # both of worker 1's requests come back
    assert all(r.avoid == 1 for r in lost) and list(p.in_flight) == [1]  # worker 0's request stays in flight
    assert spawned == [1] and p.workers[1] == "new1" and p.restarts == 1
