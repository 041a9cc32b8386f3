"""Multi-turn SFT rows: a conversation completion trains its assistant tokens only (ActiveVLN's imitation stage)."""

import torch

from grpokit.data.offline import encode
from grpokit.envs.templates import TurnTemplate
from grpokit.testing import tiny_model_and_tokenizer

ROW = {"prompt": "Go to the box.", "completion": [
    {"role": "assistant", "content": "forward, forward"},
    {"role": "user", "content": "You see a box (1 ahead)."},
    {"role": "assistant", "content": "stop"},
]}


def encoded(tok, row=ROW):
    return encode(tok, [row], "sft", system_prompt=None, eos_id=tok.eos_token_id, max_prompt_tokens=512, max_completion_tokens=512)[0]


def test_a_conversation_completion_trains_only_the_assistant_turns_through_their_end_token():
    _, tok = tiny_model_and_tokenizer()
    ex = encoded(tok)
    ids, mask = ex.completions[0], ex.loss_masks[0]
    assert len(ids) == len(mask)
    trained = tok.decode([i for i, m in zip(ids, mask) if m])
    assert trained == "forward, forward<|im_end|>stop<|im_end|>"
    masked = tok.decode([i for i, m in zip(ids, mask) if not m])
    assert masked == "\n<|im_start|>user\nYou see a box (1 ahead).<|im_end|>\n<|im_start|>assistant\n\n"
    # the tokens between the turns are exactly what a multi-turn episode appends after a sampled turn
    between = TurnTemplate(tok, "<|im_end|>").between_ids([ROW["completion"][1]], ended=True)
    first_end = ids.index(tok.eos_token_id) + 1
    assert ids[first_end : first_end + len(between)] == between


def test_an_assistant_message_of_weight_0_is_context_not_a_target():
    _, tok = tiny_model_and_tokenizer()
    noisy = {**ROW, "completion": [{**ROW["completion"][0], "weight": 0}, *ROW["completion"][1:]]}
    ex, clean = encoded(tok, noisy), encoded(tok)
    assert ex.completions[0] == clean.completions[0]  # the same tokens ...
    trained = tok.decode([i for i, m in zip(ex.completions[0], ex.loss_masks[0]) if m])
    assert trained == "stop<|im_end|>"  # ... but the noise turn "forward, forward" is not imitated


def test_a_single_assistant_message_and_a_string_completion_train_every_token():
    _, tok = tiny_model_and_tokenizer()
    assert encoded(tok, {"prompt": "hi", "completion": "hello"}).loss_masks == []
    assert encoded(tok, {"prompt": "hi", "completion": [{"role": "assistant", "content": "hello"}]}).loss_masks == []


def test_the_sft_loss_ignores_observation_tokens(tmp_path):
    """Changing the user message's tokens changes nothing the loss sees except through attention:
    the loss is the mean NLL over the assistant tokens only (the token count says so)."""
    from grpokit.config import load_config
    from grpokit.trainer.offline import OfflineTrainer

    import json

    path = tmp_path / "sft.jsonl"
    path.write_text("\n".join(json.dumps({**ROW, "prompt": f"Go to box {i}."}) for i in range(6)))
    cfg = load_config(overrides=[
        "stage=sft", f"data.path={path}", "data.task=null", "data.heldout_fraction=0.2", f"logging.output_dir={tmp_path / 'run'}",
        "logging.progress=false", "offline.batch_size=2", "train.steps=1", "train.micro_batch_size=2",
        "eval.before=false", "eval.after=false",
    ])
    model, tok = tiny_model_and_tokenizer()
    trainer = OfflineTrainer(cfg, model, tok)
    ex = encoded(tok)
    batch = trainer._batch([ex, ex])
    assert batch.action_mask is not None and int(batch.unit_mask[0].sum()) == sum(ex.loss_masks[0])
    assert int(batch.completion_mask[0].sum()) == len(ex.completions[0])
    metrics = trainer.objective([ex, ex], learn=False)
    assert metrics["tokens"] == 2 * sum(ex.loss_masks[0]) and torch.isfinite(torch.tensor(metrics["loss"]))
