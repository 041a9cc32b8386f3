"""GRPOTrainer's environment_factory / tools=[...] arguments: a dict of environments routed by the rows' environment
column, and what grpokit cannot honour refused in one line naming the argument (before any model loads)."""

import pytest

from grpokit import GRPOConfig, GRPOTrainer, UnsupportedArgument


class Lamp:
    """On / off; get_reward: 1 when on."""

    def reset(self, **kwargs):
        self.on = False

    def switch(self, on: bool) -> str:
        """Switch the lamp.

        Args:
            on: true for on
        """
        self.on = on
        return "on" if on else "off"

    def get_reward(self) -> float:
        return float(self.on)


class Echo:
    """No reward of its own; reset appends the row's word."""

    def reset(self, word, **kwargs):
        return f" Say {word}."

    def echo(self, text: str) -> str:
        """Repeat the text.

        Args:
            text: what to repeat
        """
        return text


ROWS = [{"prompt": [{"role": "user", "content": f"Task {w}."}], "environment": env, "word": w}
        for env, w in (("lamp", "a"), ("echo", "b"), ("lamp", "c"), ("echo", "d"))]


def test_a_dict_of_environments_routes_rows_and_rewards_see_the_environment_column(tiny_model_dir, short_args):
    seen = []

    def by_environment(prompts, completions, environment, **kwargs):
        seen.extend(zip(environment, (p[-1]["content"] for p in prompts)))
        return [0.0] * len(completions)

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=by_environment, args=GRPOConfig(**short_args),
                          train_dataset=ROWS, environment_factory={"lamp": Lamp, "echo": Echo})
    assert trainer.reward_func_names == ["by_environment", "Lamp"]
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert all(h["rewards/Lamp/mean"] == 0.0 for h in logs)  # the Lamp episodes' get_reward (Echo's: None, not in the mean)
    # two steps of 2 rows draw all 4; each row's reset ran in its own environment: Echo's reset appended the row's word, Lamp's nothing
    assert set(seen) == {("lamp", "Task a."), ("echo", "Task b. Say b."), ("lamp", "Task c."), ("echo", "Task d. Say d.")}
    metrics = trainer.evaluate(eval_dataset=ROWS[:2])  # a later eval dataset is routed the same way
    assert metrics["eval_rewards/Lamp/mean"] == 0.0 and metrics["eval_rewards/by_environment/mean"] == 0.0
    with pytest.raises(UnsupportedArgument, match="GRPOTrainer.evaluate\\(eval_dataset\\): row 0 has environment='desk'"):
        trainer.evaluate(eval_dataset=[{**ROWS[0], "environment": "desk"}])


@pytest.mark.parametrize("kwargs,expected", [
    (dict(environment_factory={"lamp": Lamp}), "GRPOTrainer\\(environment_factory=\\{...\\}\\) without train_dataset"),
    (dict(environment_factory={"lamp": Lamp}, train_dataset=ROWS),
     "GRPOTrainer\\(train_dataset\\): row 1 has environment='echo'; with a dict environment_factory every row names one of \\['lamp'\\]"),
    (dict(environment_factory=Echo), "GRPOTrainer\\(reward_funcs=None\\): give a reward function, or an environment_factory whose"),
    (dict(environment_factory=Lamp, reward_funcs=lambda completions, environments, **kw: [0.0] * len(completions)),
     "it takes TRL's 'environments' \\(the live instances\\), which grpokit does not pass"),
    (dict(environment_factory=Lamp, args_extra={"max_steps": -1}), "max_steps"),
    (dict(tools=[Echo().echo]), "GRPOTrainer\\(train_dataset=None\\)"),
    (dict(environment_factory=Lamp, args_extra={"grpokit": {"environment.name": "guess_number"}}),
     "both name an environment: give one"),
    (dict(rollout_func=lambda prompts, trainer: {}), "GRPOTrainer\\(rollout_func=...\\): grpokit cannot honour it"),
])
def test_what_grpokit_cannot_honour_is_refused_in_one_line(tiny_model_dir, short_args, kwargs, expected):
    args = GRPOConfig(**{**short_args, **kwargs.pop("args_extra", {})})
    kwargs.setdefault("reward_funcs", None)
    with pytest.raises((UnsupportedArgument, ValueError), match=expected) as info:
        GRPOTrainer(model=tiny_model_dir, args=args, **kwargs)
    assert "\n" not in str(info.value)


class OwnLamp(Lamp):
    def reset(self, **kwargs):
        super().reset(**kwargs)
        return "Switch the lamp on."


@pytest.mark.parametrize("rounds,max_turns", [(None, 8), (2, 3)])
def test_the_episode_caps_are_trl_s(tiny_model_dir, short_args, rounds, max_turns):
    # TRL: max_completion_length (8 here) caps the whole rollout, tool results included; max_tool_calling_iterations
    # rounds of calls, then the answer (None: no limit but the length, and every turn samples at least one token)
    args = GRPOConfig(**short_args, max_tool_calling_iterations=rounds)
    env = GRPOTrainer(model=tiny_model_dir, args=args, environment_factory=OwnLamp).native.cfg.environment
    assert (env.name, env.max_episode_tokens, env.max_turns) == ("trl", 8, max_turns)
    assert env.options == {"factory": OwnLamp, "tools": []}
