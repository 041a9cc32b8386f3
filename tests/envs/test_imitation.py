"""ActiveVLN's imitation stage: expert episodes replayed as conversations, trained on their action tokens."""

import pytest

from grpokit.config import load_config
from grpokit.data.offline import DataError, load_offline_splits
from grpokit.data.tasks import TASKS
from grpokit.envs.imitation import imitation_rows
from grpokit.testing import tiny_model_and_tokenizer


def test_expert_episodes_become_conversations_of_turns_and_observations():
    rows = TASKS.get("text_navigation")(0, 6, 2).train
    out = imitation_rows(rows, None, {})
    for row, sft in zip(rows, out):
        roles = [m["role"] for m in sft["completion"]]
        assert roles == ["assistant", "user"] * (len(row["expert_turns"]) - 1) + ["assistant"]
        assert [m["content"] for m in sft["completion"] if m["role"] == "assistant"] == row["expert_turns"]
        assert [m.get("weight", 1) for m in sft["completion"] if m["role"] == "assistant"] == row["expert_weights"]
        assert all("You face" in m["content"] for m in sft["completion"] if m["role"] == "user")
        assert sft["prompt"] == row["prompt"] and "answer" not in sft


def test_expert_tool_episodes_start_from_the_environments_messages_and_read_the_real_result():
    rows = TASKS.get("tool_arithmetic")(0, 4, 1).train
    out = imitation_rows(rows, None, {"tools": ["calculator"]})
    for row, sft in zip(rows, out):
        assert [m["role"] for m in sft["prompt"]] == ["system", "user"]  # the tool schemas, then the question
        assert '"calculator"' in sft["prompt"][0]["content"] and sft["prompt"][1]["content"] == row["prompt"]
        call, result, answer = sft["completion"]
        assert call["role"] == "assistant" and call["content"].startswith("<tool_call>")
        assert result == {"role": "tool", "content": row["answer"]}  # the calculator ran in its sandbox
        assert answer == {"role": "assistant", "content": row["answer"]}


def test_sft_on_a_task_without_experts_is_refused_in_one_line():
    cfg = load_config(overrides=["stage=sft", "data.task=arithmetic", "data.path=null"])
    with pytest.raises(DataError) as err:
        load_offline_splits(cfg.data, "sft", cfg.environment)
    assert "no expert turns" in str(err.value) and "\n" not in str(err.value)


def test_the_activevln_sft_preset_trains_the_tiny_model_on_action_tokens_only(tmp_path):
    from grpokit.trainer.offline import OfflineTrainer

    cfg = load_config(preset="activevln_sft", overrides=[
        f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "data.n_train=6", "data.n_heldout=2",
        "train.steps=2", "offline.batch_size=2", "train.micro_batch_size=2", "eval.before=false", "eval.after=false",
    ])
    model, tok = tiny_model_and_tokenizer(seed=0)
    trainer = OfflineTrainer(cfg, model, tok)
    examples = trainer.sampler.next_batch(2)
    assert all(e.loss_masks and 0 < sum(e.loss_masks[0]) < len(e.completions[0]) for e in examples)
    metrics = trainer.train_step()
    assert metrics["loss"] == metrics["loss"] and metrics["loss"] > 0
