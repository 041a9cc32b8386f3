"""Turn a prompt into the text a model is prompted with, and conversational prompts into text.

A prompt is either a string (the user message; ``data.system_prompt`` goes before it) or, as in
TRL's "conversational" dataset format, a list of ``{"role", "content"}`` messages. Conversations
are rendered like TRL's ``maybe_apply_chat_template``: a conversation that ends with a user (or
tool) message gets the generation prompt; one that ends with an assistant message is continued
(``continue_final_message``), so the model completes that message.
"""

from __future__ import annotations

from typing import Any, Union

Message = dict[str, Any]
Prompt = Union[str, list[Message]]
ROLES = ("system", "user", "assistant", "tool")
MESSAGE_FORM = '{"role": "user", "content": "..."}'


class RawPrompt(str):
    """A string prompt that is the model's input as it is, without the chat template.

    TRL's standard (non-conversational) format: ``{"prompt": "...TL;DR:"}`` is tokenized as
    written, only conversations go through the chat template (TRL's ``maybe_apply_chat_template``,
    https://huggingface.co/docs/trl/dataset_formats). grpokit renders a plain string as a user
    message instead; ``GRPOTrainer`` wraps TRL's string prompts in ``RawPrompt`` so that they keep
    TRL's meaning. It is a ``str`` everywhere else (rewards, logs, JSON).
    """


def is_visual(row: dict) -> bool:
    """The row conditions on images or a video (its ``images`` / ``video`` column)."""
    return bool(row.get("images")) or row.get("video") is not None


def is_conversation(prompt: Any) -> bool:
    """True for a conversational prompt (a list of messages), as TRL's ``is_conversational``."""
    return isinstance(prompt, list)


def message_problem(messages: Any) -> str | None:
    """Why ``messages`` is not a usable conversation, or None when it is.

    Each message must be a mapping with a ``role`` in :data:`ROLES` and a string ``content``;
    the last one must not be a system message (there is nothing to answer; TRL refuses it too).
    """
    if not isinstance(messages, list) or not messages:
        return "is an empty message list"
    for j, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"message {j} is a {type(message).__name__}, not an object like {MESSAGE_FORM}"
        missing = [k for k in ("role", "content") if k not in message]
        if missing:
            return f"message {j} has no '{missing[0]}' (each message is {MESSAGE_FORM})"
        if message["role"] not in ROLES:
            return f"message {j} has role {message['role']!r}; use one of {', '.join(ROLES)}"
        if not isinstance(message["content"], str):
            return f"message {j} has non-text content ({type(message['content']).__name__}); content must be a string"
    if messages[-1]["role"] == "system":
        return "ends with a system message; end it with a user message (or an assistant message to continue)"
    return None


def prompt_text(prompt: Prompt) -> str:
    """The plain text of a prompt for text-reading rewards: a string as is, else the last user message.

    A conversation without a user message gives its last message's content [grpokit's choice;
    TRL has no text view of a conversation].
    """
    if not is_conversation(prompt):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user"]
    return users[-1] if users else prompt[-1]["content"]


def render_prompt(tokenizer: Any, prompt: Prompt, system_prompt: str | None = None) -> str:
    """Prompt string for ``prompt``: the tokenizer's chat template, or plain text without one.

    A :class:`RawPrompt`: the text itself (after ``"{system_prompt}\\n\\n"`` when one is set).
    String prompt, with a chat template: ``apply_chat_template(messages, tokenize=False,
    add_generation_prompt=True)`` on [system?, user]. Some templates (e.g. SmolLM2) add their
    own default system prompt when none is given. Without one (base models):
    ``"{system_prompt}\\n\\n{user_text}\\n"``, or ``"{user_text}\\n"`` when there is no system
    prompt.

    Conversation: ``system_prompt`` is put first unless the conversation has its own system
    message; a last assistant message is continued (no generation prompt), any other last role
    gets the generation prompt, as TRL's ``maybe_apply_chat_template``. It needs a chat template.
    """
    if is_conversation(prompt):
        return _render_conversation(tokenizer, prompt, system_prompt)
    if isinstance(prompt, RawPrompt):  # TRL's standard format: the text as written
        return f"{system_prompt}\n\n{prompt}" if system_prompt is not None else str(prompt)
    if getattr(tokenizer, "chat_template", None):
        messages = []
        if system_prompt is not None:
            messages.append({"role": "system", "content": system_prompt})
        messages.append({"role": "user", "content": prompt})
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
    if system_prompt is not None:
        return f"{system_prompt}\n\n{prompt}\n"
    return f"{prompt}\n"


def _render_conversation(tokenizer: Any, messages: list[Message], system_prompt: str | None) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "data: conversational prompts (message lists) need a tokenizer with a chat template; "
            "this model's has none: use an instruct model or plain-string prompts"
        )
    if system_prompt is not None and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    if messages[-1]["role"] == "assistant":
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=False, continue_final_message=True
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
