"""TRL's environment_factory / tools=[...] through grpokit's adapter (environment 'trl'): scripted turns, no model,
results and rewards checked by hand; then GRPOTrainer(environment_factory=...) without a train_dataset on a tiny model."""

import json

import pytest

from grpokit.envs.base import environment_factory
from grpokit.envs.own_episodes import TRAIN_PROMPT
from grpokit.envs.trl_env import ROUTE_COLUMN, TRLEnvironment, env_reward, probe, route_rows, routing_problem


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class KeyValue:
    """A tiny key-value store; the task: store answer=42. reset appends the row's hint to the prompt."""

    def __init__(self):
        self.store, self.seen = {}, None

    def reset(self, **kwargs):
        self.store, self.seen = {}, kwargs
        return kwargs.get("hint")

    def put(self, key: str, value: str) -> str:
        """Store a value.

        Args:
            key: where
            value: what
        """
        self.store[key] = value
        return f"stored {key}"

    def get(self, key: str) -> str:
        """Read a value.

        Args:
            key: where
        """
        return self.store[key]

    def _helper(self):  # private: not a tool
        return None

    def get_reward(self) -> float:
        return 1.0 if self.store.get("answer") == "42" else 0.0


class Counter:
    """Makes its own prompt (no dataset needed); no get_reward."""

    def reset(self, **kwargs):
        self.n, self.kwargs = 0, kwargs
        return "Count to 2 with increment."

    def increment(self) -> int:
        """Add one to the counter."""
        self.n += 1
        return self.n

    async def ping(self) -> str:
        """Answer pong."""
        return "pong"


ROW = {"prompt": [{"role": "user", "content": "Store the answer."}], "hint": " The key is 'answer'."}


def test_an_episode_calls_the_instance_s_methods_and_get_reward_is_its_return():
    env = TRLEnvironment(factory=KeyValue)
    first = env.reset(dict(ROW), seed=0)
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[1]["content"] == "Store the answer. The key is 'answer'."  # TRL: reset's string appended to the last message
    listed = [json.loads(line)["function"]["name"] for line in first[0]["content"].splitlines()[2:]]
    assert listed == ["get", "put"]  # public methods only: not reset, get_reward or _helper
    assert env.env.seen == ROW  # reset(**row): the row's fields, as TRL passes them

    s1 = env.step("I store it. " + call("put", key="answer", value="42"))
    assert s1.observation == [{"role": "tool", "content": "stored answer"}] and not s1.terminated
    assert (s1.reward, s1.info["KeyValue"]) == (1.0, 1.0)  # get_reward went 0 -> 1: this step's reward is the change
    s2 = env.step(call("get", key="nope") + call("get", key="answer"))
    assert s2.observation == [{"role": "tool", "content": "error: KeyError: 'nope'"}, {"role": "tool", "content": "42"}]
    assert (s2.reward, s2.info["failed_calls"], s2.info["tool_calls"]) == (0.0, 1.0, 3.0)
    s3 = env.step("The answer is stored.")  # no call: the final answer, the episode ends
    assert s3.terminated and s3.observation == "" and s3.info["answered"] == 1.0
    assert s1.reward + s2.reward + s3.reward == 1.0 == s3.info["KeyValue"]  # env_return = the last get_reward()


def test_bad_calls_get_the_tools_environment_s_error_texts():
    env = TRLEnvironment(factory=KeyValue)
    env.reset(dict(ROW))
    out = env.step(call("delete", key="a") + call("put", key="a") + "<tool_call>{oops</tool_call>")
    assert [m["content"] for m in out.observation] == [
        "error: unknown tool 'delete'; tools: get, put",
        "error: put: missing a required argument: 'value'",
        "error: invalid tool call JSON (Expecting property name enclosed in double quotes at character 1)",
    ]
    assert (out.info["malformed_calls"], out.info["bad_calls"], out.reward) == (3.0, 3.0, 0.0)


def test_each_episode_gets_a_fresh_instance():
    env = TRLEnvironment(factory=KeyValue)
    env.reset(dict(ROW))
    first = env.env
    env.step(call("put", key="answer", value="42"))
    env.reset(dict(ROW))
    assert env.env is not first and env.env.store == {}
    assert env.step(call("get", key="answer")).observation[0]["content"] == "error: KeyError: 'answer'"


def test_no_dataset_reset_gets_trl_s_empty_prompt_and_its_string_is_the_prompt():
    env = environment_factory("trl")(factory=Counter)  # through the registry, as the episode backend builds it
    placeholder = {"prompt": TRAIN_PROMPT.format(i=0), "episode": 0}
    first = env.reset(placeholder, seed=3)
    assert first[1] == {"role": "user", "content": "Count to 2 with increment."}
    assert env.env.kwargs == {"prompt": [{"role": "user", "content": ""}]}
    assert env.step(call("increment") + call("increment")).observation[1]["content"] == "2"
    assert env.step(call("ping")).observation[0]["content"] == "pong"  # an async method runs to completion

    class Silent(Counter):
        def reset(self, **kwargs):
            return None

    with pytest.raises(ValueError, match="Silent.reset\\(\\) returned no prompt and there is no train_dataset"):
        TRLEnvironment(factory=Silent).reset(placeholder)


def test_a_dict_of_factories_routes_each_row_by_its_environment_column():
    env = TRLEnvironment(factory={"kv": KeyValue, "count": Counter})
    rows = route_rows([{**ROW, "environment": "kv"}, {"prompt": "Go.", "environment": "count"}])
    assert ROUTE_COLUMN in rows[0] and "environment" not in rows[0]
    env.reset(rows[0])
    assert type(env.env) is KeyValue and env.env.seen == ROW  # the routing column is not passed to reset, as TRL
    first = env.reset(rows[1])
    assert type(env.env) is Counter and first[1]["content"] == "Go.Count to 2 with increment."
    assert "put" not in first[0]["content"]  # only the row's environment's tools are listed
    assert "KeyValue" not in env.step("done").info  # a Counter episode has no get_reward
    assert routing_problem({"kv": KeyValue}, rows, "GRPOTrainer(train_dataset)") == (
        "GRPOTrainer(train_dataset): row 1 has environment='count'; with a dict environment_factory every row names one "
        "of ['kv'] in its 'environment' column")
    with pytest.raises(ValueError, match="the row's environment 'count' is not one of environment_factory's \\['kv'\\]"):
        TRLEnvironment(factory={"kv": KeyValue}).reset(rows[1])


def test_plain_tools_without_an_environment():
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first
            b: second
        """
        return a + b

    env = TRLEnvironment(tools=[add])
    first = env.reset({"prompt": "What is 2+3?"})
    assert first[1] == {"role": "user", "content": "What is 2+3?"} and '"name": "add"' in first[0]["content"]
    assert env.step(call("add", a=2, b=3)).observation == [{"role": "tool", "content": "5"}]


def test_probe_refuses_what_cannot_play_and_names_the_reward_owners():
    assert probe(KeyValue) == ["KeyValue"] and probe({"a": KeyValue, "b": Counter, "c": KeyValue}) == ["KeyValue"]

    class NoReset:
        def act(self) -> str:
            """Act."""

    class Undocumented(Counter):
        def jump(self, height: int) -> str:
            return "ok"

    class AsyncReset(Counter):
        async def reset(self, **kwargs):
            return "x"

    for factory, expected in [(NoReset, "environment_factory: environment_factory built a NoReset, which has no reset"),
                              ({"u": Undocumented}, "environment_factory\\['u'\\]: environment Undocumented: tool 'jump': Cannot"),
                              (AsyncReset, "AsyncReset.reset is async")]:
        with pytest.raises(ValueError, match=expected):
            probe(factory)
    with pytest.raises(ValueError, match="tool 'increment' is both in tools=\\[...\\] and a method of Counter"):
        probe(Counter, tools=[Counter().increment])


def test_env_reward_reads_the_class_s_last_get_reward_and_none_elsewhere():
    reward = env_reward("KeyValue")
    assert reward.__name__ == "KeyValue"
    assert reward(completions=["a", "b", "c"], env_info=[{"KeyValue": 1.0}, {}, {"KeyValue": 0.0}]) == [1.0, None, 0.0]


def test_grpo_trainer_with_environment_factory_and_no_dataset_trains_two_steps(tmp_path):
    from grpokit import GRPOConfig, GRPOTrainer
    from grpokit.testing import save_tiny_model

    seen = []

    def messages_after_prompt(prompts, completions, **kwargs):  # TRL's view of a tool rollout
        seen.append((prompts[0], completions[0]))
        return [float(len(c)) for c in completions]

    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2, max_steps=2,
                      max_completion_length=12, logging_steps=1, gradient_checkpointing=False, disable_tqdm=True)
    trainer = GRPOTrainer(model=str(save_tiny_model(tmp_path / "model")), reward_funcs=messages_after_prompt, args=args,
                          environment_factory=OwnPrompt)  # no train_dataset
    assert trainer.reward_func_names == ["messages_after_prompt", "OwnPrompt"]
    assert [r["prompt"] for r in trainer.native.splits.train] == [TRAIN_PROMPT.format(i=i) for i in range(2)]
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and trainer.state.global_step == 2
    # the random tiny model writes no tool call: one turn, its answer, ends each episode (1 message after the prompt);
    # get_reward() is 0.5 because reset got TRL's placeholder row (one empty user message) and nothing was stored
    assert all(h["env/tool_calls"] == 0.0 and h["env/turns"] == 1.0 for h in logs)
    assert all((h["rewards/OwnPrompt/mean"], h["rewards/messages_after_prompt/mean"], h["reward"]) == (0.5, 1.0, 1.5) for h in logs)
    prompt, completion = seen[0]
    assert prompt == [{"role": "user", "content": "Store answer=42 with put."}]  # reset's string; the tools' listing left out
    assert [m["role"] for m in completion] == ["assistant"]


class OwnPrompt(KeyValue):
    """Makes its own prompt; get_reward: 1 for answer=42 stored, else 0.5 when reset got TRL's placeholder row."""

    def reset(self, **kwargs):
        super().reset(**kwargs)
        self.placeholder = kwargs == {"prompt": [{"role": "user", "content": ""}]}
        return "Store answer=42 with put."

    def get_reward(self) -> float:
        return 1.0 if self.store.get("answer") == "42" else 0.5 * self.placeholder


def test_natively_the_factory_and_tools_may_be_named_by_file(tmp_path):
    (tmp_path / "user_trl_env.py").write_text(
        "class Bell:\n    def reset(self, **kwargs):\n        self.rung = 0\n"
        "    def ring(self) -> str:\n        '''Ring the bell.'''\n        self.rung += 1\n        return 'ding'\n"
        "    async def get_reward(self) -> float:\n        return float(self.rung)\n\n"
        "def shout(text: str) -> str:\n    '''Shout.\n\n    Args:\n        text: what\n    '''\n    return text.upper()\n")
    env = environment_factory("trl")(factory=f"{tmp_path}/user_trl_env.py:Bell", tools=[f"{tmp_path}/user_trl_env.py:shout"])
    env.reset({"prompt": "Ring twice."})
    out = env.step(call("ring") + call("ring") + call("shout", text="hi"))
    assert [m["content"] for m in out.observation] == ["ding", "ding", "HI"]
    assert (out.reward, out.info["Bell"]) == (2.0, 2.0)  # an async get_reward runs to completion
    with pytest.raises(ValueError, match="tools\\[0\\] 'python': give a callable, 'package.module:name'"):
        environment_factory("trl")(tools=["python"])  # grpokit's own tools run sandboxed, in environment 'tools'
