"""An OpenEnv server started on localhost by the test: the adapter's episodes, then training end to end."""

import socket
import threading
import time

import pytest
import torch

pytest.importorskip("openenv")  # in the dev extra: present wherever `make test` installed
uvicorn = pytest.importorskip("uvicorn")

from openenv.core.env_server import create_fastapi_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402

from grpokit.config import load_config  # noqa: E402
from grpokit.envs.base import environment_factory  # noqa: E402
from grpokit.testing import tiny_model_and_tokenizer  # noqa: E402


class SayAction(Action):
    message: str


class TextObservation(Observation):
    text: str = ""
    vowels: int = 0


class CountVowels(Environment):
    """Each turn earns the number of vowels said; the episode is done after 2 turns."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State(episode_id="e", step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._state = State(episode_id=episode_id or "e", step_count=0)
        about = f" about {kwargs['prompt']}" if "prompt" in kwargs else ""  # a row column passed by reset_from_row
        return TextObservation(text=f"Say something (seed {seed}){about}.", reward=0.0, done=False)

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        vowels = sum(action.message.count(v) for v in "aeiou")
        return TextObservation(text=f"turn {self._state.step_count}", reward=float(vowels),
                               done=self._state.step_count >= 2, vowels=vowels)

    @property
    def state(self):
        return self._state


@pytest.fixture(scope="module")
def server():
    app = create_fastapi_app(CountVowels, SayAction, TextObservation, max_concurrent_envs=64)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(5)


def test_the_adapter_runs_an_episode_on_the_server(server):
    env = environment_factory("openenv")(base_url=server, action_key="message", observation_key="text")
    assert env.reset({"prompt": "x"}, seed=7) == "Say something (seed 7)."
    first = env.step("banana")
    assert (first.observation, first.reward, first.terminated, first.info) == ("turn 1", 3.0, False, {"vowels": 3})
    last = env.step("queue")
    assert last.terminated and last.reward == 4.0 and env.client is None  # the session closes with the episode


def test_every_option_of_the_adapter_acts(server):
    make = environment_factory("openenv")
    env = make(base_url=server, reset_from_row=["prompt"], message_timeout_s=7.0)
    assert env.reset({"prompt": "cats", "answer": "1"}, seed=2) == "Say something (seed 2) about cats."  # the row's column
    assert env.client._message_timeout == 7.0  # OpenEnv's client waits this long for each reply
    env.close()
    env = make(base_url=server, observation_key="vowels")
    assert env.reset({"prompt": "x"}, seed=1) == "0"  # the text comes from that field
    assert env.step("aa").info == {"text": "turn 1"}  # the other fields, whatever their type, are info
    env.close()
    env = make(base_url=server, observation_key="speech")
    with pytest.raises(KeyError, match="set environment.options.observation_key"):
        env.reset({"prompt": "x"})
    env.close()
    env = make(base_url=server, action_key="words")  # SayAction has no 'words' field: the server refuses the action
    env.reset({"prompt": "x"})
    with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
        env.step("aa")
    env.close()


def test_an_openenv_environment_trains_end_to_end_on_the_tiny_model(server, tmp_path):
    from grpokit.trainer.loop import Trainer

    cfg = load_config(overrides=[
        f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0",
        "data.task=arithmetic", "data.n_train=8", "data.n_heldout=2",
        "environment.name=openenv", f"environment.options={{base_url: '{server}', action_key: message, observation_key: text}}",
        "environment.max_episode_tokens=100", "environment.step_timeout_s=30", "environment.on_error=raise",
        "rewards=[{name: env_return}]", "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=6",
        "train.micro_batch_size=4", "train.steps=2", "eval.before=false", "eval.after=false",
    ])
    model, tok = tiny_model_and_tokenizer(seed=0)
    torch.manual_seed(0)
    trainer = Trainer(cfg, model, tok)
    batch, scores, _ = trainer._collect()
    assert all(ep["turns"] == 2 and ep["env_terminated"] for ep in batch.episodes)
    said = [[m["content"] for m in ep["messages"] if m["role"] == "assistant"] for ep in batch.episodes]
    expected = [float(sum(t.count(v) for t in turns for v in "aeiou")) for turns in said]
    assert scores.per_reward["env_return"].tolist() == expected  # the server scored this row's own turns
    assert "Say something (seed" in tok.decode(batch.prompt_ids[0][batch.prompt_mask[0].bool()])
    metrics = trainer.train_step()
    assert metrics["env/turns"] == 2 and "env/vowels" in metrics
