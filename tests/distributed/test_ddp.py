"""Data-parallel learners: 2 torchrun processes (gloo) reproduce the single-process run exactly."""

import json
import math
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpokit.cli import main
from grpokit.distributed.ddp import Learners, group_slices, rank_micro_batches
from grpokit.testing import save_tiny_model
from grpokit.trainer.learner import micro_batches

HERE = Path(__file__).parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TRAIN = [
    "logging.progress=false", "logging.log_samples_every=0", "logging.checkpoint_every=0", "data.n_train=20",
    "data.n_heldout=4", "rollout.group_size=4", "rollout.prompts_per_step=3", "rollout.max_new_tokens=6",
    "train.micro_batch_size=2", "train.steps=2", "optim.lr=0.001", "eval.before=false", "eval.after=false",
    'rewards=[{name: format_regex, kwargs: {pattern: "[a-m]"}}]', "eval.accuracy_reward=format_regex",
    "train.skip_zero_advantage=false",  # one process would leave zero-advantage rows out of its entropy metric
]


def run(cmd: list[str], cwd: Path) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_group_slices_keep_groups_whole_and_balance_rows():
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])  # 3 groups of 4 on 2 ranks: cut at 4 or 8
    assert group_slices(ids, 2) in ([slice(0, 4), slice(4, 12)], [slice(0, 8), slice(8, 12)])
    assert group_slices(ids, 3) == [slice(0, 4), slice(4, 8), slice(8, 12)]
    assert group_slices(torch.tensor([0, 0]), 2) == [slice(0, 2), slice(2, 2)]  # fewer groups than ranks
    with pytest.raises(ValueError, match="adjacent"):
        group_slices(torch.tensor([0, 1, 0, 1]), 2)


def test_single_process_parts_equal_micro_batches():
    from grpokit.rollout.types import RolloutBatch

    b = RolloutBatch(
        prompt_ids=torch.ones(5, 3, dtype=torch.long), prompt_mask=torch.ones(5, 3, dtype=torch.long),
        completion_ids=torch.ones(5, 4, dtype=torch.long), completion_mask=torch.ones(5, 4, dtype=torch.long),
        group_ids=torch.tensor([0, 0, 1, 1, 2]), sampling_logp=torch.zeros(5, 4), truncated=torch.zeros(5, dtype=torch.bool),
        prompts=["p"] * 5, completions=["c"] * 5, rows=[{}] * 5,
    )
    ours, theirs = Learners().parts(b, 2), micro_batches(b, 2)
    assert [r.tolist() for r, _ in theirs] == [r.tolist() for r, _ in ours] == [[0, 1], [2, 3], [4]]
    assert [r.tolist() for r, _ in rank_micro_batches(b, 2, slice(2, 5))] == [[2, 3], [4]]  # never past the slice


def test_two_learners_give_the_single_process_gradient(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["ddp_step.py", tiny_dir, str(tmp_path / "one")])
    runpy.run_path(str(HERE / "ddp_step.py"))  # the single process, in this process (saves a start-up)
    run(TORCHRUN + [str(HERE / "ddp_step.py"), tiny_dir, str(tmp_path / "two")], tmp_path)
    one, two = torch.load(tmp_path / "one" / "step.pt"), torch.load(tmp_path / "two" / "step.pt")
    assert torch.equal(one["completion_ids"], two["completion_ids"])  # rank 0 sampled the same batch
    # 2 groups of 4 rows, micro-batches of 2: rank 0 learns group 0, rank 1 group 1
    learned = {name: json.loads((tmp_path / name).read_text()) for name in ("one/rows-0.json", "two/rows-0.json", "two/rows-1.json")}
    assert all(len(mb) == 2 for parts in learned.values() for mb in parts)  # micro-batches of 2 rows
    flat = {name: sorted(i for mb in parts for i in mb) for name, parts in learned.items()}
    assert flat == {"one/rows-0.json": list(range(8)), "two/rows-0.json": [0, 1, 2, 3], "two/rows-1.json": [4, 5, 6, 7]}
    assert one["grads"].keys() == two["grads"].keys()
    assert max(float(g.abs().max()) for g in one["grads"].values()) > 1e-4  # a real gradient, not zeros
    for name, g in one["grads"].items():
        torch.testing.assert_close(two["grads"][name], g, rtol=1e-5, atol=1e-5, msg=name)
    for key in ("loss", "grad_norm", "clip_frac", "entropy"):
        if key in one["metrics"]:
            assert math.isclose(two["metrics"][key], one["metrics"][key], rel_tol=1e-5, abs_tol=1e-7), key


RAY_WORKER = ["distributed.rollout_workers=1", "distributed.staleness=0"]


@pytest.mark.parametrize("workers", [[], RAY_WORKER, ["algorithm.mini_batches=2"]], ids=["in-process", "ray-worker", "mini-batches"])
def test_grpokit_train_with_two_learners_matches_one_process(tiny_dir, tmp_path, workers):
    """Rank 0 samples in-process, or takes its batches from a Ray rollout worker (staleness 0: the same stream).

    mini-batches: 3 groups cut into 2 and 1 per update, so in one update a rank has no group at all.
    """
    if workers == RAY_WORKER:
        pytest.importorskip("ray")
    sets = lambda d, extra=(): [a for s in TRAIN + [f"model.name={tiny_dir}", f"logging.output_dir={d}", *extra] for a in ("--set", s)]
    both = [s for s in workers if s.startswith("algorithm.")]  # a learner setting: the single process has it too
    assert main(["train", *sets(tmp_path / "one", both)]) == 0  # the single process, in this process
    run(TORCHRUN + ["-m", "grpokit.cli", "train", *sets(tmp_path / "two", workers)], tmp_path)
    rows = {k: [json.loads(l) for l in (tmp_path / k / "metrics.jsonl").read_text().splitlines()] for k in ("one", "two")}
    assert [r["step"] for r in rows["two"]] == [1, 2]  # rank 1 wrote nothing of its own
    if "algorithm.mini_batches=2" in workers:  # a step of 2 applied updates (the other's tied groups: one of size 0)
        assert max(r["learn/updates"] for r in rows["two"]) == 2.0
    if workers == RAY_WORKER:  # the worker sampled step s with the weights rank 0 published after step s - 1
        assert [r["async/version"] for r in rows["two"]] == [0.0, 1.0]
    for a, b in zip(rows["one"], rows["two"]):
        for key in ("loss", "grad_norm", "reward/mean", "completion_len/mean", "entropy", "learn/updates"):
            assert math.isclose(a[key], b[key], rel_tol=1e-5, abs_tol=1e-7), (a["step"], key, a[key], b[key])
    final = {k: load_file(tmp_path / k / "checkpoints" / "step-2" / "model.safetensors") for k in ("one", "two")}
    start = load_file(Path(tiny_dir) / "model.safetensors")
    assert max(float((final["one"][n] - start[n]).abs().max()) for n in start) > 1e-3  # lr 1e-3: weights moved
    for name, w in final["one"].items():
        torch.testing.assert_close(final["two"][name], w, rtol=0, atol=1e-5, msg=name)
