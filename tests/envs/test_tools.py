"""Tool calls: parsing, the sandboxed worker, and every hostile call becoming an observation (escapes: test_sandbox.py)."""

import json
import socket
from pathlib import Path

import pytest

from grpokit.envs.base import environment_factory
from grpokit.envs.sandbox import run_tool
from grpokit.envs.tools import TOOLS, calculator, parse_calls, tool_schema


def call(name, **arguments):
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


@pytest.fixture
def env():
    e = environment_factory("tools")(tools=["calculator", "python"], tool_timeout_s=1.0, max_output_chars=1000)
    e.reset({"prompt": "What is 37 * 46?"})
    return e


def test_calculator_and_its_schema():
    assert calculator("(37 * 46) + 5") == "1707" and calculator("7 / 2") == "3.5" and calculator("2 ** 10") == "1024"
    with pytest.raises(ValueError):
        calculator("__import__('os')")
    schema = tool_schema(TOOLS.get("calculator"), "calculator")["function"]
    assert schema["name"] == "calculator" and schema["parameters"]["required"] == ["expression"]


def test_the_first_observation_lists_the_tools_and_the_call_format():
    e = environment_factory("tools")(tools=["calculator"])
    first = e.reset({"prompt": "What is 2 + 2?"})
    assert [m["role"] for m in first] == ["system", "user"] and first[1]["content"] == "What is 2 + 2?"
    assert "<tool_call>" in first[0]["content"] and '"name": "calculator"' in first[0]["content"]


def test_a_good_call_returns_its_result_as_a_tool_message_and_a_turn_without_a_call_ends_the_episode(env):
    r = env.step("Let me compute. " + call("calculator", expression="37 * 46"))
    assert r.observation == [{"role": "tool", "content": "1702"}] and not r.terminated
    assert r.info["tool_calls"] == 1 and r.info["bad_calls"] == 0 and r.info["well_formed"] == 1.0
    r = env.step("The answer is 1702.")
    assert r.terminated and r.info["answered"] == 1.0


@pytest.mark.parametrize("action,expected,kind", [
    ('<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>', "invalid tool call JSON", "malformed"),
    (call("weather", city="Paris"), "unknown tool 'weather'", "malformed"),
    (call("calculator", expr="1+1"), "missing a required argument", "malformed"),
    (call("calculator", expression="1 / 0"), "ZeroDivisionError", "failed"),
    (call("python", code="while True:\n    pass"), "did not finish within 1 s", "failed"),
    (call("python", code="print('x' * 10_000_000)"), "over the 1000-character cap", "failed"),
])
def test_each_hostile_call_becomes_an_error_observation_and_is_counted(env, action, expected, kind):
    r = env.step(action)
    assert not r.terminated and len(r.observation) == 1
    assert r.observation[0]["content"].startswith("error:") and expected in r.observation[0]["content"]
    assert r.info["bad_calls"] == 1 and r.info[f"{kind}_calls"] == 1
    assert r.info["well_formed"] == (0.0 if kind == "malformed" else 1.0)


def _connect():
    socket.create_connection(("127.0.0.1", 9))


def _write(path):
    Path(path).write_text("x")
    return Path(path).read_text()


def test_the_sandbox_has_no_network_and_writes_only_in_its_scratch_folder(tmp_path):
    out = run_tool(_connect, {})  # a module-level function of this test module, imported inside by reference
    assert not out.ok and out.kind == "exception"
    outside = tmp_path / "escaped.txt"
    out = run_tool(_write, {"path": str(outside)})
    assert not out.ok and out.kind == "exception" and not outside.exists()
    assert run_tool(_write, {"path": "inside.txt"}).text == "x"  # the scratch folder is the working directory


def test_an_escape_through_the_python_tool_is_a_failed_call_not_a_crash(env, tmp_path):
    """The restricted builtins are walked around (a tuple's base's subclasses reach os); the sandbox holds."""
    target = tmp_path / "escaped.txt"
    code = ("g = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__\n"
            f"g['write'](g['open']({str(target)!r}, g['O_WRONLY'] | g['O_CREAT']), b'x')")
    r = env.step(call("python", code=code))
    assert r.observation[0]["content"].startswith("error: ") and r.info["failed_calls"] == 1 and not target.exists()


def test_the_environment_refuses_an_unknown_sandbox_and_a_tool_the_sandbox_cannot_import():
    with pytest.raises(ValueError, match=r"^environment.options.sandbox = 'docker' is not one of auto, bwrap, landlock, none$"):
        environment_factory("tools")(tools=["calculator"], sandbox="docker")
    with pytest.raises(ValueError, match=r"^environment.options.tools: 'no_such_module_xyz:f': "):
        environment_factory("tools")(tools=["no_such_module_xyz:f"])


def test_parse_calls_reads_several_calls_and_an_unclosed_last_one():
    calls = parse_calls(call("calculator", expression="1+1") + " and " + '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}')
    assert [c["name"] for c in calls] == ["calculator", "python"]


def test_a_tool_episode_carries_the_result_as_unsampled_tool_tokens_and_ends_on_the_answer(monkeypatch):
    """Scripted turns: a calculator call, then the answer. The result enters the trajectory as the
    template's tool message (action mask 0); the episode ends on the turn without a call."""
    import torch

    from grpokit.envs.episodes import EpisodeBackend
    from grpokit.rollout.hf import HFBackend
    from grpokit.rollout.types import SamplingParams
    from grpokit.testing import tiny_model_and_tokenizer

    model, tok = tiny_model_and_tokenizer(seed=0)
    inner = HFBackend(model, tok)
    turns = iter([call("calculator", expression="37 * 46"), "1702"])

    def decode(input_ids, attention, group_size, params):
        ids = tok(next(turns), add_special_tokens=False).input_ids + [tok.eos_token_id]
        b = input_ids.shape[0] * group_size
        return torch.tensor(ids).repeat(b, 1), torch.full((b, len(ids)), -0.1), torch.zeros(b, len(ids))

    monkeypatch.setattr(inner, "decode", decode)
    from grpokit.config.schema import EnvironmentConfig

    cfg = EnvironmentConfig(name="tools", options={"tools": ["calculator"]}, max_turns=4, max_episode_tokens=400,
                            step_timeout_s=10.0, on_error="raise", observation_role="user", kv_cache=False)
    row = {"prompt": "What is 37 * 46?", "answer": "1702"}
    text = tok.apply_chat_template([{"role": "user", "content": row["prompt"]}], tokenize=False, add_generation_prompt=True)
    batch = EpisodeBackend(inner, cfg, None, seed=0).generate([text], [row], 2, SamplingParams(max_new_tokens=80))
    ep = batch.episodes[0]
    assert ep["turns"] == 2 and ep["env_terminated"] and ep["env_tool_calls"] == 1 and ep["env_well_formed"] == 1.0
    assert batch.completions[0] == "1702" and [m["role"] for m in ep["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    n = int(batch.completion_mask[0].sum())
    unsampled = tok.decode([i for i, a in zip(batch.completion_ids[0, :n].tolist(), batch.action_mask[0, :n].tolist()) if not a])
    assert unsampled == "\n<|im_start|>tool\n1702<|im_end|>\n<|im_start|>assistant\n"
    prompt = tok.decode(batch.prompt_ids[0][batch.prompt_mask[0].bool()])
    assert prompt.startswith("<|im_start|>system\nYou can call tools.") and "What is 37 * 46?" in prompt


def test_tool_arithmetic_rows_have_exact_answers_and_name_the_tools_environment():
    import re

    from grpokit.data.tasks import TASKS

    splits = TASKS.get("tool_arithmetic")(0, 30, 10, digits=3)
    prompts = {r["prompt"] for r in splits.train} | {r["prompt"] for r in splits.heldout}
    assert len(prompts) == 40  # no prompt in both splits
    for row in splits.train:
        a, b = map(int, re.findall(r"\d+", row["prompt"])[:2])
        assert row["environment"] == "tools" and int(row["answer"]) in (a * b, a + b, a - b, b * a)
        assert 100 <= max(a, b) <= 999 and "calculator" in row["prompt"]


def test_a_machine_without_isolation_is_refused_at_load_unless_the_config_says_none(monkeypatch):
    from grpokit.envs.sandbox import backends
    from grpokit.envs.tools import tools_problem

    monkeypatch.setattr(backends, "probe", lambda name: None if name == "none" else f"{name} missing here")
    problem = tools_problem({"tools": ["python"]})
    assert problem.startswith("environment.options.sandbox: no sandbox for model-written tool code on this machine "
                              "(bwrap: bwrap missing here; landlock: landlock missing here)")
    assert "sandbox: none" in problem and "\n" not in problem
    assert tools_problem({"tools": ["python"], "sandbox": "bwrap"}).startswith("environment.options.sandbox: sandbox 'bwrap' is unavailable")
    assert tools_problem({"tools": ["python"], "sandbox": "none"}) is None
    assert tools_problem({"tools": ["python"], "sandbox": "docker"}) == (
        "environment.options.sandbox = 'docker' is not one of auto, bwrap, landlock, none")
    # the tool_use preset is refused by the config-load contract, before a model loads
    from grpokit.config import load_config
    from grpokit.trainer.inputs import RunContractError, check_run

    with pytest.raises(RunContractError, match="no sandbox for model-written tool code on this machine"):
        check_run(load_config(preset="tool_use"))
    check_run(load_config(preset="tool_use", overrides=["environment.options.sandbox=none"]))
