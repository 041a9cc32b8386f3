"""Flow-GRPO's SDE step: marginals, per-element-mean log-density, closed-form KL, finiteness, trained-step selection."""

import math

import pytest
import torch

from grpokit.families.flow_matching.sde import (
    diffusion_coefficient, flow_sigmas, sample_sde, sde_step_stats, step_kl, step_logprob, trained_steps,
)



@pytest.fixture(autouse=True)
def one_thread():
    """Tiny convolutions: one thread is faster than two, and far faster on a loaded machine [measured: 40 ms vs 1.6 s]."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

def gaussian_velocity(m: float, s: float):
    """Exact E[ε − x0 | x_σ] for x0 ~ N(m, s²): [σ − (1−σ)s²]·(x − (1−σ)m) / ((1−σ)²s² + σ²) − m."""

    def v(x, sigma):
        sig = sigma.view(-1, *([1] * (x.dim() - 1)))
        var = (1 - sig) ** 2 * s**2 + sig**2
        return (sig - (1 - sig) * s**2) * (x - (1 - sig) * m) / var - m

    return v


@pytest.mark.parametrize("a", [0.0, 0.3, 0.7])
def test_sde_sampler_preserves_the_marginals_of_gaussian_data(a):
    m, s = 0.5, 0.6
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(20000, 1, generator=gen)
    states, logps = sample_sde(gaussian_velocity(m, s), x0, flow_sigmas(50), a, gen)
    out = states[:, -1, 0]
    # 20000 draws: the sample mean's std is 0.6/141 = 0.004, the variance's ~0.36*0.01 = 0.0036; Euler-Maruyama adds O(1/K)
    assert abs(float(out.mean()) - m) < 0.02
    assert abs(float(out.var()) - s**2) < 0.03
    assert torch.isfinite(logps).all()
    if a == 0:
        assert torch.equal(logps, torch.zeros_like(logps))  # the ODE records no log-prob


def test_per_element_mean_logprob_equals_normal_over_d():
    gen = torch.Generator().manual_seed(1)
    mean, x = torch.randn(3, 2, 4, 4, generator=gen), torch.randn(3, 2, 4, 4, generator=gen)
    std = torch.tensor([0.3, 1.0, 2.5])
    ours = step_logprob(x, mean, std)
    ref = torch.distributions.Normal(mean, std.view(-1, 1, 1, 1)).log_prob(x).flatten(1).sum(-1) / 32  # D = 2·4·4
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    # hand value, one element: x = mean -> -log s - ½ log 2π
    one = step_logprob(torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([2.0]))
    assert float(one) == pytest.approx(-math.log(2.0) - 0.5 * math.log(2 * math.pi), abs=1e-6)


def test_sde_mean_and_std_by_hand():
    # x = 1, v = 0.5, σ = 0.5 -> 0.4 (Δ = 0.1), a = 0.7: g² = 0.49·(0.5/0.5) = 0.49
    # μ = 1 − 0.1·[0.5 + 0.49/(2·0.5)·(1 + 0.5·0.5)] = 1 − 0.1·(0.5 + 0.6125) = 0.88875; s = 0.7·√0.1
    mean, std = sde_step_stats(torch.ones(1, 1), torch.full((1, 1), 0.5), torch.tensor([0.5]), torch.tensor([0.4]), 0.7, 0.9)
    assert float(mean) == pytest.approx(0.88875, abs=1e-6)
    assert float(std) == pytest.approx(0.7 * math.sqrt(0.1), abs=1e-6)


def test_closed_form_step_kl_matches_monte_carlo():
    gen = torch.Generator().manual_seed(2)
    mu_p, mu_q = torch.randn(1, 4, generator=gen), torch.randn(1, 4, generator=gen)
    std = torch.tensor([0.8])
    exact = step_kl(mu_p, mu_q, std)
    draws = mu_p + 0.8 * torch.randn(400000, 4, generator=gen)
    p, q = torch.distributions.Normal(mu_p, 0.8), torch.distributions.Normal(mu_q, 0.8)
    mc = (p.log_prob(draws) - q.log_prob(draws)).sum(-1).mean()
    assert float(exact) == pytest.approx(float(((mu_p - mu_q) ** 2).sum() / (2 * 0.64)), rel=1e-6)
    assert float(mc) == pytest.approx(float(exact), rel=0.02, abs=0.01)
    # Flow-GRPO's code convention: the exact KL times Δ / D (here Δ = 0.1, D = 4)
    flow = step_kl(mu_p, mu_q, std, convention="flow_grpo", sigma_delta=torch.tensor([0.1]))
    assert float(flow) == pytest.approx(float(exact) * 0.1 / 4, rel=1e-5)


def test_values_are_finite_at_sigma_one_and_on_the_last_step():
    sigmas = flow_sigmas(10)
    assert float(sigmas[0]) == 1.0 and float(sigmas[-1]) == 0.0
    g = diffusion_coefficient(torch.tensor([1.0]), 0.7, float(sigmas[1]))
    assert float(g) == pytest.approx(0.7 * math.sqrt(1 / (1 - float(sigmas[1]))), rel=1e-6)  # σ_1 replaces σ in 1 − σ
    x, v = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    for k in (0, 9):  # σ = 1, and the last step onto σ = 0
        mean, std = sde_step_stats(x, v, sigmas[k].expand(2), sigmas[k + 1].expand(2), 0.7, float(sigmas[1]))
        assert torch.isfinite(mean).all() and torch.isfinite(std).all() and bool((std > 0).all())
        assert torch.isfinite(step_logprob(mean + std.view(-1, 1, 1, 1) * x, mean, std)).all()


def test_trained_step_selection_first_in_order_or_random_per_sample():
    first = trained_steps(10, 0.99, "first", 3)
    assert first.tolist() == [list(range(9))] * 3  # ⌊0.99·10⌋ = 9, the last step never trained
    gen = torch.Generator().manual_seed(0)
    rand = trained_steps(25, 0.6, "random", 4, gen)
    assert rand.shape == (4, 15)  # ⌊0.6·25⌋ = 15
    assert all(len(set(r)) == 15 and min(r) >= 0 and max(r) < 25 for r in rand.tolist())
    assert len({tuple(sorted(r)) for r in rand.tolist()}) > 1  # a fresh subset per sample
