"""Environment runs through the trainer: load-time checks, the loss mask, and a short tiny-model run."""

import pytest
import torch

from grpokit.config import load_config
from grpokit.trainer.inputs import RunContractError, check_run
from grpokit.testing import tiny_model_and_tokenizer


SOLVED = ("rewards=[{name: env_return}, {name: env_info, weight: 0.0, kwargs: {key: solved}}]", "eval.accuracy_reward=env_info")
# a random tiny model never finds the secret; the share of turns holding a number varies, so it has advantages
VALID = ("rewards=[{name: env_return}, {name: env_info, kwargs: {key: valid_guess}}]", "eval.accuracy_reward=env_return")


def guess_cfg(tmp_path, *extra, rewards=SOLVED):
    return load_config(overrides=[
        f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0",
        "data.task=guess_number", "data.n_train=12", "data.n_heldout=4",
        "environment.name=guess_number", "environment.options={max_guesses: 3}", "environment.max_episode_tokens=200",
        *rewards,
        "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=5", "train.micro_batch_size=4",
        "eval.before=false", "eval.after=false", "eval.max_new_tokens=5", *extra,
    ])


@pytest.mark.parametrize("extra,expected", [
    (("rollout.backend=vllm",), "set rollout.backend=hf"),
    (("environment.options={max_guess: 3}",), "not an option of environment 'guess_number'"),
    (("environment.name=maze",), "unknown environment 'maze'"),
    (("verification.enabled=true", "algorithm.loss=grpo_verif"), "verification.enabled"),
    (("environment.max_episode_tokens=3",), "raise it"),
    (("environment.name=null", "data.task=arithmetic", "data.task_options={}"), "reward 'env_return' reads an environment episode"),
    (("environment.credit=reward_to_go", "algorithm.advantage=rloo"), "use advantage grpo or dr_grpo"),
    (("environment.credit=reward_to_go", "reward_combiner.name=normalize_sum"), "use the fixed combiner"),
    (("environment.credit=reward_to_go", "rewards=[{name: env_info, kwargs: {key: solved}}]"), "add {name: env_return}"),
    (("environment.turn_discount=0.9",), "set environment.credit=reward_to_go or drop turn_discount"),
    (("environment.options={max_guesses: 9}",), "max_guesses=9 exceeds environment.max_turns=8"),  # guesses never played
    (("environment.name=null", "data.task=arithmetic", "data.task_options={}", "rewards=[{name: answer_match}]",
      "eval.accuracy_reward=null"), "environment.options is set but environment.name is null"),
])
def test_an_environment_run_that_cannot_work_is_refused_in_one_line(tmp_path, extra, expected):
    with pytest.raises(RunContractError) as err:
        check_run(guess_cfg(tmp_path, *extra))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_guess_number_trains_with_observation_tokens_outside_the_loss(tmp_path):
    from grpokit.trainer.loop import Trainer

    model, tok = tiny_model_and_tokenizer(seed=0)
    torch.manual_seed(0)
    trainer = Trainer(guess_cfg(tmp_path, rewards=VALID), model, tok)
    batch, scores, _ = trainer._collect()
    assert batch.action_mask is not None and [ep["turns"] for ep in batch.episodes].count(1) < len(batch)  # multi-turn
    assert batch.columns()["env_return"] == scores.per_reward["env_return"].tolist()
    lb, _ = trainer._learn_batch(batch, scores)
    assert torch.equal(lb.mask.bool(), batch.action_mask.bool())  # observation tokens never reach the loss
    assert bool((batch.completion_mask.bool() & ~batch.action_mask.bool()).any())
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.train_step()
    assert {"env/return", "env/turns", "env/solved", "env/valid_guess"} <= set(metrics)
    assert metrics["env/turns"] > 1
    assert metrics["learn/updates"] == 1 and any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    result = trainer.evaluate("after")  # held-out episodes, greedy, judged by the env's return
    assert result["n"] == 4 and 0.0 <= result["accuracy"] <= 1.0
    assert {"env/turns", "env/valid_guess", "env/return"} <= set(result)  # the greedy episodes' means


def test_env_return_and_env_info_rewards_read_the_episode_columns():
    from grpokit.rewards.builtin import REWARDS

    got = REWARDS.get("env_return")(["p", "p"], ["a", "b"], env_return=[0.8, 0.0])
    assert got == [0.8, 0.0]
    info = REWARDS.get("env_info")
    assert info(["p", "p"], ["a", "b"], key="solved", env_info=[{"solved": 1.0}, {}], env_done=[True, False]) == [1.0, None]
    with pytest.raises(ValueError, match="env_info"):
        info(["p"], ["a"], key="solved")  # not an environment run: the column is missing


def test_reward_to_go_credit_gives_each_turn_the_reward_from_it_on(tmp_path):
    """A scripted environment paying each turn len(action) mod 3: with reward-to-go credit a turn's tokens
    carry (G_k - mean R) / std R, so the turns of one episode get different advantages, its first turn GRPO's."""
    from pathlib import Path

    from grpokit.trainer.loop import Trainer

    scripted = f"{Path(__file__).parent / '_scripted.py'}:Scripted"
    cfg = load_config(overrides=[
        f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0",
        "data.task=arithmetic", "data.n_train=12", "data.n_heldout=4", f"environment.name={scripted}",
        "environment.options={turns: 3, reward_by_length: true}", "environment.max_episode_tokens=200",
        "environment.credit=reward_to_go", "rewards=[{name: env_return}]", "eval.accuracy_reward=env_return",
        "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=5", "train.micro_batch_size=4",
        "eval.before=false", "eval.after=false",
    ])
    model, tok = tiny_model_and_tokenizer(seed=0)
    torch.manual_seed(0)
    trainer = Trainer(cfg, model, tok)
    batch, scores, _ = trainer._collect()
    lb, _ = trainer._learn_batch(batch, scores)
    episode_adv = lb.adv.clone()
    lb, metrics = trainer.stages[-1](trainer.context, lb, scores)
    assert lb.adv.shape == batch.action_mask.shape and metrics["credit/turn_spread"] > 0
    first = [int(row.nonzero()[0]) for row in batch.action_mask]
    torch.testing.assert_close(lb.adv[torch.arange(len(first)), first], episode_adv)  # turn 0: the episode's GRPO advantage
    assert not lb.adv[~batch.action_mask.bool()].any()  # observation tokens carry none
    metrics = trainer.train_step()  # and the trainer learns from per-token advantages
    assert metrics["credit/turn_spread"] > 0 and metrics["learn/updates"] == 1


def nav_cfg(tmp_path, *extra):
    """A text_navigation run on the arithmetic task's rows, which carry no world (guess_cfg's options are guess_number's)."""
    return load_config(overrides=[
        f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0",
        "data.task=arithmetic", "data.n_train=12", "data.n_heldout=4", "environment.name=text_navigation",
        "rewards=[{name: env_return}, {name: env_info, weight: 0.0, kwargs: {key: success}}]", "eval.accuracy_reward=env_info",
        "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=4", "train.micro_batch_size=4",
        "eval.before=false", "eval.after=false", *extra,
    ])


def test_rows_the_environment_cannot_start_from_are_refused_at_load_naming_the_columns(tmp_path):
    from grpokit.envs.checks import rows_problem
    from grpokit.trainer import setup

    cfg = nav_cfg(tmp_path)
    splits = setup.build_splits(cfg.data)
    problem = rows_problem(cfg, {"train": splits.train, "heldout": splits.heldout})
    assert problem.startswith("environment.name 'text_navigation' cannot start an episode from train row 0 (ValueError: text_navigation: "
                              "the row has no world_seed, rooms, room_size column") and "\n" not in problem
    assert "use data.task=text_navigation" in problem
    nav = nav_cfg(tmp_path, "data.task=text_navigation")
    nav_splits = setup.build_splits(nav.data)
    assert rows_problem(nav, {"train": nav_splits.train, "heldout": nav_splits.heldout}) is None
    with_option = guess_cfg(tmp_path, "environment.options={max_guesses: 0}")
    assert "max_guesses=0 must be at least 1" in rows_problem(with_option, {"train": splits.train})  # built once, at load
    from grpokit.trainer.loop import Trainer

    with pytest.raises(RunContractError, match="cannot start an episode from train row 0"):
        Trainer(cfg)  # the trainer runs the same check before it loads a model (none is given: it would load the real one)


def test_a_navigation_run_on_rows_without_worlds_stops_at_its_first_step_naming_the_missing_columns(tmp_path, monkeypatch):
    """The run's episodes all fail at reset: the step stops in one line with that error, not the env_info
    reward's complaint about a column the failed episodes never filled. (The load check resets only the first rows
    of each split; rows further down fail here, which the test stands in for by switching the load check off.)"""
    from grpokit.envs.pool import EnvironmentFailure
    from grpokit.trainer.loop import Trainer

    monkeypatch.setattr("grpokit.trainer.loop.rows_problem", lambda cfg, splits: None)
    model, tok = tiny_model_and_tokenizer(seed=0)
    trainer = Trainer(nav_cfg(tmp_path), model, tok)
    with pytest.raises(EnvironmentFailure) as err:
        trainer.train_step()
    msg = str(err.value)
    assert msg.startswith("8 of 8 episodes failed (environment.max_failed_fraction=1); 8 of them: environment 'text_navigation' "
                          "reset() raised ValueError: text_navigation: the row has no world_seed, rooms, room_size column")
    assert "env_success" not in msg and "\n" not in msg


def test_heldout_episodes_have_the_same_seeds_before_and_after_training_and_none_of_trainings(tmp_path):
    """The scripted environment reports its reset seed as info['seed']: held-out row i plays 2^31 + i, so over
    4 held-out rows env/seed = 2^31 + (0 + 1 + 2 + 3) / 4 = 2^31 + 1.5, at every evaluation; training seeds are below 2^31."""
    from pathlib import Path

    from grpokit.trainer.loop import Trainer

    scripted = f"{Path(__file__).parent / '_scripted.py'}:Scripted"
    scripted_run = (f"environment.name={scripted}", "environment.options={turns: 1}", "rewards=[{name: env_return}]",
                    "eval.accuracy_reward=env_return")
    cfg = nav_cfg(tmp_path, *scripted_run)
    model, tok = tiny_model_and_tokenizer(seed=0)
    trainer = Trainer(cfg, model, tok)
    before = trainer.evaluate("before")["env/seed"]
    metrics = trainer.train_step()
    after = trainer.evaluate("after")["env/seed"]
    assert before == after == 2**31 + 1.5
    assert metrics["env/seed"] < 2**31  # the step's 2 groups, seeds below 2^31
    custom = Trainer(nav_cfg(tmp_path, *scripted_run, "environment.heldout_seed=3000000000"), model, tok)
    assert custom.evaluate("before")["env/seed"] == 3000000000 + 1.5  # named seeds



def test_a_heldout_judge_that_fails_on_every_episode_stops_the_evaluation_instead_of_scoring_0(tmp_path):
    """guess_number truncates every episode after max_guesses=3 (env_done), and they all reported 'solved':
    a judge reading info['solvd'] fails on all 4 held-out episodes, which used to print accuracy 0."""
    from grpokit.rewards import RewardError
    from grpokit.trainer.loop import Trainer

    model, tok = tiny_model_and_tokenizer(seed=0)
    typo = ("rewards=[{name: env_return}, {name: env_info, weight: 0.0, kwargs: {key: solvd}}]", "eval.accuracy_reward=env_info")
    trainer = Trainer(guess_cfg(tmp_path, rewards=typo), model, tok)
    with pytest.raises(RewardError, match=r"no episode reported info\['solvd'\] \(they reported solved, valid_guess\)"):
        trainer.evaluate("before")
