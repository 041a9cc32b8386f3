"""Constraint checkers and verifiers on hand-built passing and failing responses."""

import pytest

from grpokit.synth.constraints import count_sentences, count_words, describe, satisfied
from grpokit.synth.verify import check, final_answer, normalize, score


@pytest.mark.parametrize("constraint,passing,failing", [
    # "It's one two." -> words It's, one, two = 3
    ({"kind": "word_count", "min": 3, "max": 3}, "It's one two.", "one two"),
    # two sentences ("A b." / "C d!"); the second text has three
    ({"kind": "sentence_count", "min": 2, "max": 2}, "A b. C d!", "A. B. C?"),
    # whole words, case-insensitive: "Kelmar" inside "Kelmarton" does not count
    ({"kind": "include_keywords", "words": ["kelmar", "1820"]}, "KELMAR since 1820", "Kelmarton since 1820"),
    ({"kind": "forbidden_words", "words": ["very"]}, "every day", "a Very good day"),
    ({"kind": "json_keys", "keys": ["name", "city"]}, '```json\n{"name": "A", "city": "B"}\n```', '{"name": "A"}'),
    ({"kind": "bullet_count", "n": 2}, "- a\n* b\nend", "- a\n- b\n- c"),
    ({"kind": "end_phrase", "phrase": "That is all."}, "Facts. that is all.", "That is all. More."),
])
def test_constraint_passes_and_fails(constraint, passing, failing):
    assert satisfied(constraint, passing)
    assert not satisfied(constraint, failing)


def test_counts_and_descriptions():
    assert count_words("Tessa Quill, 1,200 people") == 5  # Tessa, Quill, 1, 200, people
    assert count_sentences("One. Two? Three") == 3
    assert count_sentences("...") == 0
    assert describe({"kind": "include_keywords", "words": ["a", "b"]}) == "Include the words 'a', 'b'."


@pytest.mark.parametrize("bad,message", [
    ({"kind": "shout"}, "unknown constraint 'shout'"),
    ({"kind": "word_count", "min": 1}, "takes parameters ['max', 'min']"),
    ({"kind": "bullet_count", "n": "3"}, "parameter 'n' must be int"),
])
def test_malformed_constraint_is_refused(bad, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        satisfied(bad, "text")


def test_answer_extraction_and_normalisation():
    assert final_answer("reasoning\nAnswer: The Kelmar.\nextra") == "The Kelmar."
    assert final_answer("\n  Kelmar\nmore") == "  Kelmar"
    assert normalize("  The Kelmar-ton, Inc. ") == "kelmarton inc"


def test_verifiers_hand_built():
    ctx = "[S0] About X: X was founded by Tessa Quill. X is old."
    grounded = {"type": "grounded", "answer": "Tessa Quill"}
    assert check(grounded, 'Answer: Tessa Quill\nEvidence: "X was founded by Tessa Quill."', ctx) == []
    assert check(grounded, 'Answer: Tessa Quill\nEvidence: "X was created by Tessa Quill."', ctx) == [
        "the Evidence: quote is not verbatim in the context"]
    assert check(grounded, 'Answer: Tessa Quill\nEvidence: "X is old."', ctx) == ["the Evidence: quote does not contain the answer"]
    contains = {"type": "contains", "answer": "Vinmere", "cite": ["S4"], "max_words": 5}
    assert check(contains, "Born in vinmere. [S4]", None) == []
    assert check(contains, "Born in Vinmere.", None) == ["no citation [S4]"]
    assert check(contains, "He was born, they say, in Vinmere [S4]", None) == ["8 words > 5"]  # He was born they say in Vinmere S4
    fields = {"type": "fields", "fields": {"founder": "Tessa Quill", "founded_year": "1820"}}
    assert check(fields, "founder: Tessa Quill\nfounded_year: 1820", None) == []
    assert score(fields, "founder: Tessa Quill\nfounded_year: 1821", None) == 0.0
    assert score(fields, "founder: Tessa Quill\nfounded_year: 1821", None, partial=True) == 0.5
    cons = {"type": "constraints", "constraints": [{"kind": "bullet_count", "n": 1}, {"kind": "end_phrase", "phrase": "Bye."},
                                                   {"kind": "forbidden_words", "words": ["very"]}, {"kind": "word_count", "min": 1, "max": 9}]}
    assert score(cons, "- a fact\nBye.", None) == 1.0
    assert score(cons, "- a very fact", None, partial=True) == 0.5  # bullet and word count hold; end phrase and forbidden word fail
    with pytest.raises(ValueError, match="unknown verifier type 'oracle'"):
        check({"type": "oracle"}, "x")


def test_synth_verify_reward_scores_rows_by_their_verifier():
    from grpokit.rewards import REWARDS

    fn = REWARDS.get("synth_verify")
    prompts = [[{"role": "user", "content": "[S0] About X: X was founded by Tessa Quill.\n\nWho founded X?"}]] * 3 + ["p"]
    verifiers = [{"type": "grounded", "answer": "Tessa Quill"}, {"type": "answer", "answer": "Kelmar"},
                 {"type": "constraints", "constraints": [{"kind": "bullet_count", "n": 2}, {"kind": "end_phrase", "phrase": "Bye."}]}, None]
    completions = ['Answer: Tessa Quill\nEvidence: "X was founded by Tessa Quill."', "Answer: Kelmarton", "- a\n- b", "anything"]
    assert fn(prompts, completions, verifier=verifiers) == [1.0, 0.0, 0.0, None]
    assert fn(prompts, completions, verifier=verifiers, partial=True) == [1.0, 0.0, 0.5, None]
    with pytest.raises(ValueError, match="synth_verify.*needs a 'verifier' column"):
        fn(prompts, completions)
    with pytest.raises(ValueError, match="reward 'synth_verify', sample 0: verifier 'answer' lacks"):
        fn(["p"], ["x"], verifier=[{"type": "answer"}])
