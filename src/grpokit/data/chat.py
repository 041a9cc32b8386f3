"""Turn a user message (and optional system prompt) into the text a model is prompted with."""

from __future__ import annotations

from typing import Any


def render_prompt(tokenizer: Any, user_text: str, system_prompt: str | None = None) -> str:
    """Prompt string for ``user_text``: the tokenizer's chat template, or plain text without one.

    With a chat template: ``apply_chat_template(messages, tokenize=False,
    add_generation_prompt=True)`` on [system?, user]. Some templates (e.g. SmolLM2) add their
    own default system prompt when none is given. Without one (base models):
    ``"{system_prompt}\\n\\n{user_text}\\n"``, or ``"{user_text}\\n"`` when there is no system
    prompt.
    """
    if getattr(tokenizer, "chat_template", None):
        messages = []
        if system_prompt is not None:
            messages.append({"role": "system", "content": system_prompt})
        messages.append({"role": "user", "content": user_text})
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
    if system_prompt is not None:
        return f"{system_prompt}\n\n{user_text}\n"
    return f"{user_text}\n"
