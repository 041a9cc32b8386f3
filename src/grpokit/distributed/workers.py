"""Ray actors of asynchronous rollouts: the manifest board and the rollout workers.

A :class:`RolloutWorker` holds its own copy of the policy (loaded like the learner's, see
:func:`grpokit.trainer.setup.load_policy`) and an :class:`~grpokit.rollout.hf.HFBackend`. Before
each request it pulls the newest SHARDCAST manifest from the :class:`ManifestBoard` and switches
to it if every shard verifies; then it samples G completions per prompt and returns the raw
batch with the weight version it used, its TOPLOC commitment and its worker id.

Workers do not score rewards: the learner scores every batch it trains on, because combiners,
reward models and curricula keep state in the learner (and scoring is cheap next to sampling).
Importing this module imports Ray; :mod:`grpokit.distributed.async_loop` imports it lazily.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Optional

import ray
import torch

from grpokit.config.schema import Config
from grpokit.distributed.prompt_draw import draw_indices
from grpokit.distributed.shardcast import Manifest, WeightReceiver
from grpokit.distributed.toploc import ToplocSpec, commit_batch, record_final_hidden, tamper_completions
from grpokit.rollout.types import SamplingParams

log = logging.getLogger(__name__)


class ManifestBoard:
    """Holds the newest published :class:`Manifest` (its shard ObjectRefs stay alive while referenced)."""

    def __init__(self) -> None:
        self.manifest: Optional[Manifest] = None

    def publish(self, manifest: Manifest) -> int:
        self.manifest = manifest
        return manifest.version

    def latest(self) -> Optional[Manifest]:
        return self.manifest


class RolloutWorker:
    """One rollout actor: policy copy + HFBackend, weights from SHARDCAST, optional TOPLOC commitments.

    ``commit``: compute a commitment for each batch (the learner checks this worker);
    ``cfg.distributed.tamper_worker == worker_id``: edit completions after committing (tests).
    """

    def __init__(self, cfg: Config, worker_id: int, board: Any, commit: bool, rows: Optional[list[dict]] = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        torch.set_num_threads(cfg.distributed.worker_threads)
        from grpokit.rollout.hf import HFBackend
        from grpokit.trainer.setup import load_policy

        model, tokenizer = load_policy(cfg)
        for p in model.parameters():
            p.requires_grad_(False)
        self.model = model.eval()
        self.tokenizer = tokenizer
        from grpokit.envs.episodes import episode_backend

        # multi-turn: the worker steps the episodes' environments itself
        self.backend = episode_backend(HFBackend(model, tokenizer, fused_decode=cfg.rollout.fused_decode), cfg)
        self.receiver = WeightReceiver(model, get=ray.get)
        self.board = board
        self.worker_id = worker_id
        self.commit = commit
        self.tamper = cfg.distributed.tamper_worker == worker_id
        d, r = cfg.distributed, cfg.rollout
        self.toploc = ToplocSpec.from_config(d)
        self.rows, self.seed, self.system_prompt = rows, cfg.train.seed, cfg.data.system_prompt  # seeded prompts
        self.group_size = r.group_size
        self.params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k, min_new_tokens=r.min_new_tokens)

    def ready(self) -> int:
        return self.worker_id

    def generate(self, request: dict[str, Any]) -> dict[str, Any]:
        """Sample one request ``{id, texts, rows, rng_state | None, seed, n}`` with the newest verified weights.

        Seeded prompts (``texts`` None): the ``n`` rows are this worker's draw for the request id.

        RNG: ``rng_state`` (the learner's torch RNG, staleness 0) is adopted so the sampling stream
        equals in-process sampling; otherwise the stream is seeded by ``seed``. The returned
        ``rng_state`` is the state after sampling, for the learner to adopt.
        """
        version = self.receiver.update(ray.get(self.board.latest.remote()))
        if hasattr(self.backend, "episode_seed"):  # episodes seeded by the request: a re-issued request replays them
            self.backend.learner_step = request["id"]
        if request.get("rng_state") is not None:
            torch.set_rng_state(request["rng_state"])
        else:
            torch.manual_seed(request["seed"])
        texts, rows = request["texts"], request["rows"]
        if texts is None:  # seeded prompts: this worker draws its own (grpokit.distributed.prompt_draw)
            from grpokit.trainer.setup import render_all

            rows = [self.rows[i] for i in draw_indices(self.seed, request["id"], self.worker_id, request["n"], len(self.rows))]
            texts = render_all(self.tokenizer, rows, self.system_prompt)
        record = record_final_hidden(self.model) if self.commit else contextlib.nullcontext(None)
        with record as captured:
            batch = self.backend.generate(texts, rows, self.group_size, self.params)
        rng_state = torch.get_rng_state()
        commitment = (
            commit_batch(batch, captured, self.model, self.group_size, self.toploc) if self.commit else None
        )
        if self.tamper:
            batch = tamper_completions(batch, self.tokenizer, self.backend.eos_ids)
        return {
            "id": request["id"], "batch": batch, "version": version, "worker": self.worker_id,
            "commitment": commitment, "rng_state": rng_state, "refused_versions": len(self.receiver.refused),
        }


def init_ray(n_workers: int, address: str, num_cpus: int, object_store_bytes: int) -> bool:
    """Join ``address``, or start a small local cluster; True when this call started Ray."""
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    else:
        ray.init(
            num_cpus=num_cpus or max(os.cpu_count() or 1, n_workers), include_dashboard=False,
            object_store_memory=object_store_bytes, ignore_reinit_error=True, log_to_driver=False,
        )
    return True


def spawn_worker(cfg: Config, worker_id: int, board: Any, commit: bool, rows: Optional[list[dict]] = None) -> Any:
    """A new RolloutWorker actor (1 CPU; Ray restarts nothing by itself: the pool does); ``rows``: seeded prompts' training rows."""
    return ray.remote(num_cpus=1, max_restarts=0)(RolloutWorker).remote(cfg, worker_id, board, commit, rows)


def spawn_board() -> Any:
    return ray.remote(num_cpus=0)(ManifestBoard).remote()
