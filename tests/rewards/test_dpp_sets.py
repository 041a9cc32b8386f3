"""DPP-GRPO's set mechanics (arXiv 2511.20647): log-det gains against R_q, greedy / sequential set construction, relevance."""

import math

import pytest
import torch

from grpokit.rewards.builtin import REWARDS
from grpokit.rewards.dpp_sets import build_rewrite_sets, greedy_select, log_det_gain, set_diversity, set_metrics


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def _lookup(vectors):
    return lambda texts: torch.tensor([vectors[x] for x in texts], dtype=torch.float64)


def test_a_rewrite_equal_to_a_reference_member_gains_less_than_a_new_one():
    e1, e2, e3 = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)
    # R = {e1, e2}: L_R + I = 2I, so k^T (L_R + I)^-1 k = |k|^2 / 2.
    # p = e1 (a member): log(1 + 1 - 1/2) = log 1.5; p = e3 (new): log(2 - 0) = log 2
    gains = log_det_gain(t(e1, e3), t(e1, e2))
    assert gains.tolist() == pytest.approx([math.log(1.5), math.log(2.0)], abs=1e-12)
    # p = (e1 + e2)/sqrt 2, inside span(R): |k|^2 = 1/2 + 1/2 = 1 -> log 1.5, no more than a copy
    s = 2 ** -0.5
    assert log_det_gain(t((s, s, 0.0)), t(e1, e2)).item() == pytest.approx(math.log(1.5), abs=1e-12)
    # diminishing returns: R = 9 copies of e1, p = e1: L_R + I = 11^T + I, (L_R + I)^-1 1 = 1/10,
    # k^T (.)^-1 k = 9/10 -> log(2 - 0.9) = log 1.1 -> 0 as copies pile up; a new p keeps log 2
    copies = t(*[e1] * 9)
    assert log_det_gain(t(e1, e3), copies).tolist() == pytest.approx([math.log(1.1), math.log(2.0)], abs=1e-12)
    assert log_det_gain(t(e1), t(e1)[:0]).item() == pytest.approx(math.log(2.0))  # Δ(p | ∅) = log 2


def test_the_reward_reads_the_rows_reference_set():
    # the dpp reward with reference "column": each row's own R_q, not the group; duplicates of R_q members score lowest
    embed = _lookup({"g1": [1.0, 0.0, 0.0], "g2": [0.0, 1.0, 0.0], "new": [0.0, 0.0, 1.0]})
    fn = REWARDS.get("dpp")
    scores = fn(["q"] * 3, ["g1", "g2", "new"], group_ids=[0, 0, 0], embed=embed, reference="column",
                reference_set=[["g1", "g2"]] * 3, lambda_div=1.0, lambda_rel=0.0)
    assert scores == pytest.approx([math.log(1.5), math.log(1.5), math.log(2.0)])
    # the group as reference instead (the leave-one-out dpp_grpo setting): three orthogonal rows, all log 2
    loo = fn(["q"] * 3, ["g1", "g2", "new"], group_ids=[0, 0, 0], embed=embed, lambda_div=1.0, lambda_rel=0.0)
    assert loo == pytest.approx([math.log(2.0)] * 3)


def test_div_is_the_sum_of_sequential_gains():
    gen = torch.Generator().manual_seed(0)
    phi = torch.nn.functional.normalize(torch.randn(4, 3, generator=gen, dtype=torch.float64), dim=-1)
    chain = sum(log_det_gain(phi[i : i + 1], phi[:i]).item() for i in range(4))
    assert set_diversity(phi).item() == pytest.approx(chain, abs=1e-12)
    assert set_diversity(phi[:0]).item() == 0.0


def test_greedy_selection_on_a_hand_example():
    # a = e1; a2 near a (cos 0.96); b at 60 degrees from a (cos 0.5); c = e3
    a, a2, b, c = (1.0, 0.0, 0.0), (0.96, 0.28, 0.0), (0.5, 0.75 ** 0.5, 0.0), (0.0, 0.0, 1.0)
    phi = t(a, a2, b, c)
    # step 1: every Δ = log 2, tie -> index 0 (a). Step 2: Δ(a2|a) = log(2 - .9216/2) = log 1.5392,
    # Δ(b|a) = log(2 - .25/2) = log 1.875, Δ(c|a) = log 2 -> c. Step 3 (S = {a, c}, L + I = 2I):
    # Δ(a2) = log 1.5392 < Δ(b) = log 1.875 -> b
    assert greedy_select(phi, 3) == [0, 3, 2]
    # with relevance quality [1, 1, 1, 0] (c off-topic), λ_div = λ_rel = 1: step 2 b (1.6286) over
    # a2 (1.4311) and c (0.6931); step 3, S = {a, b}: (L_S + I)^-1 = [[2, -.5], [-.5, 2]] / 3.75,
    # k_a2 = (0.96, 0.72249): quad = (1.8432 - 0.69359 + 1.04397) / 3.75 = 0.58496,
    # Δ(a2) + 1 = log 1.41504 + 1 = 1.3472 > Δ(c) + 0 = 0.6931 -> a2
    assert greedy_select(phi, 3, quality=t(1.0, 1.0, 1.0, 0.0), lambda_rel=1.0) == [0, 2, 1]
    assert log_det_gain(t(a2), t(a, b)).item() == pytest.approx(math.log(2 - 2.19358 / 3.75), abs=1e-4)
    with pytest.raises(ValueError, match="k = 5"):
        greedy_select(phi, 5)


def test_sequential_construction_conditions_each_step_on_the_set_so_far():
    prompts = []
    vectors = {"q": [0.6, 0.8, 0.0], "first": [1.0, 0.0, 0.0], "copy": [1.0, 0.0, 0.0], "other": [0.0, 1.0, 0.0]}

    def generate(batch, n):
        prompts.extend(batch)
        return [["first"]] if len(prompts) == 1 else [["copy", "other", "copy"][:n]]

    [out] = build_rewrite_sets(generate, ["q"], 2, _lookup(vectors), n_candidates=3, lambda_div=1.0, lambda_rel=0.0)
    # step 2 sees step 1's rewrite in its prompt, and keeps the candidate that is new against S = {first}
    assert out == ["first", "other"]
    assert "Rewrites already written:\nnone" in prompts[0] and "- first" in prompts[1]
    m = set_metrics("q", out, _lookup(vectors))
    # orthogonal pair: Div = log det(2I) = 2 log 2, per item log 2; cos to q: 0.6 and 0.8
    assert m == pytest.approx({"diversity": math.log(2.0), "relevance": 0.7, "distinct": 1.0})


def test_relevance_penalises_an_off_topic_rewrite():
    # the embedded all-MiniLM-L6-v2; r = 0.5 Δ(p|R_q) + 0.5 cos(p,q) mean_g cos(p,g)
    q = "a dog chasing a ball on a beach"
    reference = ["A slow dolly shot of a dog chasing a ball on a beach", "A dog chasing a ball on a beach in thick fog"]
    cands = ["A dog chasing a ball on a beach at golden hour", "a spreadsheet of quarterly tax figures"]
    kw = dict(group_ids=[0, 1], embed="minilm", reference="column", reference_set=[reference] * 2, query=[q] * 2)
    fn = REWARDS.get("dpp")
    on, off = fn([q] * 2, cands, **kw)
    assert on > off + 0.05
    rel = fn([q] * 2, cands, lambda_div=0.0, lambda_rel=1.0, **kw)
    assert rel[0] > 0.4 and abs(rel[1]) < 0.1
    # the relevance term is what ranks them: diversity alone prefers the off-topic text (nearly orthogonal: ~log 2)
    div = fn([q] * 2, cands, lambda_div=1.0, lambda_rel=0.0, **kw)
    assert div[1] > div[0] and div[1] == pytest.approx(math.log(2.0), abs=0.02)


def test_the_papers_weights_rank_the_verbatim_query_first_on_short_prompts():
    # docs/rewards.md: with MiniLM and prompts this short, relevance (cos(p,q) x mean cos(p,g)) rewards
    # closeness to q more than the +I gain (<= log 2) rewards novelty, so the query itself is the optimum
    q = "a dog playing with a ball on a beach"
    reference = ["A slow dolly shot of a dog playing with a ball on a beach",
                 "a dog playing with a ball on a beach during a snowfall",
                 "a dog playing with a ball on a beach, in the style of a watercolor painting"]
    cands = [q, reference[0], "an aerial drone view of a dog playing with a ball on a beach at golden hour",
             "a dog playing with a ball on a beach at night under a full moon", "a cat sleeping on a sofa"]
    n = len(cands)
    r = REWARDS.get("dpp")([q] * n, cands, group_ids=list(range(n)), embed="minilm", reference="column",
                           reference_set=[reference] * n, query=[q] * n)
    assert r == pytest.approx([0.578, 0.466, 0.484, 0.516, 0.349], abs=0.003)
    assert max(range(n), key=r.__getitem__) == 0
