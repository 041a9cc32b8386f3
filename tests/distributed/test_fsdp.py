"""Sharded (FSDP2) learners: 2 torchrun processes (gloo) reproduce the single-process run and resume exactly.

Every run: 3 prompts x 4 completions = 12 rows in micro-batches of 2. The whole groups are cut
8 / 4 between the ranks, so rank 0 learns 4 micro-batches and rank 1 only 2: rank 1 runs two
padding passes per learning phase, without which FSDP's collectives would not line up (a hang,
caught by the launch timeout).
"""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpokit.cli import main
from grpokit.config import load_config
from grpokit.distributed.fsdp import sharding_problem
from grpokit.testing import save_tiny_model
from grpokit.trainer.checkpoint import checkpoint_problem

from test_ddp import ENV, TORCHRUN, TRAIN as DDP_TRAIN  # the data-parallel tests' launch and tiny run

HERE = Path(__file__).parent
# later --set wins: a checkpoint per step, 3 steps, and a KL term, so the reference is scored on every rank
TRAIN = DDP_TRAIN + ["logging.checkpoint_every=1", "train.steps=3", "algorithm.beta=0.04"]
FSDP = ["distributed.learner=fsdp"]
KEYS = ("loss", "grad_norm", "reward/mean", "completion_len/mean", "entropy", "lr")


def args(tiny: str, out: Path, extra: list[str] = ()) -> list[str]:
    return [a for s in TRAIN + [f"model.name={tiny}", f"logging.output_dir={out}", *extra] for a in ("--set", s)]


def launch(cmd: list[str], cwd: Path, env: dict = ENV) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def run(cmd: list[str], cwd: Path) -> None:
    done = launch(cmd, cwd)
    assert done.returncode == 0, done.stderr[-3000:]


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step-{step}" / "model.safetensors")


def assert_same_steps(a: list[dict], b: list[dict], tol: float) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for x, y in zip(a, b):
        for key in KEYS:
            assert math.isclose(x[key], y[key], rel_tol=tol, abs_tol=tol / 10), (x["step"], key, x[key], y[key])


def assert_same_weights(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for name, w in a.items():
        torch.testing.assert_close(b[name], w, rtol=0, atol=atol, msg=name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(root, tiny model dir): ``one`` = 3 steps in one process, ``two`` = the same on 2 FSDP ranks."""
    root = tmp_path_factory.mktemp("fsdp")
    tiny = save_tiny_model(root / "tiny")
    assert main(["train", *args(tiny, root / "one")]) == 0  # the single process, in this process
    run(TORCHRUN + ["-m", "grpokit.cli", "train", *args(tiny, root / "two", FSDP)], root)
    return root, tiny


@pytest.fixture(scope="module")
def killed(runs):
    """A 2-rank FSDP run that rank 0 kill -9s right after step 2's checkpoint."""
    root, tiny = runs
    done = launch(TORCHRUN + [str(HERE / "fsdp_run.py"), "train", *args(tiny, root / "killed", FSDP)], root,
                  {**ENV, "KILL_AT": "2"})
    assert done.returncode != 0  # torchrun reports the killed rank
    ckpts = root / "killed" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step-")) == ["step-1", "step-2"]
    return root / "killed"


def test_two_sharded_learners_match_one_process(runs):
    root, tiny = runs
    assert_same_steps(metrics(root / "one"), metrics(root / "two"), 1e-5)
    start = load_file(Path(tiny) / "model.safetensors")
    one, two = weights(root / "one", 3), weights(root / "two", 3)
    assert max(float((one[n] - start[n]).abs().max()) for n in start) > 1e-3  # lr 1e-3, 3 updates: the weights moved
    assert_same_weights(one, two, 1e-5)  # the exported HF folder: the same tensors under the same names (tie kept)
    ckpt = root / "two" / "checkpoints" / "step-3"
    assert (ckpt / "dcp" / ".metadata").is_file() and not (ckpt / "optimizer.pt").exists()
    assert checkpoint_problem(ckpt) is None
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ckpt)  # a plain HF folder
    torch.testing.assert_close(model.model.embed_tokens.weight.detach(), one["model.embed_tokens.weight"], rtol=0, atol=1e-5)


def test_a_sharded_checkpoint_without_its_index_is_incomplete(runs, tmp_path):
    root, _ = runs
    ckpt = tmp_path / "step-3"
    shutil.copytree(root / "two" / "checkpoints" / "step-3", ckpt)
    (ckpt / "dcp" / ".metadata").unlink()  # shards without DCP's index: what a crash in the middle of dcp.save leaves
    assert checkpoint_problem(ckpt) == "missing dcp/.metadata"


@pytest.mark.slow
def test_kill_9_then_resume_continues_exactly(runs, killed, tmp_path):
    root, tiny = runs
    resumed = tmp_path / "resumed"
    shutil.copytree(killed, resumed)
    assert [r["step"] for r in metrics(resumed)] == [1, 2]
    run(TORCHRUN + ["-m", "grpokit.cli", "train", "--resume", *args(tiny, resumed, FSDP)], tmp_path)
    assert_same_steps(metrics(root / "two"), metrics(resumed), 1e-6)  # steps 1-2 kept, step 3 recomputed
    assert_same_weights(weights(root / "two", 3), weights(resumed, 3), 1e-6)


@pytest.mark.slow
def test_one_process_resumes_a_two_rank_checkpoint(runs, killed, tmp_path):
    root, tiny = runs
    single = tmp_path / "single"
    shutil.copytree(killed, single)
    assert main(["train", "--resume", *args(tiny, single)]) == 0  # distributed.learner=ddp, one process: DCP reshards
    assert_same_steps(metrics(root / "two"), metrics(single), 1e-5)
    assert_same_weights(weights(root / "two", 3), weights(single, 3), 1e-5)
    assert (single / "checkpoints" / "step-3" / "optimizer.pt").is_file()  # saved as one process saves


@pytest.mark.slow
def test_disco_step_matches_one_process(runs, tmp_path):
    """DisCO (arXiv 2505.12366) reads constraint_kl, produced before its second update (mu = 2) from every rank's rows.

    The sharded run also recomputes its layers in the backward (activation checkpointing composed
    with FSDP: the same gradient) and evaluates after training (rank 0 generates with gathered weights).
    """
    root, tiny = runs
    disco = ["train.steps=1", "logging.checkpoint_every=0", "train.micro_batch_size=4", "eval.after=true"]  # 2 vs 1 micro-batches
    assert main(["train", "--preset", "disco", *args(tiny, tmp_path / "one", disco)]) == 0
    sharded = disco + FSDP + ["train.activation_checkpointing=true"]
    run(TORCHRUN + ["-m", "grpokit.cli", "train", "--preset", "disco", *args(tiny, tmp_path / "two", sharded)], tmp_path)
    one, two = metrics(tmp_path / "one"), metrics(tmp_path / "two")
    assert one[0]["learn/updates"] == 2.0
    assert_same_steps(one, two, 1e-5)
    evals = [[json.loads(line) for line in (tmp_path / k / "eval.jsonl").read_text().splitlines()] for k in ("one", "two")]
    assert [(e["label"], e["n"], e["accuracy"]) for e in evals[0]] == [(e["label"], e["n"], e["accuracy"]) for e in evals[1]]
    assert evals[1] and evals[1][0]["n"] == 4  # the 4 held-out rows, generated by rank 0 alone
    start = load_file(Path(tiny) / "model.safetensors")
    assert max(float((weights(tmp_path / "one", 1)[n] - start[n]).abs().max()) for n in start) > 1e-4
    assert_same_weights(weights(tmp_path / "one", 1), weights(tmp_path / "two", 1), 1e-5)


@pytest.mark.slow
def test_lora_step_matches_one_process(runs, tmp_path):
    """LoRA on FSDP: base weights and adapter sharded alike, the reference = the adapter disabled; 2 updates at lr 1e-2."""
    root, tiny = runs
    lora = ["train.steps=2", "logging.checkpoint_every=0", "model.lora.enabled=true", "optim.lr=0.01"]
    assert main(["train", *args(tiny, tmp_path / "one", lora)]) == 0
    run(TORCHRUN + ["-m", "grpokit.cli", "train", *args(tiny, tmp_path / "two", lora + FSDP)], tmp_path)
    assert_same_steps(metrics(tmp_path / "one"), metrics(tmp_path / "two"), 1e-5)
    one, two = (load_file(tmp_path / k / "checkpoints" / "step-2" / "adapter_model.safetensors") for k in ("one", "two"))
    assert max(float(w.abs().max()) for name, w in one.items() if "lora_B" in name) > 1e-3  # B starts at 0: the adapter learned
    assert_same_weights(one, two, 1e-5)


def test_sharded_learners_publish_to_ray_rollout_workers(runs, tmp_path):
    """FSDP on 2 ranks with 1 Ray rollout worker at staleness 0 (INTELLECT-2's layout, arXiv 2505.07291 Sec. 2).

    Rank 0 drives the worker and checks its TOPLOC commitments; before every publication all ranks
    gather the sharded weights to rank 0. The worker samples step s with version s - 1 and the learner's RNG stream, so the run
    is the in-process one's: a worker left on stale or partial weights would sample other
    completions and the metrics and final weights would differ.
    """
    pytest.importorskip("ray")
    root, tiny = runs
    workers = FSDP + ["distributed.rollout_workers=1", "distributed.staleness=0", "distributed.verify_rollouts=true"]
    run(TORCHRUN + ["-m", "grpokit.cli", "train", *args(tiny, tmp_path / "two", workers)], tmp_path)
    got = metrics(tmp_path / "two")
    assert [r["async/version"] for r in got] == [0.0, 1.0, 2.0] and all(r["async/staleness"] == 0 for r in got)
    # TOPLOC: rank 0 checks each batch on a whole copy holding the gathered weights of its version
    assert [(r["toploc/checked_batches"], r["toploc/rejected_batches"]) for r in got] == [(1, 0), (2, 0), (3, 0)]
    assert_same_steps(metrics(root / "one"), got, 1e-5)
    assert_same_weights(weights(root / "one", 3), weights(tmp_path / "two", 3), 1e-5)
    trained = (tmp_path / "two" / "trained_prompts.jsonl").read_text().splitlines()
    assert len(trained) == 3 * 3  # 3 steps x 3 prompts, written once (by rank 0)


@pytest.mark.slow
def test_sharded_lora_learners_publish_the_adapter_to_ray_rollout_workers(tmp_path):
    """LoRA on FSDP with a Ray worker: the gathered adapter (only) is published; the run equals one process."""
    pytest.importorskip("ray")
    tiny = save_tiny_model(tmp_path / "tiny")
    lora = ["train.steps=2", "logging.checkpoint_every=0", "model.lora.enabled=true", "optim.lr=0.01"]
    assert main(["train", *args(tiny, tmp_path / "one", lora)]) == 0
    workers = lora + FSDP + ["distributed.rollout_workers=1", "distributed.staleness=0"]
    run(TORCHRUN + ["-m", "grpokit.cli", "train", *args(tiny, tmp_path / "two", workers)], tmp_path)
    got = metrics(tmp_path / "two")
    assert [r["async/version"] for r in got] == [0.0, 1.0]
    assert_same_steps(metrics(tmp_path / "one"), got, 1e-5)
    one, two = (load_file(tmp_path / k / "checkpoints" / "step-2" / "adapter_model.safetensors") for k in ("one", "two"))
    assert max(float(w.abs().max()) for name, w in one.items() if "lora_B" in name) > 1e-3
    assert_same_weights(one, two, 1e-5)


@pytest.mark.parametrize("sets, env, fragment", [
    (FSDP, {}, "launch `torchrun"),
    (FSDP + ["model.lora.enabled=true", "model.lora.save_merged=true"], {"WORLD_SIZE": "2"}, "model.lora.save_merged"),
    (FSDP + ["train.sequence_chunk=16"], {"WORLD_SIZE": "2"}, "train.sequence_chunk"),
    (FSDP + ["model.device=cpu", "distributed.fsdp_param_dtype=bfloat16"], {"WORLD_SIZE": "2"}, "mixed precision is for CUDA"),
    (FSDP + ["model.device=cpu", "distributed.fsdp_cpu_offload=true"], {"WORLD_SIZE": "2"}, "fsdp_cpu_offload"),
    (["distributed.fsdp_reduce_dtype=bfloat16"], {}, "set distributed.learner=fsdp"),
    (FSDP + ["reward_combiner.name=mirror_descent"], {"WORLD_SIZE": "2"}, "reward_combiner.name=mirror_descent"),
    (FSDP + ["variational.enabled=true"], {"WORLD_SIZE": "2"}, "variational.enabled"),
    (FSDP + ["algorithm.loss=reg_grpo"], {"WORLD_SIZE": "2"}, "previous-policy snapshot"),
])
def test_configs_a_sharded_learner_cannot_run_are_refused_in_one_line(sets, env, fragment, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    problem = sharding_problem(load_config(overrides=sets))
    assert problem is not None and fragment in problem and "\n" not in problem


def test_a_launchable_sharded_config_passes(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert sharding_problem(load_config(overrides=FSDP)) is None
    assert sharding_problem(load_config()) is None  # ddp: nothing to check
