"""Rollout throughput (samples/s) with 1 vs 2 Ray rollout workers on the embedded model.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/rollout_throughput.py [--requests 4] [--tokens 16]

Each worker is a :class:`grpokit.distributed.workers.RolloutWorker` (1 torch thread,
``distributed.worker_threads``) holding SmolLM2-135M-Instruct and sampling the demo preset's
prompts (``group_size`` completions each). Every completion is exactly ``--tokens`` long
(``rollout.min_new_tokens`` = ``max_new_tokens``), so each request is the same work. Model
loading and one warm-up request per worker are excluded; the timed part issues ``--requests``
requests per configuration round-robin over the workers and waits for all of them. The last line
is machine-readable: ``throughput_ratio=<2 workers / 1 worker>``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def measure(cfg, n_workers: int, requests: list[dict]) -> float:
    """samples/s of ``requests`` spread round-robin over ``n_workers`` fresh workers."""
    import ray

    from grpokit.distributed.workers import spawn_board, spawn_worker

    board = spawn_board()
    workers = [spawn_worker(cfg, i, board, commit=False) for i in range(n_workers)]
    ray.get([w.ready.remote() for w in workers])
    ray.get([w.generate.remote(requests[0]) for w in workers])  # warm-up
    t0 = time.perf_counter()
    results = ray.get([workers[i % n_workers].generate.remote(r) for i, r in enumerate(requests)])
    seconds = time.perf_counter() - t0
    samples = sum(len(r["batch"]) for r in results)
    for actor in [*workers, board]:
        ray.kill(actor)
    return samples / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4, help="timed requests per configuration")
    parser.add_argument("--tokens", type=int, default=16, help="new tokens per completion (fixed)")
    args = parser.parse_args()

    import ray

    from grpokit.config import load_config
    from grpokit.trainer import setup

    cfg = load_config(preset="demo", overrides=[
        "model.name=smollm2-135m-instruct", f"rollout.max_new_tokens={args.tokens}",
        f"rollout.min_new_tokens={args.tokens}", "distributed.worker_threads=1",
    ])
    rows = setup.build_splits(cfg.data).train
    from grpokit.model.loading import load_model

    _, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype)
    n = cfg.rollout.prompts_per_step
    requests = []
    for i in range(args.requests):
        batch_rows = rows[i * n:(i + 1) * n]
        requests.append({"id": i, "rows": batch_rows, "texts": setup.render_all(tokenizer, batch_rows, cfg.data.system_prompt),
                         "rng_state": None, "seed": i})
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=256 * 1024 * 1024, log_to_driver=False)
    try:
        one = measure(cfg, 1, requests)
        two = measure(cfg, 2, requests)
    finally:
        ray.shutdown()
    samples = args.requests * n * cfg.rollout.group_size
    print(f"{samples} samples per configuration ({args.requests} requests x {n} prompts x {cfg.rollout.group_size} completions,"
          f" {args.tokens} tokens each), 1 torch thread per worker, {os.cpu_count()} CPUs")
    print(f"1 worker:  {one:.2f} samples/s")
    print(f"2 workers: {two:.2f} samples/s")
    print(f"throughput_ratio={two / one:.3f}")


if __name__ == "__main__":
    main()
