"""Group-level rewards: TTRL majority vote, Pref-GRPO win rate, DPP-GRPO diversity."""

import functools
import math

import pytest
import torch

from grpokit.rewards import REWARDS, NamedReward, score_completions
from grpokit.rewards.group import answer_preference, hashing_embed, length_preference
from grpokit.rewards.scoring import is_group_level

GROUP_REWARDS = ["majority_vote", "win_rate", "dpp"]


@pytest.mark.parametrize("name", GROUP_REWARDS)
def test_group_rewards_are_registered_and_marked(name):
    fn = REWARDS.get(name)
    assert fn.group_level is True and is_group_level(functools.partial(fn, prefer="length"))
    assert REWARDS.summary(name)


# ----------------------------------------------------------------------------- majority vote


def test_majority_vote_label_free():
    # answers 3, 3, 4, None -> a* = 3 (2 votes) -> [1, 1, 0, 0]; no answer column needed
    completions = ["so x = 3", "3", "the answer is 4", "no idea"]
    assert REWARDS.get("majority_vote")(["q"] * 4, completions, group_ids=[0] * 4) == [1.0, 1.0, 0.0, 0.0]


def test_majority_vote_tie_breaks_by_first_occurrence():
    # 4 and 3 both get 2 votes; 4 occurs first -> a* = 4 (tie-break by first occurrence [inferred])
    fn = REWARDS.get("majority_vote")
    completions = ["= 4", "= 3", "= 3", "= 4"]
    assert fn(["q"] * 4, completions, group_ids=[0] * 4) == [1.0, 0.0, 0.0, 1.0]
    # tie_break="skip": a tied vote gives no pseudo-label, so nobody is rewarded
    assert fn(["q"] * 4, completions, group_ids=[0] * 4, tie_break="skip") == [0.0] * 4


def test_majority_vote_no_answers_do_not_vote():
    fn = REWARDS.get("majority_vote")
    # None, None, 5: the two answer-less completions do not outvote the single 5
    assert fn(["q"] * 3, ["hmm", "what", "= 5"], group_ids=[0, 0, 0]) == [0.0, 0.0, 1.0]
    assert fn(["q"] * 2, ["hmm", "what"], group_ids=[0, 0]) == [0.0, 0.0]


def test_majority_vote_counts_only_stated_answers():
    # SmolLM2-135M-Instruct's samples for "What is 2 + 5?" (gold 7; shortened). Stated answers:
    # 11, -, -, -, 7, 2, -, 7 -> a* = 7 (2 votes) -> rewards 1 on rows 4 and 7 only.
    # The last-number rule ("number") reads 11, 5, -, 5, 7, 2, 5, 7: the operand 5 restated by
    # three non-answers wins 3:2 and the vote rewards rows 1, 3 and 6, none of which answers.
    completions = [
        "2 + 5 = 11\n\nThis is a classic example of logical thinking.",
        "You can't have two 5s in one sentence, but that's the answer to the classic problem: 2 + 5 =",
        "Sure, I'd be happy helping you! You can practice your math skills here.",
        "To add 2 and 5, you need to combine the operation of adding two numbers. The result of adding",
        "To solve this, you should add 2 + 5. \n\n2 + 5 equals 7.",
        "Two is a magic number in mathematics. The answer is 2.",
        "A delightfully nonsensical question. In mathematics, 2 + 5 is a classic example",
        "The answer is 7.",
    ]
    fn = REWARDS.get("majority_vote")
    assert fn(["q"] * 8, completions, group_ids=[0] * 8) == [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert fn(["q"] * 8, completions, group_ids=[0] * 8, extract="number") == [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("preset", ["ttrl", "spine"])
def test_label_free_presets_vote_with_stated_answers(preset):
    # the presets' own reward on the group above: only the two stated 7s are rewarded
    from grpokit.config.loading import load_config
    from grpokit.trainer.setup import build_rewards

    vote = build_rewards(load_config(preset=preset).rewards)[0]
    completions = ["2 + 5 = 11", "... problem: 2 + 5 =", "2 + 5 is a classic example", "2 + 5 equals 7.", "The answer is 7."]
    assert vote.fn(["q"] * 5, completions, group_ids=[0] * 5) == [0.0, 0.0, 0.0, 1.0, 1.0]


def test_majority_vote_groups_and_number_equality():
    # group 0 (rows 0, 2): "82.0" and "82" are the same number; group 1 (rows 1, 3, 5): 1,000 wins 2:1
    completions = ["= 82.0", "= 1,000", "is 82", "= 1000", "= 7", "= 2"]
    scores = REWARDS.get("majority_vote")(["q"] * 6, completions, group_ids=[0, 1, 0, 1, 2, 1])
    assert scores == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]  # row 4 alone in group 2 is its own majority


def test_majority_vote_leave_one_out():
    # answers 9, 7, 7. Plain a* = 7 -> [0, 1, 1].
    # LOO: row 0 vs {7, 7} -> 7 -> 0; row 1 vs {9, 7} tie -> first = 9 -> 0; row 2 vs {9, 7} -> 9 -> 0
    fn = REWARDS.get("majority_vote")
    completions = ["= 9", "= 7", "= 7"]
    assert fn(["q"] * 3, completions, group_ids=[0] * 3) == [0.0, 1.0, 1.0]
    assert fn(["q"] * 3, completions, group_ids=[0] * 3, leave_one_out=True) == [0.0, 0.0, 0.0]


def test_majority_vote_custom_extractors():
    fn = REWARDS.get("majority_vote")
    completions = ["work\nParis", "Paris", "work\nLyon\n"]
    assert fn(["q"] * 3, completions, group_ids=[0] * 3, extract="last_line") == [1.0, 1.0, 0.0]
    first_word = lambda text: text.split()[0].lower() if text.split() else None  # noqa: E731
    assert fn(["q"] * 3, ["A b", "a c", "B"], extract=first_word) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="'extract'"):
        fn(["q"], ["1"], extract="nope")


def test_majority_vote_through_score_completions():
    reward = NamedReward("vote", functools.partial(REWARDS.get("majority_vote"), extract="number"))
    out = score_completions([reward], ["q"] * 4, ["= 1", "= 2", "= 2", "= 2"], {}, group_ids=[0, 0, 1, 1])
    # group 0: 1 vs 2 tie -> first (1) wins -> [1, 0]; group 1: both 2 -> [1, 1]
    assert out.total.tolist() == [1.0, 0.0, 1.0, 1.0]


# ----------------------------------------------------------------------------- win rate


def test_win_rate_strict_order():
    # shorter preferred; lengths 1 < 2 < 3 < 4 -> wins 3, 2, 1, 0 out of G - 1 = 3
    completions = ["a", "bb", "ccc", "dddd"]
    w = REWARDS.get("win_rate")(["p"] * 4, completions, group_ids=[0] * 4, prefer="length")
    assert w == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])
    # order of rows does not matter, only the preference order
    w = REWARDS.get("win_rate")(["p"] * 4, completions[::-1], group_ids=[0] * 4, prefer=length_preference)
    assert w == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


def test_win_rate_sums_to_half_group_size_and_ties():
    fn = REWARDS.get("win_rate")

    def soft(prompt, a, b):  # any probability in [0, 1]
        return (len(a) * 7 % 5) / 4 * 0.5 + 0.25 * (len(b) % 2)

    completions = ["x" * k for k in range(1, 7)]  # G = 6
    w = fn(["p"] * 6, completions, group_ids=[0] * 6, prefer=soft)
    assert sum(w) == pytest.approx(6 / 2)  # every comparison hands out exactly one point
    assert fn(["p"] * 3, ["aa", "bb", "cc"], group_ids=[0] * 3, prefer="length") == [0.5] * 3  # all ties
    assert fn(["p"] * 2, ["a", "bb"], group_ids=[0, 0], prefer="length") == [1.0, 0.0]  # G = 2 grid
    assert fn(["p"], ["a"], group_ids=[0], prefer="length") == [0.5]  # no comparison possible


def test_win_rate_answer_preference_reads_row_columns():
    # answer 5: pairs (0,1) -> 0 right, 1 wrong: 1 pt to 0; (0,2) both right: 0.5 each;
    # (1,2): 1 pt to 2. wins (1.5, 0, 1.5) / (G - 1 = 2) = (0.75, 0, 0.75)
    w = REWARDS.get("win_rate")(["p"] * 3, ["= 5", "= 4", "is 5"], group_ids=[0] * 3, prefer="answer", answer=[5] * 3)
    assert w == pytest.approx([0.75, 0.0, 0.75])
    assert answer_preference("p", "= 5", "= 4", answer=None) == 0.5


def test_win_rate_position_bias_symmetric_and_hard():
    first_wins = lambda prompt, a, b: 0.7  # noqa: E731  a judge that favours whichever is shown first
    fn = REWARDS.get("win_rate")
    # pairs (0,1),(0,2),(1,2), first gets 0.7: wins (1.4, 1.0, 0.6) / 2 = (0.7, 0.5, 0.3)
    assert fn(["p"] * 3, ["a", "b", "c"], prefer=first_wins) == pytest.approx([0.7, 0.5, 0.3])
    # symmetric: p = (0.7 + 1 - 0.7) / 2 = 0.5 for every pair -> all 0.5
    assert fn(["p"] * 3, ["a", "b", "c"], prefer=first_wins, symmetric=True) == pytest.approx([0.5] * 3)
    # hard verdicts: 0.7 -> 1: wins (2, 1, 0) / 2
    assert fn(["p"] * 3, ["a", "b", "c"], prefer=first_wins, hard=True) == pytest.approx([1.0, 0.5, 0.0])


def test_win_rate_options_errors_and_spec_strings():
    fn = REWARDS.get("win_rate")
    with pytest.raises(ValueError, match="'prefer'"):
        fn(["p"] * 2, ["a", "b"])
    with pytest.raises(ValueError, match="probability"):
        fn(["p"] * 2, ["a", "b"], prefer=lambda p, a, b: 1.5)
    w = fn(["p"] * 2, ["a", "bb"], prefer="grpokit.rewards.group:length_preference")
    assert w == [1.0, 0.0]
    assert length_preference("p", "a", "bb", shorter=False) == 0.0


# ----------------------------------------------------------------------------- DPP diversity


def _lookup(vectors):
    """An embedder returning fixed vectors per text."""
    return lambda texts: torch.tensor([vectors[t] for t in texts], dtype=torch.float64)


def test_dpp_orthogonal_duplicate_and_empty_reference():
    fn = REWARDS.get("dpp")
    embed = _lookup({"a": [1.0, 0.0, 0.0], "b": [0.0, 1.0, 0.0], "q": [0.0, 0.0, 1.0]})
    div_only = dict(embed=embed, lambda_div=1.0, lambda_rel=0.0)
    # orthogonal pair: k = 0 -> gain log(1 + 1 - 0) = log 2
    assert fn(["q"] * 2, ["a", "b"], **div_only) == pytest.approx([math.log(2)] * 2)
    # exact duplicate of the single other member: log(2 - 1 * (1 + 1)^-1 * 1) = log 1.5
    assert fn(["q"] * 2, ["a", "a"], **div_only) == pytest.approx([math.log(1.5)] * 2)
    # alone in its group: R = {} -> log 2
    assert fn(["q"], ["a"], **div_only) == pytest.approx([math.log(2)])


def test_dpp_gain_of_duplicate_is_about_zero_in_novelty_mode():
    # gain="novelty": 1 - k^T (L_R + eps I)^-1 k, eps = 1e-3. Rows 0 and 1 duplicate each other
    # (and share nothing with row 2): 1 - 1/(1 + 1e-3) = 9.99e-4 ~ 0; the distinct row keeps ~1.
    completions = ["the cat sat on the mat", "the cat sat on the mat", "quantum flux 42"]
    fn = REWARDS.get("dpp")
    scores = fn(["p"] * 3, completions, group_ids=[0] * 3, gain="novelty", lambda_div=1.0, lambda_rel=0.0)
    assert scores[0] == pytest.approx(1 - 1 / 1.001, abs=1e-6) and scores[1] == pytest.approx(scores[0])
    assert scores[2] > 0.9
    # the default (paper) log gain ranks them the same way: duplicates lowest
    logs = REWARDS.get("dpp")(["p"] * 3, completions, group_ids=[0] * 3, lambda_div=1.0, lambda_rel=0.0)
    assert logs[0] == pytest.approx(logs[1]) and logs[0] < logs[2] <= math.log(2) + 1e-9


def test_dpp_relevance_hand_computed():
    # p = (1,0), g = (0.6,0.8), q = (0.8,0.6): cos(p,g) = 0.6, cos(p,q) = 0.8, cos(g,q) = 0.96.
    # L + I = [[2, .6], [.6, 2]], det = 3.64, inverse diagonal 2/3.64 -> Schur 1.82 for both.
    # rel(p) = 0.8 * 0.6 = 0.48; rel(g) = 0.96 * 0.6 = 0.576; r = 0.5 log 1.82 + 0.5 rel
    embed = _lookup({"p": [1.0, 0.0], "g": [0.6, 0.8], "q": [0.8, 0.6]})
    scores = REWARDS.get("dpp")(["q"] * 2, ["p", "g"], group_ids=[0, 0], embed=embed)
    assert scores == pytest.approx([0.5 * math.log(1.82) + 0.24, 0.5 * math.log(1.82) + 0.288])
    # the query column replaces the prompt; relevance column / relevance_fn override the formula
    scores = REWARDS.get("dpp")(["x"] * 2, ["p", "g"], embed=embed, query=["q", "q"])
    assert scores[0] == pytest.approx(0.5 * math.log(1.82) + 0.24)
    scores = REWARDS.get("dpp")(["q"] * 2, ["p", "g"], embed=embed, relevance=[1.0, None])
    assert scores == pytest.approx([0.5 * math.log(1.82) + 0.5, 0.5 * math.log(1.82)])
    scores = REWARDS.get("dpp")(["q"] * 2, ["p", "g"], embed=embed, relevance_fn=lambda p, c, **k: [0.2, 0.4])
    assert scores == pytest.approx([0.5 * math.log(1.82) + 0.1, 0.5 * math.log(1.82) + 0.2])


def test_dpp_sequential_gains_sum_to_log_det():
    # chain rule of log-det: sum of successive gains = log det(L + I) (DPP-GRPO, arXiv 2511.20647)
    gen = torch.Generator().manual_seed(0)
    vecs = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    texts = [str(i) for i in range(5)]
    embed = _lookup({t: v.tolist() for t, v in zip(texts, vecs)})
    gains = REWARDS.get("dpp")(["q"] * 5, texts, embed=embed, reference="sequential", lambda_div=1.0, lambda_rel=0.0)
    unit = vecs / vecs.norm(dim=-1, keepdim=True)
    assert sum(gains) == pytest.approx(torch.logdet(unit @ unit.T + torch.eye(5, dtype=torch.float64)).item())
    assert gains[0] == pytest.approx(math.log(2))  # Δ(p | ∅) = log 2


def test_dpp_column_reference_is_submodular():
    # R ⊆ R' -> Δ(p|R) >= Δ(p|R'), for random unit embeddings
    gen = torch.Generator().manual_seed(1)
    vecs = {str(i): torch.randn(3, generator=gen).tolist() for i in range(7)}
    fn = functools.partial(REWARDS.get("dpp"), embed=_lookup(vecs), reference="column", lambda_div=1.0, lambda_rel=0.0)
    for p in "0123":
        small, large = ["4"], ["4", "5", "6"]
        g_small = fn(["q"], [p], reference_set=[small])[0]
        g_large = fn(["q"], [p], reference_set=[large])[0]
        assert g_small >= g_large - 1e-12
    assert fn(["q"], ["0"], reference_set=[[]]) == pytest.approx([math.log(2)])
    with pytest.raises(ValueError, match="reference_set"):
        REWARDS.get("dpp")(["q"], ["a"], reference="column")


def test_dpp_hashing_embedder_and_empty_completion():
    emb = hashing_embed(["Hello  World", "hello world", "zzz"])
    assert torch.equal(emb[0], emb[1])  # case and whitespace are normalised
    assert emb.shape == (3, 2048) and float(emb[0] @ emb[2]) == 0.0
    # an empty completion embeds to zero: gain log(0 + 1 - 0) = 0 and relevance 0
    scores = REWARDS.get("dpp")(["prompt"] * 2, ["", "some text"], group_ids=[0, 0])
    assert scores[0] == pytest.approx(0.0, abs=1e-12)
