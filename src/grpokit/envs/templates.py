"""Token ids that carry an environment's observation into a trajectory, from the chat template.

Token-in/token-out: a trajectory's ids are the ids the policy sampled, plus, after each model
turn, the ids of what the chat template puts between that turn and the next one (the end of the
assistant message, the observation as a user or tool message, the next assistant header). The
sampled ids are never decoded and re-encoded, so what is trained is exactly what was sampled.

The ids between turns come from the template itself: render a two-turn placeholder
conversation with and without the observation message; the observation's text is what the
longer rendering adds, and what the shorter one puts after the assistant's content (the end of
its message) is split at the end-of-turn token the policy samples. A template whose renderings
are not prefixes of each other cannot be carried this way and is refused in one line.
"""

from __future__ import annotations

from typing import Any

from grpokit.envs.base import Message, Observation

_USER, _REPLY = "PLACEHOLDER_USER_7319", "PLACEHOLDER_REPLY_7319"


def observation_messages(observation: Observation, role: str) -> list[Message]:
    """An observation as chat messages: text becomes one ``role`` message; messages pass through."""
    if isinstance(observation, str):
        return [{"role": role, "content": observation}]
    if isinstance(observation, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in observation):
        return list(observation)
    raise TypeError(f"an observation must be text or a list of {{'role', 'content'}} messages, got {type(observation).__name__}")


class TurnTemplate:
    """The chat template's text between a sampled model turn and the next one.

    ``eos_text``: the text of the end-of-turn token the sampler stops at (e.g. ``<|im_end|>``).
    ``between(observation, ended)``: the text after a model turn's last sampled token up to the
    next assistant header, where ``ended`` says the turn's tokens include that end-of-turn token
    (a turn cut by the token cap did not, so the message end is added here, unsampled).
    """

    def __init__(self, tokenizer: Any, eos_text: str, tools: list[dict] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("environment: multi-turn episodes need a tokenizer with a chat template; this model has none")
        self.tokenizer, self.eos_text, self.tools = tokenizer, eos_text, tools
        base = [{"role": "user", "content": _USER}, {"role": "assistant", "content": _REPLY}]
        self._base_text = self._render(base, generation_prompt=False)
        after_reply = self._base_text[self._base_text.rindex(_REPLY) + len(_REPLY):]
        if not after_reply.startswith(eos_text):
            raise ValueError(f"environment: the chat template does not end an assistant message with the end-of-turn "
                             f"token {eos_text!r} the sampler stops at ({after_reply[:40]!r}); use a chat model whose EOS ends its turns")
        self.message_end = after_reply[len(eos_text):]  # e.g. "\n" after <|im_end|>
        self._base = base

    def _render(self, messages: list[Message], generation_prompt: bool) -> str:
        kwargs = {"tools": self.tools} if self.tools else {}
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **kwargs)

    def between(self, observation: list[Message], ended: bool) -> str:
        """Text from after a model turn's last sampled token to the next assistant header (inclusive)."""
        full = self._render(self._base + observation, generation_prompt=True)
        if not full.startswith(self._base_text):
            raise ValueError("environment: the chat template renders earlier turns differently once an observation follows "
                             "them, so observation tokens cannot be appended to sampled ones; use another chat template")
        return ("" if ended else self.eos_text) + self.message_end + full[len(self._base_text):]

    def between_ids(self, observation: list[Message], ended: bool) -> list[int]:
        """:meth:`between` as token ids (special tokens parsed, no BOS added)."""
        return self.tokenizer(self.between(observation, ended), add_special_tokens=False).input_ids
