"""A gymnasium environment with text spaces, registered with gymnasium, trains through grpokit."""

import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")  # in the dev extra: present wherever `make test` installed

from grpokit.config import load_config  # noqa: E402
from grpokit.envs.base import environment_factory  # noqa: E402
from grpokit.testing import tiny_model_and_tokenizer  # noqa: E402


class CountLetters(gymnasium.Env):
    """Text env: the row's prompt is shown; each action earns 1 per letter 'a' (at most 3 turns)."""

    def __init__(self, turns=3):
        self.observation_space = gymnasium.spaces.Text(200)
        self.action_space = gymnasium.spaces.Text(200)
        self.turns = turns

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.row = 0, options["row"]
        return f"Say many a's about: {self.row['prompt']}", {"topic_len": len(self.row["prompt"])}

    def step(self, action):
        self.t += 1
        info = {"as": action.count("a"), "is_success": "a" in action}  # gymnasium's usual bool
        return f"turn {self.t} done", float(action.count("a")), False, self.t >= self.turns, info


gymnasium.register(id="grpokit-test/CountLetters-v0", entry_point=CountLetters)


def test_the_adapter_passes_the_row_and_maps_gymnasium_tuples():
    env = environment_factory("gymnasium")(id="grpokit-test/CountLetters-v0", kwargs={"turns": 2})
    assert env.reset({"prompt": "cats"}, seed=3) == ("Say many a's about: cats", {"topic_len": 4})  # gymnasium's info kept
    first = env.step("banana")
    assert (first.observation, first.reward, first.terminated, first.truncated) == ("turn 1 done", 3.0, False, False)
    last = env.step("x")
    assert last.truncated and last.observation == "" and last.info == {"as": 0, "is_success": False}
    with pytest.raises(ValueError, match="gymnasium.make"):
        environment_factory("gymnasium")(id="grpokit-test/Missing-v0")


def test_a_gymnasium_environment_trains_end_to_end_on_the_tiny_model(tmp_path):
    from grpokit.trainer.loop import Trainer

    cfg = load_config(overrides=[
        f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0",
        "data.task=arithmetic", "data.n_train=8", "data.n_heldout=2",
        "environment.name=gymnasium", "environment.options={id: grpokit-test/CountLetters-v0}",
        "environment.max_episode_tokens=120", "rewards=[{name: env_return}, {name: env_info, weight: 0.0, kwargs: {key: is_success}}]",
        "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=6", "train.micro_batch_size=4",
        "train.steps=2", "eval.before=false", "eval.after=false",
    ])
    model, tok = tiny_model_and_tokenizer(seed=0)
    torch.manual_seed(0)
    trainer = Trainer(cfg, model, tok)
    batch, scores, _ = trainer._collect()
    first_user = tok.decode(batch.prompt_ids[0][batch.prompt_mask[0].bool()])
    assert "Say many a's about: " + batch.rows[0]["prompt"] in first_user  # reset's observation is the prompt
    assert all(ep["turns"] == 3 for ep in batch.episodes)
    counts = [sum(m["content"].count("a") for m in ep["messages"] if m["role"] == "assistant") for ep in batch.episodes]
    assert scores.per_reward["env_return"].tolist() == [float(c) for c in counts]
    last_said_a = [float("a" in [m for m in ep["messages"] if m["role"] == "assistant"][-1]["content"]) for ep in batch.episodes]
    assert scores.per_reward["env_info"].tolist() == last_said_a  # info["is_success"]: True -> 1.0, False -> 0.0
    # reset()'s info reaches env_info and the metrics as a step's does (steps never set topic_len)
    assert [ep["env_info"]["topic_len"] for ep in batch.episodes] == [len(row["prompt"]) for row in batch.rows]
    metrics = trainer.train_step()
    assert metrics["env/turns"] == 3 and "env/as" in metrics and 0.0 <= metrics["env/is_success"] <= 1.0
    assert metrics["env/topic_len"] > 0
