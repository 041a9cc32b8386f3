"""INTELLECT-2 length control: the prompt states the row's sampled target, the reward reads the same target."""

import pytest
import torch

from grpokit.config import load_config
from grpokit.data.chat import RawPrompt
from grpokit.data.length_control import apply_length_targets, state_target
from grpokit.rewards import score_completions
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer import setup


def test_state_target_in_each_prompt_form():
    assert state_target("2+3=?", 16) == "2+3=? Think for 16 tokens before giving a response."  # prime-rl's wording
    raw = state_target(RawPrompt("Q: 1+1"), 8)
    assert isinstance(raw, RawPrompt) and raw == "Q: 1+1 Think for 8 tokens before giving a response."
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "?"}, {"role": "user", "content": "1+1"}]
    assert state_target(conv, 8)[-1]["content"] == "1+1 Think for 8 tokens before giving a response."
    assert conv[-1]["content"] == "1+1"  # the row's own prompt is not modified in place


def test_preset_rows_carry_their_target_in_prompt_and_column():
    cfg = load_config(preset="intellect2", overrides=["data.n_train=12", "data.n_heldout=4"])
    assert cfg.data.length_targets == [8, 16, 32]
    plain = setup.source_splits(cfg.data)
    splits = setup.build_splits(cfg.data)
    assert setup.build_splits(cfg.data) == splits  # the draw is seeded: a learner and its workers agree
    for before, row in zip(plain.train + plain.heldout, splits.train + splits.heldout):
        t = row["target_length"]
        assert t in (8, 16, 32)
        assert row["prompt"] == f"{before['prompt']} Think for {t} tokens before giving a response."
    assert len({r["target_length"] for r in splits.train}) > 1  # not one target for all rows
    with pytest.raises(ValueError, match="data.length_targets"):
        apply_length_targets(plain, [8, 0], seed=0)


def test_reward_reads_the_target_stated_in_the_prompt():
    model, tok = tiny_model_and_tokenizer(seed=0)
    cfg = load_config(preset="intellect2", overrides=["data.n_train=6", "data.n_heldout=2"])
    rows = setup.build_splits(cfg.data).train[:2]
    texts = setup.render_all(tok, rows, None)
    for row, text in zip(rows, texts):
        assert f"Think for {row['target_length']} tokens" in text  # the rendered model input states it
    torch.manual_seed(0)
    batch = HFBackend(model, tok).generate(texts, rows, 2, SamplingParams(max_new_tokens=12))
    rewards = setup.build_rewards([r for r in cfg.rewards if r.name == "length_target"])  # coef 1e-2, unit tokens
    cols = batch.columns()
    scores = score_completions(rewards, batch.prompts, batch.completions, cols, completion_ids=cols["completion_ids"])
    got = scores.per_reward["length_target"].tolist()
    for i, ids in enumerate(cols["completion_ids"]):
        target = rows[i // 2]["target_length"]  # row i // 2's group
        assert cols["target_length"][i] == target
        assert got[i] == pytest.approx(-1e-2 * abs(target - len(ids)))  # e.g. target 16, 12 tokens: -0.04
