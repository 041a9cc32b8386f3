"""Asynchronous Ray rollout workers on a local 2-worker cluster (one cluster for the module).

Each test trains the tiny random Llama for a few steps; workers load it from a saved folder
like the learner does, and receive the learner's weights through SHARDCAST.
"""

import importlib.util
import json

import pytest

from grpokit.config import load_config
from grpokit.distributed import MissingExtraError, make_trainer
from grpokit.testing import save_tiny_model
from grpokit.trainer.loop import Trainer

try:
    import ray

    from grpokit.distributed.async_loop import AsyncTrainer
except ImportError:  # the Ray tests skip without the [ray] extra
    ray = None


def test_without_ray_the_cli_names_the_extra(monkeypatch, capsys):
    import grpokit.distributed
    from grpokit.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(grpokit.distributed.importlib.util, "find_spec", lambda n, *a: None if n == "ray" else real(n, *a))
    with pytest.raises(MissingExtraError, match=r"pip install 'grpokit\[ray\]'"):
        make_trainer(load_config(overrides=["distributed.rollout_workers=2"]))
    assert main(["train", "--set", "distributed.rollout_workers=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("grpokit: error: distributed.rollout_workers > 0 needs Ray: pip install 'grpokit[ray]' "
                       "(or set distributed.rollout_workers=0)")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    if ray is None:
        pytest.skip("needs the [ray] extra: pip install 'grpokit[ray]'")
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=256 * 1024 * 1024,
             ignore_reinit_error=True, log_to_driver=False)
    yield save_tiny_model(tmp_path_factory.mktemp("tiny"))
    ray.shutdown()


def make_cfg(model_dir, out, preset=None, **overrides):
    sets = {
        "model.name": model_dir, "model.threads": 1, "logging.output_dir": out, "logging.progress": "false",
        "logging.log_samples_every": 0, "logging.checkpoint_every": 0, "data.task": "arithmetic", "data.n_train": 8,
        "data.n_heldout": 4, "rollout.group_size": 4, "rollout.prompts_per_step": 2, "rollout.max_new_tokens": 6,
        "train.micro_batch_size": 8, "train.steps": 4, "optim.lr": 1e-2, "eval.before": "false", "eval.after": "false",
        "distributed.rollout_workers": 2,
        # a reward a random model earns about half the time, so advantages and gradients are non-zero
        "rewards": '[{name: format_regex, kwargs: {pattern: "[0-9]"}}]', **overrides,
    }
    return load_config(preset=preset, overrides=[f"{k}={v}" for k, v in sets.items()])


def run_steps(trainer, steps):
    return [trainer.train_step() for _ in range(steps)]


def trained_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "trained_prompts.jsonl").read_text().splitlines()]


def test_staleness_0_reproduces_the_single_process_run(model_dir, tmp_path):
    single = Trainer(make_cfg(model_dir, tmp_path / "single", **{"distributed.rollout_workers": 0}))
    expected = run_steps(single, 3)
    # k = 0 keeps one request in flight, so one worker is enough (and starts faster)
    trainer = make_trainer(make_cfg(model_dir, tmp_path / "async", **{"distributed.staleness": 0, "distributed.rollout_workers": 1}))
    assert isinstance(trainer, AsyncTrainer)
    try:
        got = run_steps(trainer, 3)
    finally:
        trainer.close()
    for step, (e, g) in enumerate(zip(expected, got)):
        assert g["async/version"] == step and g["async/staleness"] == 0
        for key in ("reward/mean", "reward/std", "loss", "grad_norm", "completion_len/mean"):
            assert g[key] == e[key], (step, key)  # bitwise: same weights, same RNG stream, 1 thread
    assert all(e["grad_norm"] > 0 for e in expected)  # the weights change between steps


def test_staleness_1_trains_and_toploc_rejects_only_the_tampered_worker(model_dir, tmp_path):
    cfg = make_cfg(model_dir, tmp_path / "run", **{
        "distributed.staleness": 1, "distributed.queue_size": 2, "distributed.verify_rollouts": "true",
        "distributed.tamper_worker": 1,
        "distributed.toploc_block": 2,  # the tiny model: a one-token edit hides in a 32-token block (tests/distributed/test_toploc.py)
    })
    trainer = AsyncTrainer(cfg)
    try:
        metrics = run_steps(trainer, 4)
    finally:
        trainer.close()
    assert all(0 <= m["async/staleness"] <= 1 for m in metrics)
    assert sum(m["async/over_staleness"] for m in metrics) == 0  # k + 1 in flight: nothing goes stale
    assert all(m["async/worker"] == 0 for m in metrics)  # every trained batch came from the honest worker
    last = metrics[-1]
    # worker 1's first batch is the oldest request at step 1, so it is checked by then
    assert last["toploc/worker1/checked"] >= 1
    assert last["toploc/worker1/rejected"] == last["toploc/worker1/checked"]  # 100% rejected
    assert last["toploc/worker0/checked"] >= 4 and last["toploc/worker0/rejected"] == 0  # 0% rejected
    assert last["toploc/rejected_batches"] == last["toploc/worker1/rejected"]
    assert sorted(r["row"] for r in trained_rows(tmp_path / "run")) == list(range(8))  # re-issued, not lost


def test_killed_worker_and_resume_train_every_prompt_exactly_once(model_dir, tmp_path):
    # 8 training prompts, 2 per step, 4 steps: exactly one epoch
    cfg = make_cfg(model_dir, tmp_path / "run", **{"distributed.staleness": 1, "distributed.max_restarts": 1})
    trainer = AsyncTrainer(cfg)
    try:
        run_steps(trainer, 1)
        ray.kill(trainer.pool.workers[1])
        # worker 1 held request 1 and, if that one finished before the kill, gets request 3 at step 3:
        # one of them fails by step 4
        metrics = run_steps(trainer, 1)
        trainer.save()  # step 2: the issued-but-untrained requests go into the checkpoint
        pending = trainer.sampler.state()["pending"]
        metrics += run_steps(trainer, 2)
    finally:
        trainer.close()
    assert metrics[-1]["async/worker_restarts"] == 1
    assert sum(m["async/reissued"] for m in metrics) >= 1  # the dead worker's request went to another
    log = trained_rows(tmp_path / "run")
    assert [r["step"] for r in log] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert sorted(r["row"] for r in log) == list(range(8))  # every prompt once, none twice
    assert len({r["prompt"] for r in log}) == 8

    # continue from the step-2 checkpoint (with one worker: the queue does not depend on the pool size)
    resumed = AsyncTrainer(make_cfg(model_dir, tmp_path / "run", **{"distributed.staleness": 1, "distributed.rollout_workers": 1}))
    try:
        assert resumed.resume() and resumed.step == 2
        assert [p["id"] for p in resumed.sampler.state()["pending"]] == [p["id"] for p in pending] != []
        run_steps(resumed, 2)
    finally:
        resumed.close()
    log = trained_rows(tmp_path / "run")
    assert [r["step"] for r in log] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert sorted(r["row"] for r in log) == list(range(8))


def test_intellect2_preset_runs_with_rollout_workers_dynamic_sampling_and_correction(model_dir, tmp_path):
    """INTELLECT-2's async level 2 with its online filter: worker batches are dynamic sampling's rounds,
    and stale batches are trained with the decoupled-PPO correction."""
    cfg = make_cfg(model_dir, tmp_path / "run", preset="intellect2", **{"distributed.queue_size": 3, "train.steps": 3})
    assert cfg.algorithm.dynamic_sampling and cfg.distributed.staleness == 2
    trainer = make_trainer(cfg)
    assert isinstance(trainer, AsyncTrainer)
    try:
        metrics = run_steps(trainer, 3)
    finally:
        trainer.close()
    assert all(m["dynamic_sampling/rounds"] >= 1 for m in metrics)
    assert all(0 <= m["async/staleness"] <= 2 for m in metrics)
    stale = [m for m in metrics if m["async/staleness"] > 0]
    assert stale and all("offpolicy/kl_k3" in m and m["offpolicy/staleness"] > 0 for m in stale)


def test_rollout_workers_run_environment_episodes(model_dir, tmp_path):
    """A worker steps the episodes itself and ships token-in/token-out trajectories: observation tokens out of the loss."""
    cfg = make_cfg(model_dir, tmp_path / "env", **{
        "distributed.rollout_workers": 1, "distributed.staleness": 1, "data.task": "guess_number", "data.task_options": "{}",
        "environment.name": "guess_number", "environment.options": "{max_guesses: 3}", "environment.max_episode_tokens": 200,
        "rewards": "[{name: env_return}, {name: env_info, kwargs: {key: valid_guess}}]", "eval.accuracy_reward": "env_return",
    })
    trainer = make_trainer(cfg)
    try:
        metrics = run_steps(trainer, 2)
        batch, _, _ = trainer._collect()
    finally:
        trainer.close()
    assert all(m["env/turns"] > 1 for m in metrics) and batch.action_mask is not None
    assert bool((batch.completion_mask.bool() & ~batch.action_mask.bool()).any()) and batch.episodes


def test_seeded_prompts_are_the_workers_draws_and_other_prompts_are_refused(model_dir, tmp_path):
    from grpokit.distributed.ledger import Request
    from grpokit.distributed.prompt_draw import draw_indices

    cfg = make_cfg(model_dir, tmp_path / "run", **{"distributed.staleness": 1, "distributed.prompt_source": "seeded",
                                                   "train.steps": 3})
    trainer = AsyncTrainer(cfg)
    try:
        metrics = run_steps(trainer, 3)
        assert all(m["async/wrong_prompts"] == 0 for m in metrics)  # honest workers: every batch is its draw
        logged = trained_rows(tmp_path / "run")
        assert {r["worker"] for r in logged} == {0, 1}  # both workers drew
        for rec in logged:  # the learner's log = the draw of (seed, request, worker)
            j = int(rec["prompt"].split(":")[1])
            assert rec["row"] == draw_indices(0, rec["request"], rec["worker"], 2, 8)[j]
        # a batch made with worker 0's prompts but returned as worker 1's is refused
        req, result = trainer._taken[-1]
        forged = {**result, "worker": 1 - result["worker"]}
        assert not trainer._prompts_drawn(Request(req.id, req.rows, req.row_ids), forged)
        assert trainer._prompts_drawn(req, result)
    finally:
        trainer.close()
