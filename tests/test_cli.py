"""The command line, in process: user data + user reward, bad configs, list."""

import json
import shutil
from pathlib import Path

import pytest

from grpokit.cli import main
from grpokit.testing import binary_search_guesser, save_tiny_model

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_train_on_user_jsonl_with_user_reward(tmp_path, tiny_dir, monkeypatch, capsys):
    # The README's example, unchanged except for the model (tiny) and the run length.
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    code = main([
        "train", "examples/custom.yaml",
        "--set", f"model.name={tiny_dir}",
        "--set", "model.lora.target_modules=[q_proj, v_proj]",
        "--set", "train.steps=2",
        "--set", "logging.progress=false",
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert "heldout_accuracy before=" in out.strip().splitlines()[-1]
    metrics = [json.loads(l) for l in (tmp_path / "runs/custom/metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2
    assert "reward/capital_reward/mean" in metrics[0] and "reward/is_correct/mean" in metrics[0]
    assert (tmp_path / "runs/custom/checkpoints/step-2/adapter_config.json").is_file()
    assert (tmp_path / "runs/custom/report.md").is_file()
    # the checkpoint evaluates through `grpokit eval`
    code = main(["eval", "examples/custom.yaml", "--model", "runs/custom/checkpoints/step-2",
                 "--set", f"model.name={tiny_dir}"])
    assert code == 0
    assert "accuracy=" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["train", "--set", "algorithm.epsilon_lo=0.1"], "did you mean 'algorithm.epsilon_low'"),
        (["train", "missing.yaml"], "config file 'missing.yaml' does not exist"),
        (["train", "--set", "train.steps=1", "--set", "data.task=null", "--set", "data.path=nope.jsonl", "--set", "model.name={tiny}"], "nope.jsonl"),
        (["train", "--set", "rewards=[{name: nowhere.py:fn}]", "--set", "model.name={tiny}"], "nowhere.py"),
        (["train", "--set", "model.name=/no/such/model"], "/no/such/model"),
    ],
)
def test_user_errors_are_one_line(args, fragment, capsys, tiny_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [a.replace("{tiny}", tiny_dir) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err
    assert len(err.splitlines()) == 1, err


def test_list_shows_every_axis_and_presets(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ["grpo", "ppo_clip", "seq_mean_token_mean", "k3", "answer_match", "arithmetic", "demo"]:
        assert name in out


def test_rm_subcommand_usage_error(capsys):
    assert main(["rm"]) == 2
    assert "grpokit rm train" in capsys.readouterr().err


def test_train_label_free_dataset_with_majority_vote(tmp_path, tiny_dir, monkeypatch, capsys):
    # TTRL: a dataset without answers trains when the reward needs none
    data = tmp_path / "unlabelled.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {a} + {a}?"}) + "\n" for a in range(12)))
    monkeypatch.chdir(tmp_path)
    code = main([
        "train", "--preset", "ttrl",
        "--set", f"model.name={tiny_dir}", "--set", f"data.path={data}", "--set", "data.task=null",
        "--set", "data.prompt_column=question", "--set", "data.answer_column=null",
        "--set", "rewards=[{name: majority_vote}]", "--set", "eval.accuracy_reward=null",
        "--set", "train.steps=1", "--set", "train.max_minutes=0", "--set", "rollout.max_new_tokens=4",
        "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=4",
        "--set", "logging.output_dir=run", "--set", "logging.progress=false",
    ])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert "reward/majority_vote/mean" in metrics


def test_eval_of_the_guess_number_preset_plays_the_environments_episodes(tiny_dir, monkeypatch, capsys, tmp_path):
    """Binary search finds every secret of a range at most 16 wide within 5 guesses (6 allowed), so the held-out
    accuracy (env_info solved) is 4 / 4 = 1; a single-turn completion would never reach the environment (accuracy 0)."""
    from grpokit.rollout.hf import HFBackend

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(HFBackend, "_decode", binary_search_guesser)
    code = main(["eval", "--preset", "guess_number", "--model", tiny_dir, "--limit", "4", "--set", "environment.kv_cache=false"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = dict(kv.split("=") for kv in out.out.split())
    assert result["accuracy"] == "1.0000" and result["n"] == "4" and result["env/solved"] == "1.0000"
    assert float(result["env/turns"]) > 1  # the feedback was used: not every secret was the first guess


def test_eval_refuses_a_model_of_another_family_in_one_line(tmp_path, monkeypatch, capsys):
    # grpokit eval samples text LMs: a masked-diffusion folder crashed deep in the text sampler
    from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm, save_mdm

    tok = MDMTokenizer()
    folder = save_mdm(build_mdm(len(tok), hidden=16, layers=1, heads=2), tok, tmp_path / "mdm")
    capsys.readouterr()  # save_pretrained's progress bar
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--preset", "espo", "--model", str(folder), "--set", "data.n_heldout=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a masked_diffusion model" in err and "eval.jsonl" in err


def test_eval_refuses_rows_the_environment_cannot_play_before_loading_the_model(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "nav.yaml"
    cfg.write_text("model: {name: no/such/model}\ndata: {task: arithmetic, n_train: 4, n_heldout: 4}\n"
                   "environment: {name: text_navigation}\n"
                   "rewards: [{name: env_return}, {name: env_info, weight: 0.0, kwargs: {key: success}}]\n"
                   "eval: {accuracy_reward: env_info}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no/such/model" not in err
    assert "cannot start an episode from heldout row 0" in err and "no world_seed, rooms, room_size column" in err
