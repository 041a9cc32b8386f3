"""Tests for grpokit.rewards.loading.resolve_reward."""

import sys

import pytest

from grpokit.rewards import REWARDS, RewardLoadError, resolve_reward

USER_REWARDS = '''
def shout(prompts, completions, **kwargs):
    """1.0 for upper-case completions."""
    return [float(c.isupper()) for c in completions]

NOT_A_FUNCTION = 3
'''


def test_builtin_name():
    assert resolve_reward("answer_match") is REWARDS.get("answer_match")


def test_file_path_absolute_and_relative(tmp_path, monkeypatch):
    path = tmp_path / "my_rewards.py"
    path.write_text(USER_REWARDS)
    fn = resolve_reward(f"{path}:shout")
    assert fn(["p", "p"], ["HI", "hi"]) == [1.0, 0.0]
    monkeypatch.chdir(tmp_path)
    assert resolve_reward("./my_rewards.py:shout")(["p"], ["OK"]) == [1.0]
    assert resolve_reward("my_rewards.py:shout")(["p"], ["ok"]) == [0.0]


def test_module_function(tmp_path, monkeypatch):
    package = tmp_path / "user_pkg_for_reward_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "scoring.py").write_text(USER_REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = resolve_reward("user_pkg_for_reward_test.scoring:shout")
    assert fn(["p"], ["YES"]) == [1.0]
    sys.modules.pop("user_pkg_for_reward_test.scoring", None)
    sys.modules.pop("user_pkg_for_reward_test", None)


def test_stdlib_module_function():
    assert resolve_reward("os.path:basename")("a/b") == "b"


def test_unknown_name_lists_builtins_and_forms():
    with pytest.raises(RewardLoadError) as info:
        resolve_reward("answr_match")
    message = str(info.value)
    assert "answr_match" in message and "answer_match" in message and "math_verify" in message
    assert "package.module:function" in message and "path/to/file.py:function" in message


def test_missing_file(tmp_path):
    with pytest.raises(RewardLoadError, match="file not found.*nope.py"):
        resolve_reward(f"{tmp_path}/nope.py:fn")


def test_missing_function_and_not_callable(tmp_path):
    path = tmp_path / "r.py"
    path.write_text(USER_REWARDS)
    with pytest.raises(RewardLoadError, match="no function 'whisper'.*shout"):
        resolve_reward(f"{path}:whisper")
    with pytest.raises(RewardLoadError, match="NOT_A_FUNCTION.*int, not a function"):
        resolve_reward(f"{path}:NOT_A_FUNCTION")


def test_missing_module_and_broken_file(tmp_path):
    with pytest.raises(RewardLoadError, match="cannot import module 'no_such_module_xyz'"):
        resolve_reward("no_such_module_xyz:fn")
    path = tmp_path / "broken.py"
    path.write_text("def f(:\n")
    with pytest.raises(RewardLoadError, match="importing .*broken.py failed: SyntaxError"):
        resolve_reward(f"{path}:f")


def test_accuracy_reward_names_a_file_reward_by_its_spec_or_its_function(tmp_path):
    """eval.accuracy_reward may repeat the rewards entry ('file.py:fn'); the reward is listed as 'fn'."""
    from grpokit.config import load_config
    from grpokit.rewards.scoring import NamedReward
    from grpokit.trainer.setup import accuracy_judge

    path = tmp_path / "my_rewards.py"
    path.write_text(USER_REWARDS)
    rewards = [NamedReward("answer_match", REWARDS.get("answer_match")), NamedReward("shout", resolve_reward(f"{path}:shout"))]
    for judge in (f"{path}:shout", "shout"):
        assert accuracy_judge(load_config(overrides=[f"eval.accuracy_reward={judge}"]), rewards).name == "shout"
    with pytest.raises(ValueError, match="eval.accuracy_reward 'whisper' is not one of the run's rewards"):
        accuracy_judge(load_config(overrides=["eval.accuracy_reward=whisper"]), rewards)
