"""Reward functions written for TRL's GRPOTrainer run unchanged through score_completions."""

import math

import pytest
import torch

from grpokit.rewards import REWARDS, NamedReward, RewardError, score_completions

USER = [{"role": "user", "content": "What is 2 + 2?"}]
SYS_USER = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 3 + 3?"}]


def reward_len(completions, **kwargs):
    """TRL's documented example reward: prefer completions close to 20 characters."""
    return [-abs(20 - len(completion)) for completion in completions]


def test_trl_reward_taking_only_completions_scores_the_completions():
    scores = score_completions([NamedReward("len", reward_len)], ["p0", "p1"], ["x" * 18, "y" * 25], {})
    # -|20 - 18| = -2, -|20 - 25| = -5 (called positionally, the prompts would be scored: -18, -18)
    assert scores.total.tolist() == [-2.0, -5.0]


def test_conversational_batch_gets_trl_arguments():
    seen = {}

    def trl_reward(prompts, completions, completion_ids, **kwargs):
        seen.update(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        return [float(len(ids)) for ids in completion_ids]

    scores = score_completions(
        [NamedReward("trl", trl_reward)], [USER, SYS_USER], ["4", "six"], {"answer": ["4", "6"]},
        completion_ids=[[23, 2], [41, 30, 44]],
    )
    assert seen["prompts"] == [USER, SYS_USER]  # the message lists, as in the data
    assert seen["completions"] == [[{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "six"}]]
    assert seen["completion_ids"] == [[23, 2], [41, 30, 44]] and seen["answer"] == ["4", "6"]
    assert scores.total.tolist() == [2.0, 3.0]  # len of each id list


def test_builtins_read_texts_of_conversational_prompts():
    seen = {}

    def text_reward(prompts, completions, **kwargs):
        seen.update(prompts=prompts, completions=completions)
        return [1.0] * len(completions)

    rewards = [NamedReward("answer_match", REWARDS.get("answer_match"), text_only=True),
               NamedReward("texts", text_reward, text_only=True)]
    scores = score_completions(rewards, [USER, SYS_USER], ["2 + 2 = 4", "It is 7"], {"answer": ["4", "6"]})
    assert scores.per_reward["answer_match"].tolist() == [1.0, 0.0]  # 4 == 4; 7 != 6
    assert seen == {"prompts": ["What is 2 + 2?", "What is 3 + 3?"], "completions": ["2 + 2 = 4", "It is 7"]}


def test_build_rewards_marks_builtins_text_only(tmp_path):
    from grpokit.config.schema import RewardConfig
    from grpokit.trainer.setup import build_rewards

    (tmp_path / "mine.py").write_text("def mine(completions, **kwargs):\n    return [0.0] * len(completions)\n")
    built = build_rewards([RewardConfig(name="answer_match"), RewardConfig(name=f"{tmp_path}/mine.py:mine")])
    assert [(r.name, r.text_only) for r in built] == [("answer_match", True), ("mine", False)]


def test_completion_ids_reach_only_functions_that_take_them():
    def strict(prompts, completions, answer):  # grpokit's older convention, no **kwargs
        return [float(c == a) for c, a in zip(completions, answer)]

    positional = lambda p, c, **kw: [float("completion_ids" in kw)] * len(c)  # noqa: E731
    scores = score_completions(
        [NamedReward("strict", strict), NamedReward("positional", positional)], ["p", "q"], ["4", "5"],
        {"answer": ["4", "6"]}, completion_ids=[[1], [2]],
    )
    assert scores.per_reward["strict"].tolist() == [1.0, 0.0]
    assert scores.per_reward["positional"].tolist() == [1.0, 1.0]  # **kw takes it, as TRL's functions do


def test_none_is_nan_and_left_out_of_the_weighted_sum_as_trl_nansum():
    def math_only(completions, topic, **kwargs):
        return [1.0 if t == "math" else None for t in topic]

    def code_only(completions, topic, **kwargs):
        return [0.5 if t == "code" else None for t in topic]

    scores = score_completions(
        [NamedReward("math", math_only, weight=2.0), NamedReward("code", code_only, weight=4.0)],
        ["p"] * 3, ["a", "b", "c"], {"topic": ["math", "code", "chat"]},
    )
    assert math.isnan(scores.per_reward["math"][1]) and math.isnan(scores.per_reward["code"][0])
    # nansum: 2 * 1.0 = 2; 4 * 0.5 = 2; every reward None -> 0
    torch.testing.assert_close(scores.total, torch.tensor([2.0, 2.0, 0.0]))


def test_async_reward_function():
    async def judge(completions, **kwargs):
        return [float(len(c)) for c in completions]

    assert score_completions([NamedReward("a", judge)], ["p", "q"], ["ab", "abc"], {}).total.tolist() == [2.0, 3.0]


def test_per_sample_retry_keeps_trl_form_and_names_the_user_text():
    def picky(completions, completion_ids, **kwargs):
        if any(c[0]["content"] == "bad" for c in completions):
            raise ValueError("cannot parse")
        return [float(ids[0]) for ids in completion_ids]

    scores = score_completions([NamedReward("picky", picky)], [USER, SYS_USER], ["ok", "bad"], {},
                               on_error="zero", completion_ids=[[7], [8]])
    assert scores.per_reward["picky"].tolist() == [7.0, 0.0] and scores.failures == {"picky": 1}
    with pytest.raises(RewardError, match=r"failed on sample 1 \(prompt 'What is 3 \+ 3\?'\): ValueError: cannot parse"):
        score_completions([NamedReward("picky", picky)], [USER, SYS_USER], ["ok", "bad"], {}, completion_ids=[[7], [8]])


def test_rollout_batch_columns_carry_completion_ids_without_padding():
    from grpokit.rollout.types import RolloutBatch

    ids = torch.tensor([[5, 6, 2, 0], [7, 0, 0, 0]])  # right-padded with pad id 0
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])  # row 1 sampled the pad id once as a real token
    z = torch.zeros(2, 4)
    batch = RolloutBatch(
        prompt_ids=torch.zeros(2, 1, dtype=torch.long), prompt_mask=torch.ones(2, 1, dtype=torch.long),
        completion_ids=ids, completion_mask=mask, group_ids=torch.tensor([0, 0]), sampling_logp=z,
        truncated=torch.tensor([False, False]), rows=[{"prompt": USER, "answer": "4", "completion_ids": "data"}] * 2,
    )
    assert batch.columns() == {"answer": ["4", "4"], "completion_ids": [[5, 6, 2], [7, 0]]}
