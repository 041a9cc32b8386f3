"""Variational reasoning's pure functions (arXiv 2509.22637), hand-computed."""

import itertools
import math

import pytest
import torch

from grpokit.algos.advantages import grpo_advantage
from grpokit.algos.variational import (
    acc_log_likelihood, forward_kl_weights, gml_log_likelihood, grpo_implicit_weight, iwae_bound, log_importance_weights,
    rft_implicit_weight, trace_log_ratio, trace_weights,
)

NEG_INF = float("-inf")


def test_trace_log_ratio_is_the_per_token_mean_over_the_shared_length():
    # row 0: |pi| = 3, |q| = 2 -> shared 2: diffs (-1 + 1.5, -2 + 3) = (0.5, 1.0) -> mean 0.75
    # row 1: |pi| = 2, |q| = 3 -> shared 2: diffs (-0.5 + 1, -0.5 + 2) = (0.5, 1.5) -> mean 1.0
    # row 2: an empty trace -> 0
    pi = torch.tensor([[-1.0, -2.0, -3.0, 0.0], [-0.5, -0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    pi_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    q = torch.tensor([[-1.5, -3.0, -7.0], [-1.0, -2.0, -3.0], [-1.0, 0.0, 0.0]])
    q_mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    assert torch.allclose(trace_log_ratio(pi, pi_mask, q, q_mask), torch.tensor([0.75, 1.0, 0.0]), atol=1e-7)


def test_gml_and_acc_estimators_hand_computed():
    # gml: row 0 answer tokens at positions 1, 2: (-0.2 - 0.4) / 2 = -0.3; row 1: one token, -1.0
    logp = torch.tensor([[-9.0, -0.2, -0.4], [-1.0, -5.0, -5.0]])
    mask = torch.tensor([[0, 1, 1], [1, 0, 0]])
    assert torch.allclose(gml_log_likelihood(logp, mask), torch.tensor([-0.3, -1.0]))
    # acc: 3 of 4 answers correct -> log 0.75; none -> -inf; n_ans = 1 from a [B] bool
    acc = acc_log_likelihood(torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0]]))
    assert acc[0].item() == pytest.approx(math.log(0.75)) and acc[1].item() == NEG_INF
    assert acc_log_likelihood(torch.tensor([True, False])).tolist() == [0.0, NEG_INF]
    # log rho = log pi_hat + log ratio
    assert log_importance_weights(torch.tensor([math.log(0.5)]), torch.tensor([0.25])).item() == pytest.approx(math.log(0.5) + 0.25)


def test_soft_weights_sum_to_one_per_question_and_skip_questions_without_a_valid_trace():
    # group 0: log rho [0, ln 3] -> [1/4, 3/4]; group 1: [0, 0, -inf] -> [1/2, 1/2, 0]; group 2: all -inf -> 0
    log_rho = torch.tensor([0.0, math.log(3.0), 0.0, 0.0, NEG_INF, NEG_INF, NEG_INF])
    g = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    w, m = trace_weights(log_rho, g, "soft")
    assert torch.allclose(w, torch.tensor([0.25, 0.75, 0.5, 0.5, 0.0, 0.0, 0.0]))
    assert torch.allclose(torch.zeros(3).index_add(0, g, w), torch.tensor([1.0, 1.0, 0.0]))
    # ESS = 1 / sum w^2: group 0 1 / (1/16 + 9/16) = 1.6, group 1 1 / (1/4 + 1/4) = 2 -> mean 1.8 over the 2 valid groups
    assert float(m["ess"]) == pytest.approx(1.8) and float(m["valid_frac"]) == pytest.approx(2 / 3)
    # shift invariance: log rho 1000 + [0, ln 3] is still [1/4, 3/4] (no overflow)
    big, _ = trace_weights(torch.tensor([1000.0, 1000.0 + math.log(3.0)], dtype=torch.float64), torch.tensor([0, 0]), "soft")
    assert torch.allclose(big, torch.tensor([0.25, 0.75], dtype=torch.float64), rtol=0, atol=1e-12)


def test_top1_picks_the_argmax_first_on_ties_and_nothing_without_a_valid_trace():
    log_rho = torch.tensor([0.0, math.log(3.0), 2.0, 5.0, 5.0, NEG_INF, NEG_INF])
    g = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    w, m = trace_weights(log_rho, g, "top1")
    assert torch.equal(w, torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]))
    assert float(m["ess"]) == 1.0
    with pytest.raises(ValueError, match="soft or top1"):
        trace_weights(log_rho, g, "hard")


def test_iwae_bound_hand_computed():
    # group 0: log (1/2)(1 + 3) = ln 2; group 1: log (1/2)(2 + 0) = 0; group 2: every rho = 0 -> -inf
    log_rho = torch.tensor([0.0, math.log(3.0), math.log(2.0), NEG_INF, NEG_INF])
    bound = iwae_bound(log_rho, torch.tensor([0, 0, 1, 1, 2]))
    assert bound[0].item() == pytest.approx(math.log(2.0)) and bound[1].item() == pytest.approx(0.0, abs=1e-7)
    assert bound[2].item() == NEG_INF


def exact_bound(k: int, p: torch.Tensor, a: torch.Tensor, q: torch.Tensor) -> float:
    """E_{z_1..z_K ~ q}[L_K] by enumerating all 3^K trace tuples (each a group of K rows)."""
    tuples = torch.tensor(list(itertools.product(range(3), repeat=k)))  # [3^K, K]
    z = tuples.reshape(-1)
    log_rho = log_importance_weights(a[z].log(), p[z].log() - q[z].log())  # exact log ratios, one token each
    groups = torch.arange(len(tuples)).repeat_interleave(k)
    prob = q[tuples].prod(-1)  # [3^K]
    return float((prob * iwae_bound(log_rho, groups)).sum())


def test_toy_discrete_model_bounds_are_monotone_in_k_and_below_log_p():
    # pi(z|x) = p, pi(Y|x,z) = a, q(z|x,y*) = q over |z| = 3: rho = p a / q = [0.5, 0.5, 0.36]
    p, a, q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64), \
        torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    log_p = math.log(0.43)  # P(Y|x) = 0.5*0.2 + 0.3*0.5 + 0.2*0.9 = 0.43
    l1, l2, l8 = (exact_bound(k, p, a, q) for k in (1, 2, 8))
    # L_1 = ELBO = 0.2 ln 0.5 + 0.3 ln 0.5 + 0.5 ln 0.36 = -0.3465736 - 0.5108256 = -0.8573992
    assert l1 == pytest.approx(-0.8573992, abs=1e-6)
    # L_2 by hand: E over 9 pairs of ln((rho_1 + rho_2) / 2); pairs of {0.5, 0.5} traces (mass 0.5^2) give ln 0.5,
    # mixed pairs (mass 2 * 0.5 * 0.5) give ln 0.43, two 0.36 traces (mass 0.25) give ln 0.36
    l2_hand = 0.25 * math.log(0.5) + 0.5 * math.log(0.43) + 0.25 * math.log(0.36)
    assert l2 == pytest.approx(l2_hand, abs=1e-9)
    assert l1 < l2 < l8 < log_p


def test_forward_kl_weights_one_over_correct_per_question():
    # group 0 [1, 0, 1, 0] -> [1/2, 0, 1/2, 0]; group 1 none correct -> 0; group 2 [1] -> 1
    correct = torch.tensor([True, False, True, False, False, False, True])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    assert torch.allclose(forward_kl_weights(correct, g), torch.tensor([0.5, 0, 0.5, 0, 0, 0, 1.0]))


def test_implicit_weights_rft_p_and_grpo_sqrt_p_over_1_minus_p_are_increasing():
    p = torch.tensor([0.1, 0.2, 0.5, 0.8], dtype=torch.float64)
    assert torch.equal(rft_implicit_weight(p), p)
    # sqrt(0.5 / 0.5) = 1, sqrt(0.8 / 0.2) = 2, sqrt(0.2 / 0.8) = 0.5
    assert torch.allclose(grpo_implicit_weight(p)[1:], torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64))
    assert bool((grpo_implicit_weight(p).diff() > 0).all()) and bool((rft_implicit_weight(p).diff() > 0).all())


def test_monte_carlo_grpo_gradient_is_sqrt_p_over_1_minus_p_times_the_posterior_gradient():
    # Bernoulli policy pi(z=1) = p = sigmoid(theta), correct iff z = 1; d/dtheta log pi(z) = z - p.
    # Posterior gradient E_{pi(z|correct)}[z - p] = 1 - p; GRPO's on-policy std-normalised gradient
    # E[(r - p)/sigma (z - p)] = p (1 - p) / sigma = sqrt(p (1 - p)) = sqrt(p / (1 - p)) * (1 - p).
    gen = torch.Generator().manual_seed(0)
    p, n = 0.3, 200_000
    z = (torch.rand(n, generator=gen, dtype=torch.float64) < p).to(torch.float64)
    adv, _ = grpo_advantage(z, torch.zeros(n, dtype=torch.long), std_mode="population", std_eps=0.0)  # one big group
    mc = float((adv * (z - p)).mean())
    expected = float(grpo_implicit_weight(torch.tensor(p, dtype=torch.float64))) * (1 - p)  # sqrt(0.3 * 0.7) = 0.458258
    assert expected == pytest.approx(math.sqrt(0.21))
    assert mc == pytest.approx(expected, abs=4 / math.sqrt(n))  # MC standard error ~ 1/sqrt(n)
    # RFT: E[r (z - p)] = p (1 - p) = w_RFT(p) * posterior gradient
    assert float((z * (z - p)).mean()) == pytest.approx(p * (1 - p), abs=4 / math.sqrt(n))
