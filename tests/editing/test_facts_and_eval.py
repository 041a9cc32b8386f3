"""Procedural counterfactual facts (determinism, duplicate / contradiction errors) and the free-generation metrics."""

import json

import pytest
import torch

from grpokit.data.files import DataError
from grpokit.editing.evaluate import COT_SUFFIX, evaluate, final_answer, greedy_answers, mentions, questions_of, score, styled
from grpokit.editing.facts import Edit, make_facts, read_jsonl, validate_edits, write_jsonl
from grpokit.testing import tiny_model_and_tokenizer


def test_make_facts_is_deterministic_and_well_formed():
    a, b = make_facts(12, seed=3), make_facts(12, seed=3)
    assert [vars(x) for x in a] == [vars(x) for x in b]
    assert [vars(x) for x in make_facts(12, seed=4)] != [vars(x) for x in a]
    for e in a:
        assert e.target_new != e.target_old and len(e.paraphrases) == 2 and len(e.neighbours) == 1
        assert e.subject in e.prompt and all(e.subject in p for p in e.paraphrases)
        assert e.subject not in e.neighbours[0]  # another subject, same relation
    assert len({e.relation for e in a}) == 6  # the relations cycle
    assert a[0].old_fact == f"{a[0].subject} works as a {a[0].target_old}"


def _edit(i, subject="Vorel Quast", new="pilot", prompt=None, neighbours=()):
    return Edit(i, subject, "profession", prompt or f"What is the profession of {subject}?", [], new, "baker", list(neighbours))


def test_duplicate_and_contradictory_edits_are_refused_with_both_cases_named():
    with pytest.raises(DataError, match="duplicate edits: cases 0 and 1"):
        validate_edits([_edit(0), _edit(1, prompt="Which job does Vorel Quast have?")])
    with pytest.raises(DataError, match="contradictory edits: cases 0 and 1 .*'pilot' and 'sculptor'"):
        validate_edits([_edit(0), _edit(1, new="sculptor", prompt="Which job does Vorel Quast have?")])
    with pytest.raises(DataError, match="neighbour .* of case 1 is an edited question of case 0"):
        validate_edits([_edit(0), _edit(1, subject="Bram Tol", neighbours=["What is the profession of Vorel Quast?"])])
    with pytest.raises(DataError, match="target_new == target_old"):
        validate_edits([_edit(0, new="Baker")])


def test_jsonl_round_trip_and_bad_files(tmp_path):
    edits = make_facts(5, seed=1)
    path = write_jsonl(edits, tmp_path / "facts.jsonl")
    assert [vars(e) for e in read_jsonl(path)] == [vars(e) for e in edits]
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[3] = {**rows[3], "subject": rows[0]["subject"], "relation": rows[0]["relation"]}
    (tmp_path / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match="cases 0 and 3"):
        read_jsonl(tmp_path / "bad.jsonl")
    (tmp_path / "missing.jsonl").write_text(json.dumps({"subject": "x"}) + "\n")
    with pytest.raises(DataError, match="lacks the string field"):
        read_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "nope.jsonl")


def test_answer_reading():
    assert final_answer("so <answer> \\boxed{Lima} </answer>") == "Lima"
    assert final_answer("He lives in Lima.") == "He lives in Lima."
    assert mentions("He lives in Lima.", "lima") and not mentions("Limassol", "Lima")
    assert styled("Q?", "cot").startswith("Q? Please reason step by step.")
    with pytest.raises(ValueError, match="style"):
        styled("Q?", "shout")


def test_score_by_hand():
    e = Edit(0, "S", "home_city", "P?", ["P1?", "P2?"], "Lima", "Oslo", ["N1?", "N2?"])
    answers = {"P?": "Lima.", "P1?": "<answer> \\boxed{lima} </answer>", "P2?": "Oslo", "N1?": "same", "N2?": "changed"}
    baseline = {"N1?": "Same!", "N2?": "before"}
    # reliability 1/1, generalisation 1/2 (boxed lima yes, Oslo no), locality 1/2 ("Same!" == "same" after normalising)
    assert score([e], answers, baseline) == {"reliability": 1.0, "generalisation": 0.5, "locality": 0.5}
    assert questions_of([e, e]) == ["P?", "P1?", "P2?", "N1?", "N2?"]


def test_free_generation_is_greedy_decoding_of_the_chat_prompt():
    model, tok = tiny_model_and_tokenizer(seed=1)
    qs = ["Where does Ab live?", "Hi"]
    answers = greedy_answers(model, tok, qs, "direct", max_new_tokens=5, batch_size=1, system_prompt=None)
    for q in qs:  # the same text as transformers' own greedy decoding of the rendered prompt
        ids = tok(tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True),
                  return_tensors="pt", add_special_tokens=False).input_ids
        ref = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
        assert answers[q] == tok.decode(ref[0, ids.shape[1]:], skip_special_tokens=True)
    edits = make_facts(2, seed=0)
    metrics, got = evaluate(model, tok, edits, ("direct",), max_new_tokens={"direct": 4})
    assert metrics["direct"]["locality"] == 1.0  # the pre-edit model against itself
    # an edit written hard into the FFN window: greedy decoding of the edit prompt now reads the new object
    from grpokit.data.chat import render_prompt
    from grpokit.editing.editor import EditConfig, apply_edits
    from grpokit.editing.evaluate import SYSTEM_PROMPT

    # (a one-character object: the tiny model is character-level and its frozen attention cannot count letters)
    edits = [Edit(0, "Ab", "home_city", "Where does Ab live?", [], "Z", "Y", [])]
    prompts = [render_prompt(tok, e.prompt, SYSTEM_PROMPT) for e in edits]
    apply_edits(model, tok, edits, prompts, EditConfig(method="sft", layers=[0, 1], steps=120, lr=1e-2), progress=False)
    after, answers = evaluate(model, tok, edits, ("direct",), {"direct": got["direct"]}, max_new_tokens={"direct": 12})
    assert [answers["direct"][e.prompt] for e in edits] == [e.target_new for e in edits]
    assert after["direct"]["reliability"] == 1.0


def test_counterfactual_edits_task_gives_the_consolidation_rows_of_the_same_facts():
    from grpokit.registries import get_registry

    splits = get_registry("task").get("counterfactual_edits")(seed=2, n_train=6, n_heldout=4)
    edits = make_facts(6, seed=2)
    assert [r["answer"] for r in splits.train] == [e.target_new for e in edits]
    assert splits.train[0]["prompt"] == styled(edits[0].prompt, "cot") and splits.train[0]["original_knowledge"] == edits[0].old_fact
    assert len(splits.heldout) == 4 and splits.heldout[0]["prompt"] == styled(edits[0].paraphrases[0], "cot")


def test_format_demonstrations_use_fresh_subjects_and_pass_the_format_gate():
    from grpokit.editing.facts import format_demonstrations
    from grpokit.rewards.etcon import boxed_answer, format_score

    edits = make_facts(20, seed=0)
    rows = format_demonstrations(edits, 30, seed=1)
    assert len(rows) == 30 and rows == format_demonstrations(edits, 30, seed=1)  # deterministic
    asked = [q for e in edits for q in [e.prompt, *e.paraphrases, *e.neighbours]]
    subjects = {e.subject for e in edits}
    for row in rows:
        assert row["prompt"].endswith(COT_SUFFIX) and row["prompt"] not in [styled(q, "cot") for q in asked]
        assert not any(s in row["prompt"] for s in subjects)  # no evaluated subject is taught
        assert format_score(row["completion"]) == 1.0  # exactly one <answer> ... \boxed{} ... </answer>
        assert boxed_answer(row["completion"]) and boxed_answer(row["completion"]) in row["completion"].split("<answer>")[0]
    with pytest.raises(ValueError, match="n=0"):
        format_demonstrations(edits, 0)
