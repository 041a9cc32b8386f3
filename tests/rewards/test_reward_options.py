"""A reward's config kwargs are checked at load: a typo in an option is refused, data columns still flow."""

import pytest

from grpokit.config.schema import RewardConfig
from grpokit.rewards import REWARDS, RewardLoadError, resolve_reward
from grpokit.rewards.loading import check_reward_options
from grpokit.trainer.setup import build_rewards


def check(name, **options):
    check_reward_options(name, resolve_reward(name), options, "rewards[0].kwargs")


def test_a_typo_in_a_builtin_option_is_refused_naming_the_valid_keys():
    # answer_match takes **kwargs for the data columns: before, missing_okk was swallowed there
    with pytest.raises(RewardLoadError, match=r"^rewards\[0\]\.kwargs \['missing_okk'\] is not an option of reward 'answer_match'; valid keys: answer, missing_ok$"):
        check("answer_match", missing_okk=True)


def test_the_trainer_refuses_it_while_building_the_rewards():
    with pytest.raises(RewardLoadError, match=r"rewards\[1\]\.kwargs \['patern'\]"):
        build_rewards([RewardConfig(name="answer_match"), RewardConfig(name="format_regex", kwargs={"patern": "x"})])


def test_real_options_are_accepted_and_act():
    check("format_regex", pattern=r"^\d+$")
    check("answer_tiers", correct=2.0, incorrect=0.0, invalid=-1.0)
    check("math_verify", timeout_seconds=2)
    (fn,) = [r.fn for r in build_rewards([RewardConfig(name="format_regex", kwargs={"pattern": r"^\d+$"})])]
    assert fn(["p", "p"], ["12", "twelve"]) == [1.0, 0.0]  # the bound pattern is the one that scores


def test_batch_fields_cannot_be_bound_from_the_config():
    with pytest.raises(RewardLoadError, match="the trainer passes these"):
        check("answer_match", completions=["x"])


def test_a_user_function_is_checked_by_its_signature_unless_it_takes_kwargs(tmp_path):
    path = tmp_path / "user_rewards.py"
    path.write_text(
        "def exact(prompts, completions, answer=None, *, case=False):\n    return [1.0] * len(completions)\n"
        "def loose(prompts, completions, **kwargs):\n    return [float(kwargs.get('bonus', 0))] * len(completions)\n"
    )
    exact, loose = f"{path}:exact", f"{path}:loose"
    check_reward_options(exact, resolve_reward(exact), {"case": True}, "rewards[0].kwargs")
    with pytest.raises(RewardLoadError, match=r"\['cse'\] is not an option"):
        check_reward_options(exact, resolve_reward(exact), {"cse": True}, "rewards[0].kwargs")
    # TRL-style **kwargs may read an option (here 'bonus'): it cannot be told from a column, so it passes
    check_reward_options(loose, resolve_reward(loose), {"bonus": 1}, "rewards[0].kwargs")


def test_win_rate_options_are_its_own_and_its_judge_s():
    judge = "grpokit.families.flow_matching.rewards:image_judge"
    check("win_rate", prefer=judge, tie_margin=0.05)  # forwarded to the judge (pref_grpo_image)
    with pytest.raises(RewardLoadError, match=r"\['tie_margn'\]"):
        check("win_rate", prefer=judge, tie_margn=0.05)
    check("win_rate", prefer="length", shorter=False)
    with pytest.raises(RewardLoadError, match=r"\['judge_model'\]"):
        check("win_rate", prefer="length", judge_model="x")  # the length judge has no model
    check("win_rate", prefer="llm_judge", judge_model="x")
    with pytest.raises(RewardLoadError, match="is not a built-in"):
        check("win_rate", prefer="lenght")


@pytest.mark.parametrize("name", REWARDS.names())
def test_no_builtin_reward_swallows_an_unknown_option(name):
    if name == "rm_score":  # its model_path is required; the unknown key is refused all the same
        with pytest.raises(RewardLoadError, match=r"\['no_such_option'\]"):
            check(name, model_path="x", no_such_option=1)
        return
    with pytest.raises(RewardLoadError, match=r"\['no_such_option'\]"):
        check(name, no_such_option=1)
