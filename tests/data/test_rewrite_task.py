"""Task prompt_rewrites (DPP-GRPO's setting, arXiv 2511.20647): curated reference sets, the SFT target, splits."""

import pytest

from grpokit.data.demonstrations import DEMONSTRATIONS
from grpokit.data.rewrite_task import FACTORS, curated_variants, rewrite_prompt
from grpokit.data.tasks import TASKS


def _kind_of(query, variant):
    """The factor kind of a curated variant: the one whose phrase it adds to the query."""
    extra = variant.lower().replace(query.lower(), "").strip()
    kinds = [k for k, phrases in FACTORS.items() if any(extra == p.lower() for p in phrases)]
    assert len(kinds) == 1, (query, variant)
    return kinds[0]


def test_rows_show_a_curated_reference_set_and_target_a_new_factor_kind():
    splits = TASKS.get("prompt_rewrites")(seed=0, n_train=60, n_heldout=20)
    sizes = set()
    for row in splits.train + splits.heldout:
        q, shown = row["query"], row["reference_set"]
        sizes.add(len(shown))
        assert shown == row["variants"][: len(shown)]  # R_q = the first k of the curated pool
        kinds = [_kind_of(q, v) for v in row["variants"]]
        assert sorted(kinds) == sorted(FACTORS)  # the pool: one variant per factor kind, mutually diverse
        assert row["domain"] == _kind_of(q, row["answer"]) and row["domain"] not in kinds[: len(shown)]
        assert row["answer"] not in shown
        for text in shown + [row["answer"]]:  # faithful: the query's words stay, in order
            assert q in text.lower() or q[0].upper() + q[1:] in text
        assert row["prompt"] == rewrite_prompt(q, shown)
        assert DEMONSTRATIONS.get("prompt_rewrite")(row) == row["answer"]
    assert sizes == {0, 1, 2, 3}  # the default shown = [0, 3]


def test_prompt_lists_the_existing_rewrites_or_none():
    assert "Rewrites already written:\nnone\n" in rewrite_prompt("a cat in a park", [])
    assert "Rewrites already written:\n- A\n- B\n" in rewrite_prompt("a cat in a park", ["A", "B"])


def test_queries_are_disjoint_and_rows_follow_the_query():
    splits = TASKS.get("prompt_rewrites")(seed=3, n_train=200, n_heldout=50)
    train, held = {r["query"] for r in splits.train}, {r["query"] for r in splits.heldout}
    assert len(train) == 200 and len(held) == 50 and not train & held
    # a row is a function of (seed, query): the same query draws the same pool in another call
    row = splits.train[0]
    assert [t for _, t in curated_variants(row["query"], 3)] == row["variants"]


def test_option_errors_are_one_line():
    fn = TASKS.get("prompt_rewrites")
    with pytest.raises(ValueError, match="option 'shown'"):
        fn(seed=0, n_train=2, n_heldout=2, shown=[0, 5])  # a fifth kind must stay for the answer
    with pytest.raises(ValueError, match="480 distinct queries"):
        fn(seed=0, n_train=450, n_heldout=50)
    only = fn(seed=0, n_train=5, n_heldout=0, shown=[2, 2]).train
    assert {len(r["reference_set"]) for r in only} == {2}
    with pytest.raises(ValueError, match="no 'answer' column"):
        DEMONSTRATIONS.get("prompt_rewrite")({"prompt": "x"})
