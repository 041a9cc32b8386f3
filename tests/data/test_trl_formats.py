"""TRL's conversational prompt format in GRPO runs: loading, validation, rendering, and a CLI run."""

import functools
import json
import shutil
import sys
from pathlib import Path

import pytest

from grpokit.data.chat import render_prompt
from grpokit.data.files import DataError, load_rows, split_rows
from grpokit.testing import tiny_tokenizer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SYSTEM = {"role": "system", "content": "Be brief."}
USER = {"role": "user", "content": "What is 2 + 2?"}


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_conversational_rows_keep_their_messages_and_columns(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [
        {"prompt": [SYSTEM, USER], "answer": 4, "topic": "sum"},
        {"prompt": [USER, {"role": "assistant", "content": "2 + 2 ="}], "answer": "4", "topic": "sum"},
    ])
    rows = load_rows(path)
    assert rows[0] == {"prompt": [SYSTEM, USER], "answer": "4", "topic": "sum"}
    assert rows[1]["prompt"][-1] == {"role": "assistant", "content": "2 + 2 ="}


def test_conversational_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"prompt": [SYSTEM, USER], "answer": "4"}]), tmp_path / "d.parquet")
    assert load_rows(str(tmp_path / "d.parquet")) == [{"prompt": [SYSTEM, USER], "answer": "4"}]


@pytest.mark.parametrize(
    "prompt,fragment",
    [
        ([], "row 0, column 'prompt': the conversation is an empty message list"),
        ([{"content": "hi"}], "message 0 has no 'role' (each message is {\"role\": \"user\", \"content\": \"...\"})"),
        ([{"role": "user"}], "message 0 has no 'content'"),
        ([USER, {"role": "robot", "content": "x"}], "message 1 has role 'robot'; use one of system, user, assistant, tool"),
        ([USER, "hello"], "message 1 is a str, not an object like"),
        ([{"role": "user", "content": [{"type": "text"}]}], "message 0 has non-text content (list); content must be a string"),
        ([USER, SYSTEM], "ends with a system message; end it with a user message"),
    ],
)
def test_malformed_conversation_is_one_line_naming_file_row_and_fix(tmp_path, prompt, fragment):
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"prompt": prompt, "answer": "1"}])
    with pytest.raises(DataError) as info:
        load_rows(path)
    message = str(info.value)
    assert fragment in message and message.startswith(f"{path}: row 0") and "\n" not in message


def test_mixed_prompt_formats_are_refused(tmp_path):
    path = _write_jsonl(tmp_path / "mixed.jsonl", [{"prompt": [USER], "answer": "4"}, {"prompt": "What is 1?", "answer": "1"}])
    with pytest.raises(DataError, match=r"row 1 mixes prompt formats .*row 0 is a message list.*use one format"):
        load_rows(path)


def test_split_rows_dedupes_conversations():
    rows = [{"prompt": [USER], "answer": "4"}, {"prompt": [dict(USER)], "answer": "4"}] + [
        {"prompt": [{"role": "user", "content": f"q{i}"}], "answer": str(i)} for i in range(4)
    ]
    splits = split_rows(rows, 0.2, seed=0)
    # 6 rows, 1 duplicate -> 5 distinct; held out round(0.2 * 5) = 1, train 4
    assert len(splits.heldout) == 1 and len(splits.train) == 4


def _trl_render(messages):
    from trl.data_utils import maybe_apply_chat_template

    return maybe_apply_chat_template({"prompt": messages}, tiny_tokenizer())["prompt"]


def test_rendering_matches_trl_maybe_apply_chat_template():
    tok = tiny_tokenizer()
    for messages in ([SYSTEM, USER], [USER], [USER, {"role": "assistant", "content": "2 + 2 ="}]):
        assert render_prompt(tok, messages) == _trl_render(messages)
    # ends with the assistant's text, no end-of-turn and no new assistant header: it is continued
    continued = render_prompt(tok, [USER, {"role": "assistant", "content": "2 + 2 ="}])
    assert continued == "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n2 + 2 ="


def test_system_prompt_only_when_the_conversation_has_none():
    tok = tiny_tokenizer()
    assert render_prompt(tok, [USER], system_prompt="Be brief.") == _trl_render([SYSTEM, USER])
    own = {"role": "system", "content": "Think."}
    assert render_prompt(tok, [own, USER], system_prompt="Be brief.") == _trl_render([own, USER])


def test_conversation_needs_a_chat_template():
    class Base:
        chat_template = None

    with pytest.raises(ValueError, match="conversational prompts .* need a tokenizer with a chat template"):
        render_prompt(Base(), [USER])


def test_prompt_text_is_the_last_user_message():
    from grpokit.data.chat import prompt_text

    assert prompt_text("plain") == "plain"
    assert prompt_text([SYSTEM, USER, {"role": "assistant", "content": "2 + 2 ="}]) == "What is 2 + 2?"
    assert prompt_text([{"role": "assistant", "content": "Hello"}]) == "Hello"


def _recording(fn, name, calls):
    """``fn`` that also appends (name, args, kwargs) of each call to ``calls`` (same signature)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        calls.append((name, args, kwargs))
        return fn(*args, **kwargs)

    return wrapper


def test_trl_conversational_dataset_and_reward_file_train_through_cli(tmp_path, monkeypatch, capsys):
    """README's TRL-format example through `grpokit train`: the rewards get TRL's arguments."""
    from grpokit.cli import main
    from grpokit.rewards.loading import resolve_reward
    from grpokit.testing import save_tiny_model

    tiny = save_tiny_model(tmp_path / "tiny")
    shutil.copytree(EXAMPLES / "trl_format", tmp_path / "examples/trl_format")
    monkeypatch.chdir(tmp_path)
    calls = []
    for name in ("correct_answer", "short_answer"):  # the file's functions, recorded where grpokit will find them
        original = resolve_reward(f"examples/trl_format/rewards.py:{name}")
        monkeypatch.setattr(sys.modules[original.__module__], name, _recording(original, name, calls))
    code = main([
        "train", "examples/trl_format/grpo.yaml", "--set", f"model.name={tiny}",
        "--set", "model.lora.target_modules=[q_proj, v_proj]", "--set", "train.steps=2", "--set", "eval.every=1",
        "--set", "logging.report_to=[]", "--set", "logging.progress=false",
    ])
    assert code == 0
    assert "heldout_accuracy before=" in capsys.readouterr().out.strip().splitlines()[-1]
    tok = tiny_tokenizer()
    prompts = {json.dumps(json.loads(l)["prompt"]) for l in (tmp_path / "examples/trl_format/prompts.jsonl").read_text().splitlines()}
    assert {n for n, _, _ in calls} == {"correct_answer", "short_answer"}
    for name, args, kwargs in calls:
        assert args == ()  # called with keywords, as TRL calls a reward
        assert set(kwargs) >= {"prompts", "completions", "completion_ids", "answer", "topic"}
        assert all(json.dumps(p) in prompts for p in kwargs["prompts"])  # the message lists themselves
        for completion, ids in zip(kwargs["completions"], kwargs["completion_ids"]):
            assert isinstance(completion, list) and len(completion) == 1 and completion[0]["role"] == "assistant"
            assert all(isinstance(t, int) for t in ids) and len(ids) <= 32  # eval.max_new_tokens (rollout: 16)
            assert tok.decode(ids, skip_special_tokens=True) == completion[0]["content"]
    run = tmp_path / "runs/trl_format"
    metrics = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and "reward/correct_answer/mean" in metrics[0] and "reward/short_answer/mean" in metrics[0]
    labels = [json.loads(l)["label"] for l in (run / "eval.jsonl").read_text().splitlines()]
    assert labels == ["before", "during", "after"]  # eval.every=1, 2 steps: the judge is the TRL reward
    assert "### Every evaluation" in (run / "report.md").read_text()


def test_samples_table_prints_a_conversation_as_its_user_text(tmp_path):
    from rich.console import Console

    from grpokit.trainer.metrics import RunLogger

    console = Console(record=True, width=200)
    logger = RunLogger(tmp_path, console=console)
    sample = {"prompt": [SYSTEM, USER], "completion": "4", "rewards": {"r": 1.0}, "advantage": 0.5}
    logger.log_samples(1, [sample])
    logger.print_samples_table(1, [sample], ["r"])
    assert "What is 2 + 2?" in console.export_text() and "Be brief." not in console.export_text()
    assert json.loads((tmp_path / "samples.jsonl").read_text())["prompt"] == [SYSTEM, USER]  # the messages themselves
