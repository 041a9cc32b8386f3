"""A user's own environment: an object from Python or a file.py:Name / module:Name string, built and checked at load,
presets whose options stay with their own components, runs with no dataset, and whole conversations in the logs."""

import json

import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")  # in the dev extra

from grpokit.config import load_config  # noqa: E402
from grpokit.config.loading import raw_config  # noqa: E402
from grpokit.envs.base import StepResult, environment_factory  # noqa: E402
from grpokit.envs.checks import rows_problem  # noqa: E402
from grpokit.testing import tiny_model_and_tokenizer  # noqa: E402
from grpokit.trainer.inputs import RunContractError  # noqa: E402

TINY = ("logging.progress=false", "logging.log_samples_every=0", "rollout.group_size=4", "rollout.prompts_per_step=2",
        "rollout.max_new_tokens=5", "train.micro_batch_size=4", "eval.before=false", "eval.after=false", "eval.max_new_tokens=5",
        "environment.max_episode_tokens=120")
RETURN_ONLY = ("rewards=[{name: env_return}]", "eval.accuracy_reward=env_return")


class Parity(gymnasium.Env):
    """gymnasium.Env, text spaces, its own episodes: say whether the seed-drawn number is even; 2 turns at most.
    reward 1 and is_success on a turn that contains the right word."""

    def __init__(self, top=9):
        self.observation_space, self.action_space, self.top = gymnasium.spaces.Text(200), gymnasium.spaces.Text(200), top

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n, self.t = int(self.np_random.integers(0, self.top + 1)), 0
        return f"Is {self.n} even or odd?", {}

    def step(self, action):
        self.t += 1
        right = ("even" if self.n % 2 == 0 else "odd") in action
        info = {"is_success": right, "solved": float(right)}
        return "Try again.", float(right), right, self.t >= 2, info


class Counter:
    """grpokit's own protocol, reset reads nothing: the first observation is its own; ends after `turns` turns."""

    def __init__(self, turns=2, fail_reset=False):
        self.turns, self.fail_reset = turns, fail_reset

    def reset(self, row, seed=None):
        if self.fail_reset:
            raise RuntimeError("no world to start from")
        self.t = 0
        return f"count with me ({seed})"

    def step(self, action):
        self.t += 1
        return StepResult(f"now {self.t}", 1.0, terminated=self.t >= self.turns, info={"solved": 1.0})


def cfg_for(tmp_path, *extra, preset=None):
    return load_config(preset=preset, overrides=[f"logging.output_dir={tmp_path / 'run'}", "data.n_train=6", "data.n_heldout=3",
                                                 *TINY, *extra])


def test_a_gymnasium_class_passed_from_python_trains_through_the_adapter_with_no_dataset(tmp_path):
    cfg = cfg_for(tmp_path, "environment.name=guess_number", "data.task=null",
                  "rewards=[{name: env_return}, {name: env_info, weight: 0.0, kwargs: {key: is_success}}]", "eval.accuracy_reward=env_info")
    cfg.environment.name = Parity  # the class itself, defined in a test module (no registration, no import path)
    model, tok = tiny_model_and_tokenizer(seed=0)
    torch.manual_seed(0)
    from grpokit.trainer.loop import Trainer

    trainer = Trainer(cfg, model, tok)
    assert [r["prompt"] for r in trainer.splits.heldout] == [f"environment held-out episode {i}" for i in range(3)]
    batch, _, _ = trainer._collect()
    first_user = tok.decode(batch.prompt_ids[0][batch.prompt_mask[0].bool()])
    assert "even or odd?" in first_user and "environment episode" not in first_user  # reset's observation, not the placeholder
    metrics = trainer.train_step()
    assert 1 <= metrics["env/turns"] <= 2 and 0.0 <= metrics["env/is_success"] <= 1.0
    result = trainer.evaluate("after")  # held-out episodes play without any answer column: not skipped
    assert result["n"] == 3 and 0.0 <= result["accuracy"] <= 1.0 and "env/return" in result and "env/is_success" in result
    from grpokit.config.loading import dump_yaml

    assert f"name: {__name__}:Parity" in dump_yaml(cfg)  # the run's config.yaml names the class


def test_file_and_module_specs_name_a_class_without_a_registration_module(tmp_path, monkeypatch):
    (tmp_path / "user_hotcold_env.py").write_text("import gymnasium\n\nclass Game(gymnasium.Env):\n"
                                                  "    def reset(self, *, seed=None, options=None):\n        return 'start', {}\n"
                                                  "    def step(self, action):\n        return 'x', 1.0, True, False, {}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    for spec in ("user_hotcold_env.py:Game", "user_hotcold_env:Game"):  # the module: the working folder is importable
        env = environment_factory(spec)()
        assert env.reset({"prompt": "p"}, 3) == ("start", {})  # gymnasium's (observation, info)
        step = env.step("a")
        assert (step.reward, step.terminated, step.observation) == (1.0, True, "")  # gymnasium's tuple, through the adapter


@pytest.mark.parametrize("source,options,expected", [
    ("import no_such_module_xyz\n", {}, "importing"),  # import error
    ("class Env:\n    def __init__(self, size=3):\n        pass\n", {"sise": 4}, "got an unexpected keyword argument 'sise'"),
    ("class Env:\n    def reset(self, row, seed=None):\n        raise RuntimeError('no world')\n"
     "    def step(self, action):\n        pass\n", {}, "RuntimeError: no world"),
    ("class Env:\n    def reset(self, row, seed=None):\n        return 'x'\n", {}, "has no step() method"),
])
def test_a_broken_environment_stops_the_run_at_load_in_one_line_naming_environment_name(tmp_path, source, options, expected):
    from grpokit.trainer.loop import Trainer

    path = tmp_path / "broken_env.py"
    path.write_text(source)
    cfg = cfg_for(tmp_path, f"environment.name={path}:Env", f"environment.options={json.dumps(options)}", *RETURN_ONLY)
    with pytest.raises(RunContractError) as err:
        Trainer(cfg)  # no model given: a missed check would load the real one, so the refusal comes first
    message = str(err.value)
    assert "environment.name" in message and expected in message and "\n" not in message


def test_a_preset_s_environment_options_and_task_rows_stay_with_the_preset_s_environment(tmp_path):
    """guess_number's options {max_guesses: 6, turn_penalty: 0.1} would be refused by Counter's constructor if
    they were deep-merged into its (empty) options; its task rows would name guess_number in their environment column."""
    spec = f"{__file__}:Counter"
    raw = raw_config(preset="guess_number", overrides=[f"environment.name={spec}"])
    assert "options" not in raw["environment"] and raw["environment"]["max_turns"] == 6  # generic fields stay
    assert raw["data"]["task"] is None and "task_options" not in raw["data"]  # the rows were guess_number's
    kept = raw_config(preset="guess_number", overrides=["environment.options={max_guesses: 3}"])
    assert kept["environment"]["options"] == {"max_guesses": 3, "turn_penalty": 0.1}  # same component: deep-merged
    assert kept["data"]["task"] == "guess_number"
    either_order = [raw_config(preset="guess_number", overrides=order)["environment"]["options"] for order in
                    ([f"environment.name={spec}", "environment.options={turns: 1}"], ["environment.options={turns: 1}", f"environment.name={spec}"])]
    assert either_order == [{"turns": 1}, {"turns": 1}]  # --set is one layer: its own options are kept, whole
    cfg = load_config(preset="guess_number", overrides=[f"environment.name={spec}", f"logging.output_dir={tmp_path / 'run'}",
                                                       "data.n_train=6", "data.n_heldout=3", *TINY])
    model, tok = tiny_model_and_tokenizer(seed=0)
    from grpokit.trainer.loop import Trainer

    metrics = Trainer(cfg, model, tok).train_step()  # the preset's rewards (env_return, env_info solved) on Counter's episodes
    assert metrics["env/turns"] == 2 and metrics["env/solved"] == 1.0


def test_renaming_any_component_drops_the_old_component_s_options():
    assert "loss_options" not in raw_config(preset="disco", overrides=["algorithm.loss=ppo_clip"])["algorithm"]
    assert raw_config(preset="disco", overrides=["algorithm.loss_options={tau: 5.0}"])["algorithm"]["loss_options"]["tau"] == 5.0
    combiner = raw_config(preset="dynamic_weights", overrides=["reward_combiner.name=fixed"])["reward_combiner"]
    assert combiner == {"name": "fixed"}
    demo = raw_config(preset="demo", overrides=["data.task=countdown"])["data"]
    assert "task_options" not in demo  # the arithmetic operators / digits are not countdown's
    rewards = raw_config(preset="guess_number", overrides=["rewards=[{name: env_return}]"])["rewards"]
    assert rewards == [{"name": "env_return"}]  # a list is replaced whole: no kwargs of another reward


def test_an_environment_named_with_no_data_source_plays_its_own_episodes():
    raw = raw_config(overrides=["environment.name=guess_number"])
    assert raw["data"] == {"task": None}
    assert raw_config(overrides=["environment.name=guess_number", "data.task=arithmetic"])["data"] == {"task": "arithmetic"}
    env = environment_factory("guess_number")(max_guesses=3)
    first = env.reset({"prompt": "environment episode 0", "episode": 0}, seed=7)
    lo, hi = (int(x) for x in first.split("from ")[1].split(".")[0].split(" to "))
    assert 4 <= hi - lo + 1 <= 16 and lo <= env.secret <= hi  # drawn from the seed, as the task draws a row
    again = environment_factory("guess_number")(max_guesses=3)
    assert again.reset({"prompt": "environment episode 5", "episode": 5}, seed=7) == first and again.secret == env.secret
    with pytest.raises(ValueError, match="no 'answer' column"):  # a data row without the secret is not silently replaced
        env.reset({"prompt": "guess"}, seed=7)


@pytest.mark.parametrize("extra,expected", [
    (("environment.name=guess_number", "rewards=[{name: answer_match}]", "eval.accuracy_reward=null"),
     "rewards[0] 'answer_match' reads the rows' answer column"),
    ((f"environment.name={__file__}:Counter", "environment.options={fail_reset: true}", *RETURN_ONLY),
     "RuntimeError: no world to start from"),
    (("environment.name=null", "data.task=null", "rewards=[{name: answer_match}]"), "data: set data.task"),
    ((f"environment.name={__file__}:Counter", "data.task=guess_number", *RETURN_ONLY),  # its rows all say guess_number
     "plays no episode: every row names its own environment ('guess_number'"),
])
def test_an_environment_only_run_that_cannot_work_is_refused_in_one_line(tmp_path, extra, expected):
    from grpokit.trainer import setup

    cfg = cfg_for(tmp_path, "data.task=null", *extra)
    splits = setup.build_splits(cfg.data)
    problem = rows_problem(cfg, {"train": splits.train, "heldout": splits.heldout})
    assert expected in problem and "\n" not in problem


def test_a_reset_without_a_first_observation_is_refused_when_there_is_no_data(tmp_path):
    from grpokit.trainer import setup

    cfg = cfg_for(tmp_path, "data.task=null", f"environment.name={tmp_path / 'silent.py'}:Silent", *RETURN_ONLY)
    (tmp_path / "silent.py").write_text("class Silent:\n    def reset(self, row, seed=None):\n        return ''\n"
                                        "    def step(self, action):\n        return ('', 0.0, True, False, {})\n")
    splits = setup.build_splits(cfg.data)
    assert "reset() returned no first observation" in rows_problem(cfg, {"train": splits.train})


def test_every_episode_s_whole_conversation_is_logged_with_roles(tmp_path, capsys):
    """Counter(turns=2): user (reset's observation), assistant, user ("now 1"), assistant: 4 messages per episode,
    in samples.jsonl and in the printed table (placeholder text nowhere)."""
    from grpokit.trainer.loop import Trainer

    cfg = cfg_for(tmp_path, "data.task=null", f"environment.name={__file__}:Counter", *RETURN_ONLY, "logging.log_samples_every=1",
                  "data.system_prompt=Be brief.")
    model, tok = tiny_model_and_tokenizer(seed=0)
    trainer = Trainer(cfg, model, tok)
    trainer.train_step()
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 2  # one per group
    for r in records:
        roles = [m["role"] for m in r["conversation"]]
        assert roles == ["system", "user", "assistant", "user", "assistant"]
        assert r["conversation"][1]["content"].startswith("count with me (") and r["conversation"][3]["content"] == "now 1"
        assert r["prompt"] == r["conversation"][1]["content"] and r["completion"] == r["conversation"][4]["content"]
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "sampled episodes" in printed and "user: now 1" in printed and "environment episode" not in printed
