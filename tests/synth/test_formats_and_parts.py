"""The stage files load through grpokit's own loaders; context assembly and the writer client, by hand."""

import json
import random

from grpokit.synth.context import assemble, count_tokens
from grpokit.synth.documents import World


def test_stage_files_load_in_the_formats_the_stages_read(run_synth):
    from grpokit.config.schema import DataConfig
    from grpokit.data.files import load_rows
    from grpokit.data.offline import load_offline_splits
    from grpokit.rewards import REWARDS

    _, out = run_synth("grounded", n=3)
    for stage in ("sft", "dpo"):
        cfg = DataConfig(task=None, path=str(out / f"{stage}.jsonl"), heldout_path=str(out / f"{stage}.jsonl"))
        splits = load_offline_splits(cfg, stage)
        assert len(splits.train) == 3 and all(isinstance(r["prompt"], list) and r["answer"] for r in splits.train)
    rows = load_rows(str(out / "grpo.jsonl"))
    dpo = [json.loads(x) for x in (out / "dpo.jsonl").read_text().splitlines()]
    fn = REWARDS.get("synth_verify")
    prompts, verifiers = [r["prompt"] for r in rows], [r["verifier"] for r in rows]
    assert fn(prompts, [d["chosen"] for d in dpo], verifier=verifiers) == [1.0, 1.0, 1.0]
    assert fn(prompts, [d["rejected"] for d in dpo], verifier=verifiers) == [0.0, 0.0, 0.0]
    assert all(r["metadata"]["paradigm"] == "grounded" for r in rows)


def test_assembly_offsets_with_a_character_tokenizer():
    """The tiny tokenizer has one token per character, so token offsets must equal character offsets."""
    from grpokit.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    world = World(random.Random(0))
    a, b = world.document("person"), world.document("org")
    ctx = assemble([a, b], [0.0, 0.99], world.distractors(), tok, target_tokens=2000)
    assert ctx.n_tokens == len(ctx.text) == count_tokens(tok, ctx.text)
    assert 2000 <= ctx.n_tokens < 2000 + max(len(s) + 1 for s in ctx.segments[-1].document.sentences)
    assert ctx.segments[0].document is a and ctx.segments[-2].document is b and ctx.segments[-1].role == "distractor"
    for seg in ctx.segments:
        assert (seg.token_start, seg.token_end) == (seg.char_start, seg.char_end)
        assert ctx.text[seg.char_start:seg.char_end] == seg.text()
    span = ctx.evidence(b, b.fact("founder"))
    assert ctx.text[span["start"]:span["end"]] == b.fact("founder").sentence
    assert (span["token_start"], span["token_end"]) == (span["start"], span["end"]) and span["segment"] == ctx.segments[-2].id


def test_hf_writer_is_seeded(tmp_path):
    from grpokit.synth.writer import HFWriter, WriterParams, make_writer, rewrite_messages
    from grpokit.testing import save_tiny_model

    writer = HFWriter(save_tiny_model(tmp_path / "tiny"))
    msgs = rewrite_messages("Rewrite.", "Kelmar lies in Venland.")
    first = writer(msgs, WriterParams(max_new_tokens=12, temperature=1.0, seed=5))
    assert first == writer(msgs, WriterParams(max_new_tokens=12, temperature=1.0, seed=5))
    assert first != writer(msgs, WriterParams(max_new_tokens=12, temperature=1.0, seed=6))
    assert make_writer("none") is None and writer.max_context == writer.model.config.max_position_embeddings
