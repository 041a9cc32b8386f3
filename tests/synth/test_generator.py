"""grpokit synth end to end: lengths, offsets, determinism, resume, rejection counting, stage files."""

import json

import pytest

from grpokit.synth import Generator, SynthConfig, SynthError
from grpokit.synth.context import count_tokens
from grpokit.synth.paradigms import PARADIGMS
from grpokit.synth.validators import validate_record
from grpokit.synth.verify import check


def _records(out):
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("paradigm", list(PARADIGMS))
def test_each_paradigm_at_4096_tokens(run_synth, smol_tok, paradigm):
    manifest, out = run_synth(paradigm, n=len(PARADIGMS[paradigm]), target_tokens=4096)
    records = _records(out)
    assert manifest["accepted"] == len(records) == len(PARADIGMS[paradigm]) and manifest["rejected"] == 0
    assert {r["template_id"] for r in records} == set(PARADIGMS[paradigm])  # every template once
    for r in records:
        meta = r["metadata"]
        n = count_tokens(smol_tok, r["context"])
        assert meta["context_tokens"] == n and 4096 <= n < 4096 + 40  # at least the target, less than one sentence over
        for span in r["evidence_spans"]:
            assert r["context"][span["start"]:span["end"]] == span["text"]
            assert count_tokens(smol_tok, r["context"][:span["start"]]) in (span["token_start"], span["token_start"] + 1)
        for seg in meta["segment_offsets"]:
            assert r["context"][seg["char_start"]:seg["char_end"]].startswith(f"[{seg['id']}] About {seg['subject']}:")
        assert check(r["verifier"], r["response"], r["context"]) == []  # chosen passes
        assert check(r["verifier"], r["rejected"], r["context"]) != []  # rejected fails
        assert meta["validation"]["passed"] and validate_record(r, smol_tok) == []
        assert {"paradigm", "template_id", "generator_model", "seed", "difficulty", "evidence_positions"} <= set(meta)
    if paradigm == "multi_hop":
        for r in records:
            spans = sorted(r["evidence_spans"], key=lambda s: s["token_start"])
            assert len({s["segment"] for s in spans}) >= 2
            assert all(b["token_start"] - a["token_end"] >= 256 for a, b in zip(spans, spans[1:]))


def test_same_seed_same_bytes_other_seed_other_bytes(run_synth):
    _, a = run_synth("multi_hop", "a", seed=3)
    _, b = run_synth("multi_hop", "b", seed=3)
    _, c = run_synth("multi_hop", "c", seed=4)
    for name in ("records.jsonl", "sft.jsonl", "dpo.jsonl", "grpo.jsonl"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
        assert (a / name).read_bytes() != (c / name).read_bytes()


def test_resume_after_a_partial_run_and_a_cut_line_gives_the_same_files(run_synth):
    _, whole = run_synth("verifiable", "whole", n=3)
    _, part = run_synth("verifiable", "part", n=1)
    with (part / "records.jsonl").open("a") as f:
        f.write('{"id": "verifiable-0-1", "cut')  # a crash in the middle of writing item 1
    run_synth("verifiable", "part", n=3)
    for name in ("records.jsonl", "rejected.jsonl", "sft.jsonl", "dpo.jsonl", "grpo.jsonl"):
        assert (part / name).read_bytes() == (whole / name).read_bytes()
    with pytest.raises(SynthError, match="holds a synth run with other settings"):
        run_synth("verifiable", "part", n=3, seed=9)


def test_writer_rewrites_are_seeded_per_item_and_used(run_synth, fakes):
    parrot = fakes.Parrot()
    manifest, out = run_synth("dialogue", writer=parrot, n=2, n_turns=2)
    records = _records(out)
    assert manifest["accepted"] == 2 and len(parrot.seeds) == 4 == len(set(parrot.seeds))  # one seed per (item, turn)
    assert all(r["metadata"]["generator_model"] == "parrot" for r in records)
    again = fakes.Parrot()
    run_synth("dialogue", "again", writer=again, n=2, n_turns=2)
    assert again.seeds == parrot.seeds


def test_unparsable_and_invalid_writer_output_is_counted_and_the_run_goes_on(run_synth, fakes):
    draft_of = fakes.draft_of
    calls = []

    def flaky(messages, params):
        calls.append(1)
        k = len(calls)
        if k % 3 == 1:
            return "<|im_end|>"  # nothing left after the special token: unparsable
        if k % 3 == 2:
            return draft_of(messages).replace("Answer:", "Result:")  # no Answer: line: unparsable
        return draft_of(messages).rsplit("Answer:", 1)[0] + "Answer: somewhere else"  # parses, wrong answer: invalid

    manifest, out = run_synth("multi_hop", writer=flaky, n=1, max_attempts=3)
    assert manifest["accepted"] == 0 and manifest["status"] == "incomplete"
    assert manifest["rejected_by_reason"] == {"unparsable": 2, "invalid: turns": 1}
    rejected = [json.loads(x) for x in (out / "rejected.jsonl").read_text().splitlines()]
    assert [r["item"] for r in rejected] == [0, 1, 2]
    assert (out / "sft.jsonl").read_text() == ""  # written, empty: never half a file


def _valid_record(run_synth, paradigm="multi_hop"):
    _, out = run_synth(paradigm, "valid-" + paradigm, n=1)
    return _records(out)[0]


@pytest.mark.parametrize("corrupt,expected", [
    (lambda r: r["evidence_spans"][0].update(start=r["evidence_spans"][0]["start"] + 1), "evidence: evidence span"),
    (lambda r: r["metadata"].update(context_tokens=r["metadata"]["context_tokens"] + 1), "context: context_tokens"),
    (lambda r: r["metadata"]["segment_offsets"][1].update(char_start=r["metadata"]["segment_offsets"][1]["char_start"] + 2), "context: segment S1"),
    (lambda r: r.update(rejected=r["response"]), "preference: rejected passes"),
    (lambda r: r.update(response=r["rejected"]), "conversation: the last assistant turn"),
    (lambda r: r["messages"][-1].update(content=r["rejected"]) or r.update(response=r["rejected"]), "turns: turn 0"),
    (lambda r: r["metadata"].update(min_gap_tokens=10**6), "separation: evidence"),
    (lambda r: r["verifier"].pop("answer"), "verifier 'answer' lacks"),
    (lambda r: r.update(template_id="riddle"), "unknown paradigm/template"),
    (lambda r: r["messages"].reverse(), "conversation: turns do not alternate"),
])
def test_corrupted_records_are_rejected(run_synth, smol_tok, corrupt, expected):
    record = _valid_record(run_synth)
    assert validate_record(record, smol_tok) == []
    corrupt(record)
    problems = validate_record(record, smol_tok)
    assert problems and expected in problems[0], problems


def test_evidence_outside_a_source_segment_is_rejected(run_synth, smol_tok):
    record = _valid_record(run_synth, "grounded")
    seg = next(s for s in record["metadata"]["segment_offsets"] if s["role"] == "distractor")
    text = record["context"][seg["char_start"]:seg["char_start"] + 20]
    record["evidence_spans"][0].update(segment=seg["id"], start=seg["char_start"], end=seg["char_start"] + 20, text=text)
    assert "is not inside source segment" in validate_record(record, smol_tok)[0]


def test_bad_inputs_are_one_line_errors(smol_tok, tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path / "empty-cache"))  # a fresh machine: no dequantised model

    def make(**kw):
        return Generator(SynthConfig(out=str(tmp_path), writer="none", **{"paradigm": "multi_hop", **kw}), None, smol_tok)

    with pytest.raises(SynthError, match="unknown paradigm 'poetry'; choose one of: dialogue, grounded, verifiable, multi_hop"):
        make(paradigm="poetry")
    with pytest.raises(SynthError, match="unknown template 'riddle' of paradigm 'multi_hop'; choose from: bridge, chain, compare"):
        make(templates=["riddle"])
    # SmolLM2's GGUF states llama.context_length = 8192 (the tokenizer says 1e30): 8192 - 512 (question and response) = 7680 at most
    with pytest.raises(SynthError, match=r"--target-tokens 8000: .* exceeds the 8192-token context of tokenizer .*use --target-tokens <= 7680"):
        make(target_tokens=8000)
    with pytest.raises(SynthError, match="--min-gap-tokens 400: .* use at most 341"):
        make(target_tokens=1024, min_gap_tokens=400)

    class Short:
        name, max_context = "short-writer", 2048

    with pytest.raises(SynthError, match="exceeds the 2048-token context of writer 'short-writer'"):
        Generator(SynthConfig(paradigm="grounded", out=str(tmp_path), target_tokens=4096), Short(), smol_tok)


def test_cli_errors_are_one_line(capsys, tmp_path, monkeypatch):
    from grpokit.cli import main

    assert main(["synth", "--paradigm", "poetry", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("grpokit: error: unknown paradigm 'poetry'") and "\n" not in err
    # a first run on a fresh machine (empty model cache) still knows SmolLM2's 8192 positions
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path / "empty-cache"))
    assert main(["synth", "--paradigm", "grounded", "--out", str(tmp_path / "t"), "--target-tokens", "8000", "--writer", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--target-tokens 8000:" in err and "use --target-tokens <= 7680" in err and "\n" not in err
    assert not (tmp_path / "t").exists() and not (tmp_path / "empty-cache").exists()
    pytest.importorskip("grpokit")
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        assert main(["synth", "--paradigm", "grounded", "--out", str(tmp_path / "v"), "--writer", "vllm:some/model"]) == 2
        assert "--writer vllm:some/model: vllm is not installed" in capsys.readouterr().err
        assert not (tmp_path / "v").exists()  # refused before anything is written
