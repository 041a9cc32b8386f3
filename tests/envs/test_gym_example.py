"""examples/gym_env: the user's own gymnasium game trains from its YAML through the CLI, and an environment-only
run's held-out evaluation measures the environment's success."""

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

from grpokit.cli import main  # noqa: E402
from grpokit.testing import binary_search_guesser, save_tiny_model  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gym_env"


def test_the_gym_example_trains_two_steps_from_its_config_on_a_tiny_model(tmp_path, monkeypatch, capsys):
    """The documented command, from a copy of the repository's examples/ (the config's file.py:Class path is relative to
    the working folder, which the console script makes importable), with the model swapped for a tiny random one."""
    tiny = save_tiny_model(tmp_path / "tiny")
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "gym_env")
    monkeypatch.chdir(tmp_path)
    code = main(["train", "examples/gym_env/config.yaml", "--set", f"model.name={tiny}", "--set", "train.steps=2",
                 "--set", "data.n_heldout=3", "--set", "rollout.group_size=2", "--set", "rollout.prompts_per_step=2",
                 "--set", "train.micro_batch_size=4", "--set", "logging.output_dir=run", "--set", "logging.progress=false",
                 "--set", "logging.log_samples_every=1", "--set", "environment.max_episode_tokens=60"])
    out = capsys.readouterr()
    assert code == 0, out.err
    metrics = [json.loads(line) for line in Path("run/metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and all(m["env/turns"] >= 1 and "env/distance" in m and "env/is_success" in m for m in metrics)
    evals = [json.loads(line) for line in Path("run/eval.jsonl").read_text().splitlines()]
    assert [e["label"] for e in evals] == ["before", "after"] and all(e["n"] == 3 and "env/return" in e for e in evals)
    sample = json.loads(Path("run/samples.jsonl").read_text().splitlines()[0])
    assert sample["conversation"][0]["content"].startswith("I am hiding a whole number from 1 to 20")
    assert [m["role"] for m in sample["conversation"][:2]] == ["user", "assistant"]
    assert "name: examples/gym_env/my_env.py:HotCold" in Path("run/config.yaml").read_text()
    assert "sampled episodes" in out.err and "heldout_accuracy before=" in out.out


def test_heldout_episodes_of_a_run_without_data_measure_the_environment_s_success(tmp_path, monkeypatch, capsys):
    """guess_number with data.task=null draws each held-out range (4-16 wide) and secret from its seed; binary search
    finds a secret in at most ceil(log2(17)) = 5 guesses of the 6 allowed, so accuracy (env_info solved) = 5 / 5 = 1.
    (Before, a run without data.task / data.path was refused, and rows without answers skipped the trainer's evaluation.)"""
    from grpokit.rollout.hf import HFBackend

    tiny = save_tiny_model(tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(HFBackend, "_decode", binary_search_guesser)
    code = main(["eval", "--preset", "guess_number", "--model", tiny, "--set", "data.task=null", "--set", "data.n_heldout=5",
                 "--set", "environment.kv_cache=false"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = dict(kv.split("=") for kv in out.out.split())
    assert result["n"] == "5" and result["accuracy"] == "1.0000" and result["env/solved"] == "1.0000"
    assert float(result["env/turns"]) > 1  # the feedback was used
