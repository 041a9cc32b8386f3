"""Expert demonstrations as multi-turn SFT rows: replay a task's expert turns in its environment.

ActiveVLN's first stage (Zhang et al., arXiv 2509.12618, §IV): imitation on a small set of expert
trajectories, the loss on the action tokens only. A task whose rows carry ``expert_turns`` (and
name their ``environment``) becomes SFT rows in TRL's prompt-completion format: ``prompt`` is the
row's prompt, ``completion`` the conversation of expert turns (assistant messages) and the
environment's observations between them (user / tool messages); a turn whose
``expert_weights`` entry is 0 (a noise turn the expert did not choose) becomes an assistant
message with ``"weight": 0``. The offline SFT stage trains only the assistant messages' tokens,
those of weight 0 excepted (:func:`grpokit.data.offline._conversation_ids`), so the
learner sees the same token layout as a multi-turn episode.
"""

from __future__ import annotations

from typing import Any

from grpokit.envs.base import StepResult, environment_factory, reset_result
from grpokit.envs.templates import observation_messages


def expert_conversation(env: Any, row: dict[str, Any], observation_role: str = "user") -> tuple[Any, list[dict[str, str]]]:
    """(the episode's prompt, the expert's turns of ``row`` with the environment's observations between them).

    The prompt is the row's prompt when ``reset`` returns '' (the row's prompt is the first
    observation), else the messages ``reset`` returned (e.g. the tools environment's system
    message with the tool schemas, then the question), as a multi-turn episode starts.
    """
    first, _ = reset_result(env.reset(row, 0))
    if first and not isinstance(first, list):
        raise ValueError("imitation rows need environments whose first observation is the row's prompt (reset returns '') "
                         "or a list of chat messages")
    prompt = first if first else row["prompt"]
    messages: list[dict[str, Any]] = []
    weights = row.get("expert_weights") or [1] * len(row["expert_turns"])
    for turn, weight in zip(row["expert_turns"], weights):
        messages.append({"role": "assistant", "content": turn} if weight else {"role": "assistant", "content": turn, "weight": 0})
        result = StepResult.of(env.step(turn))
        if result.terminated or result.truncated:
            break
        messages += observation_messages(result.observation, observation_role)
    return prompt, messages


def imitation_rows(rows: list[dict[str, Any]], env_name: str | None, options: dict[str, Any], observation_role: str = "user") -> list[dict]:
    """SFT rows ``{prompt, completion: [messages]}`` of every row's expert episode (other columns kept, ``answer`` dropped)."""
    out = []
    for i, row in enumerate(rows):
        if not row.get("expert_turns"):
            raise ValueError(f"imitation: row {i} of the task has no 'expert_turns' column; the task has no expert to imitate")
        name = row.get("environment") or env_name
        if not name:
            raise ValueError("imitation: the rows name no environment and environment.name is null: set environment.name")
        env = environment_factory(name)(**options)
        kept = {k: v for k, v in row.items() if k not in ("answer", "completion")}
        prompt, completion = expert_conversation(env, row, observation_role)
        out.append({**kept, "prompt": prompt, "completion": completion})
    return out
