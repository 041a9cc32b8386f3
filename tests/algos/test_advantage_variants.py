import math

import pytest
import torch

from grpokit.algos.advantages import ADVANTAGES, grpo_advantage
from grpokit.registry import call_with
from grpokit.algos.drpo import DRPOState, cluster_domain, drpo_scale_factors

# ---------------------------------------------------------------- every advantage


def _all_kwargs():
    # one option dict for every estimator: each must ignore what is not its own
    return {
        "scale": "group",
        "std_mode": "unbiased",
        "std_eps": 1e-6,
        "domains": ["a"] * 4 + ["b"] * 4,
        "k": 2,
        "not_an_option": 123,
    }


@pytest.mark.parametrize("name", ADVANTAGES.names())
def test_every_advantage_zero_variance_group_gets_zero_and_groups_sum_to_zero(name):
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv, metrics = call_with(ADVANTAGES.get(name), r, g, context=_all_kwargs())
    assert adv.shape == (8,)
    assert torch.equal(adv[4:], torch.zeros(4))
    assert float(adv[:4].sum()) == pytest.approx(0.0, abs=1e-6)
    assert float(adv[0]) > 0 > float(adv[1])
    assert all(isinstance(v, torch.Tensor) for v in metrics.values())


# ---------------------------------------------------------------- rloo


def test_rloo_hand_computed_non_contiguous_groups():
    # group 0 = rows 0, 2, 4 with rewards [1, 0, 0]:
    #   A_0 = 1 - (0 + 0)/2 = 1;  A_2 = 0 - (1 + 0)/2 = -0.5;  A_4 = -0.5
    # group 1 = rows 1, 3 with rewards [2, 2] -> zero variance -> 0
    r = torch.tensor([1.0, 2.0, 0.0, 2.0, 0.0])
    g = torch.tensor([0, 1, 0, 1, 0])
    adv, m = ADVANTAGES.get("rloo")(r, g)
    assert torch.allclose(adv, torch.tensor([1.0, 0.0, -0.5, 0.0, -0.5]))
    assert float(m["adv/zero_var_frac"]) == pytest.approx(0.5)


def test_rloo_g2_is_plus_minus_difference_and_std_option():
    # G = 2: A = ±(r1 - r2) = ±(3 - 1)
    adv, _ = ADVANTAGES.get("rloo")(torch.tensor([3.0, 1.0]), torch.tensor([0, 0]))
    assert torch.allclose(adv, torch.tensor([2.0, -2.0]))
    # [1, 0, 0]: unbiased std = sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3); A / std
    adv, _ = ADVANTAGES.get("rloo")(torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long),
                                    divide_by_std=True, std_eps=0.0)
    s = (1 / 3) ** 0.5
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5]) / s, atol=1e-6)


def test_rloo_exact_zero_for_inexact_float_group_and_singleton_rule():
    # mean of [0.1]*3 is 0.10000000000000002 in floating point; the advantage must still be 0
    adv, _ = ADVANTAGES.get("rloo")(torch.full((3,), 0.1, dtype=torch.float64), torch.zeros(3, dtype=torch.long))
    assert torch.equal(adv, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="group_size"):
        ADVANTAGES.get("rloo")(torch.tensor([1.0, 0.5]), torch.tensor([0, 1]))
    adv, _ = ADVANTAGES.get("rloo")(torch.tensor([1.0, 0.5]), torch.tensor([0, 1]), allow_singleton_groups=True)
    assert torch.allclose(adv, torch.tensor([1.0, 0.5]))  # verl: a singleton keeps its raw reward


# ---------------------------------------------------------------- reinforce_pp_baseline


def test_reinforce_pp_baseline_hand_computed_sequence_whitening():
    # centred: group 0 [1, 0] -> [0.5, -0.5]; group 1 [3, 1] -> [1, -1]
    # batch mean 0; unbiased var = (0.25 + 0.25 + 1 + 1) / 3 = 2.5/3
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    adv, _ = ADVANTAGES.get("reinforce_pp_baseline")(r, g, std_eps=0.0)
    expected = torch.tensor([0.5, -0.5, 1.0, -1.0]) / (2.5 / 3) ** 0.5
    assert torch.allclose(adv, expected, atol=1e-6)
    # unlike GRPO (±0.7071 in both groups) the 1:2 scale between the groups survives
    assert float(adv[2] / adv[0]) == pytest.approx(2.0)
    assert float(adv.std()) == pytest.approx(1.0, abs=1e-6)


def test_reinforce_pp_baseline_token_whitening():
    # same centred values c = [0.5, -0.5, 1, -1] weighted by lengths [1, 3, 2, 2] (n = 8 tokens):
    # mean = (0.5 - 1.5 + 2 - 2)/8 = -0.125; deviations [0.625, -0.375, 1.125, -0.875]
    # sum w d^2 = 0.390625 + 3*0.140625 + 2*1.265625 + 2*0.765625 = 4.875; unbiased var = 4.875/7
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    lengths = torch.tensor([1, 3, 2, 2])
    mask = (torch.arange(4)[None, :] < lengths[:, None]).float()
    adv, _ = ADVANTAGES.get("reinforce_pp_baseline")(r, g, whiten="token", mask=mask, std_eps=0.0)
    expected = torch.tensor([0.625, -0.375, 1.125, -0.875]) / (4.875 / 7) ** 0.5
    assert torch.allclose(adv, expected, atol=1e-6)
    with pytest.raises(ValueError, match="mask"):
        ADVANTAGES.get("reinforce_pp_baseline")(r, g, whiten="token")


# ---------------------------------------------------------------- passk


def test_passk_hand_computed_k2():
    # N = 4, N_neg = 3, k = 2: R̄ = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5, σ = sqrt(0.25) = 0.5
    # correct: (1 - 0.5)/0.5 = 1; incorrect: (0.5 - C(2,1)/C(3,1))/0.5 = (0.5 - 2/3)/0.5 = -1/3
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    adv, m = ADVANTAGES.get("passk")(r, torch.zeros(4, dtype=torch.long), k=2)
    assert torch.allclose(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]), atol=1e-6)
    assert float(m["passk/group_reward_mean"]) == pytest.approx(0.5)


def test_passk_k1_is_grpo_population_and_groups_sum_to_zero():
    torch.manual_seed(0)
    r = (torch.rand(24) > 0.5).float()
    r[0], r[1] = 1.0, 0.0  # make group 0 non-degenerate
    g = torch.arange(3).repeat_interleave(8)
    adv1, _ = ADVANTAGES.get("passk")(r, g, k=1)
    ref, _ = grpo_advantage(r, g, std_mode="population", std_eps=0.0)
    assert torch.allclose(adv1, ref, atol=1e-5)
    adv3, _ = ADVANTAGES.get("passk")(r, g, k=3)
    for k in range(3):
        assert float(adv3[g == k].sum()) == pytest.approx(0.0, abs=1e-5)


def test_passk_saturated_groups_are_zero_and_small_groups_raise():
    # [1, 1, 1, 0] with k = 2: only 1 incorrect < k, every k-subset passes -> σ = 0 -> 0
    adv, _ = ADVANTAGES.get("passk")(torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.zeros(4, dtype=torch.long), k=2)
    assert torch.equal(adv, torch.zeros(4))
    with pytest.raises(ValueError, match="group_size"):
        ADVANTAGES.get("passk")(torch.tensor([1.0, 0.0]), torch.zeros(2, dtype=torch.long), k=4)


# ---------------------------------------------------------------- drpo


def _two_domain_batch():
    # three questions with G = 2 rollouts [1, 0]; questions 0, 1 in domain "a", question 2 in "b"
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 1, 1, 2, 2])
    return r, g, ["a", "a", "a", "a", "b", "b"]


def test_drpo_hand_computed_two_domains():
    # Â = ±0.5 / std([1, 0]) = ±0.5 / sqrt(0.5) = ±0.70711
    # domain a: V_a = [[1,0],[1,0]] -> 1 unique row -> k = 1, N_d = N_c = 2, μ_c = μ_d = 0.5
    #   f_a = sqrt(2)*0.5 * sqrt(2)*0.5 = 0.5     (= N_d μ_c²)
    # domain b: N_d = N_c = 1 -> f_b = 1 * 0.25 = 0.25   (rarer domain, twice the weight)
    # A' = [±1.41421 (x2), ±2.82843]; sum A'^2 = 4*2 + 2*8 = 24, batch mean 0 -> std = sqrt(24/5)
    r, g, d = _two_domain_batch()
    state = DRPOState()
    adv, m = ADVANTAGES.get("drpo")(r, g, domains=d, state=state, std_eps=0.0)
    a_prime = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0, -2.0]) * math.sqrt(2.0)
    assert torch.allclose(adv, a_prime / math.sqrt(24 / 5), atol=1e-6)
    assert float(m["drpo/factor_min"]) == pytest.approx(0.25)
    assert state.history["a"].shape == (2, 2) and state.history["b"].shape == (1, 2)


def test_drpo_state_accumulates_and_round_trips():
    r, g, d = _two_domain_batch()
    state = DRPOState()
    first, _ = ADVANTAGES.get("drpo")(r, g, domains=d, state=state, std_eps=0.0)
    # second step: N_a = 4, N_b = 2 -> f_a = 4*0.25 = 1, f_b = 2*0.25 = 0.5, ratio still 2,
    # so after the batch re-standardisation the advantages are unchanged
    second, m = ADVANTAGES.get("drpo")(r, g, domains=d, state=state, std_eps=0.0)
    assert torch.allclose(first, second, atol=1e-6)
    assert float(m["drpo/factor_max"]) == pytest.approx(1.0)
    assert state.history["a"].shape == (4, 2)
    restored = DRPOState()
    restored.load_state_dict(state.state_dict())
    a, _ = ADVANTAGES.get("drpo")(r, g, domains=d, state=state)
    b, _ = ADVANTAGES.get("drpo")(r, g, domains=d, state=restored)
    assert torch.equal(a, b)


def test_drpo_domains_as_long_tensor_and_max_history():
    r, g, _ = _two_domain_batch()
    state = DRPOState()
    for _ in range(3):
        ADVANTAGES.get("drpo")(r, g, domains=torch.tensor([0, 0, 0, 0, 1, 1]), state=state, max_history=3)
    assert set(state.history) == {"0", "1"}
    assert state.history["0"].shape == (3, 2) and state.history["1"].shape == (3, 2)


def test_drpo_replication_law():
    # domain y's history is domain x's duplicated 4x: N_d and every N_c are 4x, μ_d unchanged,
    # so every factor is 4x (2x from sqrt(N_d), 2x from sqrt(N_c)).
    # x: rows [1,1,1,0] x2 and [0,0,0,1] x1 -> 2 unique rows -> k = 2;
    #   μ_c = 0.75 (N_c 2), 0.25 (N_c 1); μ_d = (0.75/2 + 0.25/1) / (1/2 + 1) = 0.41667
    #   T_x = sqrt(3) * 0.41667 = 0.72169; f = T_x*sqrt(2)*0.75 = 0.76547 and T_x*1*0.25 = 0.18042
    x = torch.tensor([[1.0, 1, 1, 0], [1.0, 1, 1, 0], [0.0, 0, 0, 1]])
    vectors = torch.cat([x, x.repeat(4, 1)])
    domains = ["x"] * 3 + ["y"] * 12
    f, _ = drpo_scale_factors(vectors, domains, DRPOState(), eps=0.0)
    t_x = math.sqrt(3) * (0.75 / 2 + 0.25) / 1.5
    assert torch.allclose(f[:3], torch.tensor([t_x * math.sqrt(2) * 0.75] * 2 + [t_x * 0.25], dtype=f.dtype))
    assert torch.allclose(f[3:], 4 * f[:3].repeat(4))


def test_drpo_single_cluster_domain_and_elbow():
    # one unique row [1,0,1,1] five times: k = 1, μ_c = 0.75, f = N_d μ_c² = 5 * 0.5625 = 2.8125
    f, _ = drpo_scale_factors(torch.tensor([[1.0, 0, 1, 1]] * 5), ["z"] * 5, DRPOState())
    assert torch.allclose(f, torch.full((5,), 2.8125, dtype=f.dtype))
    # three well-separated blobs in R^2 -> the elbow picks k = 3 (inertia drops to ~0 at k = 3)
    pts = torch.tensor([[0.0, 0], [0.01, 0], [1.0, 1], [1.0, 0.99], [0.0, 1], [0.01, 1], [0.0, 0.99], [1, 1.01]],
                       dtype=torch.float64)
    cl = cluster_domain(pts, k_max=10)
    assert cl.sizes.shape[0] == 3 and sorted(cl.sizes.tolist()) == [2.0, 3.0, 3.0]


def test_drpo_batch_std_is_one_and_zero_reward_cluster_is_finite():
    torch.manual_seed(1)
    r = torch.rand(16)
    g = torch.arange(4).repeat_interleave(4)
    adv, _ = ADVANTAGES.get("drpo")(r, g, domains=["a"] * 8 + ["b"] * 8)
    assert float(adv.std()) == pytest.approx(1.0, abs=1e-5)
    # an all-zero group makes μ_c = 0: the factor is clamped to eps and its advantage stays 0
    adv, _ = ADVANTAGES.get("drpo")(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1]),
                                    domains=["a", "a", "b", "b"])
    assert torch.isfinite(adv).all() and torch.equal(adv[2:], torch.zeros(2))


def test_drpo_input_errors():
    r, g, d = _two_domain_batch()
    with pytest.raises(ValueError, match="domains"):
        ADVANTAGES.get("drpo")(r, g)
    with pytest.raises(ValueError, match="different domains"):
        ADVANTAGES.get("drpo")(r, g, domains=["a", "b", "a", "a", "b", "b"])
    with pytest.raises(ValueError, match="same number"):
        # groups of 3 and 2 completions
        ADVANTAGES.get("drpo")(r[:5], torch.tensor([0, 0, 0, 1, 1]), domains=["a"] * 5)
    state = DRPOState()
    ADVANTAGES.get("drpo")(r, g, domains=d, state=state)
    with pytest.raises(ValueError, match="group_size"):
        ADVANTAGES.get("drpo")(torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long),
                               domains=["a"] * 3, state=state)
