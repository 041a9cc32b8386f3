"""TPSFT on the real SmolLM2-135M-Instruct: the edited answer changes, a neighbour's does not (slow)."""

import pytest

from grpokit.editing.editor import EditConfig, apply_edits
from grpokit.editing.evaluate import evaluate, mentions
from grpokit.editing.facts import make_facts
from grpokit.editing.pipeline import edit_prompts

pytestmark = pytest.mark.slow


def test_tpsft_writes_one_fact_into_smollm2_and_leaves_a_neighbour():
    from grpokit.model.loading import load_model

    model, tok = load_model("smollm2-135m-instruct")
    edits = make_facts(1, seed=0, n_paraphrases=0)
    tokens = {"direct": 16}
    _, before = evaluate(model, tok, edits, ("direct",), max_new_tokens=tokens)
    assert not mentions(before["direct"][edits[0].prompt], edits[0].target_new)
    rows = apply_edits(model, tok, edits, edit_prompts(tok, edits), EditConfig(method="tpsft", steps=8, lr=5e-4, refresh_every=2),
                       progress=False)
    after, answers = evaluate(model, tok, edits, ("direct",), before, max_new_tokens=tokens)
    assert rows[0]["p_after"] > 10 * rows[0]["p_before"]
    assert after["direct"]["reliability"] == 1.0, answers["direct"][edits[0].prompt]
    assert after["direct"]["locality"] == 1.0, (before["direct"], answers["direct"])
