"""Tests for grpokit.data.chat.render_prompt."""

from grpokit.data.chat import render_prompt


class TemplateTokenizer:
    """Stand-in for a tokenizer with a chat template; records the call it receives."""

    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        self.call = (messages, tokenize, add_generation_prompt)
        body = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
        return body + "<assistant>"


class BaseTokenizer:
    chat_template = None


def test_chat_template_with_system_prompt():
    tok = TemplateTokenizer()
    out = render_prompt(tok, "What is 2 + 2?", system_prompt="Be brief.")
    assert out == "<system>Be brief.</system><user>What is 2 + 2?</user><assistant>"
    assert tok.call[1] is False and tok.call[2] is True


def test_chat_template_without_system_prompt():
    tok = TemplateTokenizer()
    out = render_prompt(tok, "hi")
    assert out == "<user>hi</user><assistant>"


def test_plain_text_without_chat_template():
    assert render_prompt(BaseTokenizer(), "hi", system_prompt="sys") == "sys\n\nhi\n"
    assert render_prompt(BaseTokenizer(), "hi") == "hi\n"
    assert render_prompt(object(), "hi") == "hi\n"  # no chat_template attribute at all
