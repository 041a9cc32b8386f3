"""Reward combiners: fixed and per-objective-normalised sums, hypervolume and mirror-descent weighting."""

import math

import pytest
import torch

from grpokit.registry import call_with

from grpokit.algos.advantages import grpo_advantage
from grpokit.rewards.combiners import (
    COMBINERS,
    HypervolumeState,
    MirrorDescentState,
    gradient_influence,
    group_zscore,
    hypervolume,
    new_combiner_state,
)

NAMES = ["fixed", "normalize_sum", "hypervolume", "mirror_descent"]


def test_registry_holds_exactly_the_tested_combiners():
    assert COMBINERS.names() == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_combiner_contract(name):
    scores = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, float("nan")], [0.0, 0.0]])  # [B=4, K=2]
    group_ids = torch.tensor([0, 0, 1, 1])
    fn = COMBINERS.get(name)
    reward, state, metrics = call_with(fn, scores, group_ids, context=dict(weights=torch.tensor([0.5, 0.5]), unrelated_context=1))
    assert reward.shape == (4,) and reward.dtype == torch.float32 and torch.isfinite(reward).all()
    assert "combiner/w0" in metrics and COMBINERS.summary(name)
    assert (state is None) == (new_combiner_state(name) is None)
    with pytest.raises(ValueError, match="one weight per reward"):
        COMBINERS.get(name)(scores, group_ids, weights=torch.ones(3))


# ----------------------------------------------------------------------------- fixed / normalize_sum


def test_fixed_crpo_weights():
    # CRPO r = 10 r_acc + r_fmt + 0.5 r_lang: row 0 = (1, 1.5, 0.9) -> 10 + 1.5 + 0.45 = 11.95;
    # row 1 swaps a correct answer for a wrong one -> 0 + 1.5 + 0.45 = 1.95 (exactly 10 less)
    scores = torch.tensor([[1.0, 1.5, 0.9], [0.0, 1.5, 0.9], [float("nan"), 1.0, 0.0]])
    reward, state, _ = COMBINERS.get("fixed")(scores, torch.tensor([0, 0, 1]), weights=[10.0, 1.0, 0.5])
    assert reward.tolist() == pytest.approx([11.95, 1.95, 1.0])  # NaN counts as 0 (row 2: 0 + 1 + 0)
    assert state is None


def test_group_zscore_hand_values():
    # group 0 = rows 0, 1, 2 with objective 0 = (1, 2, 3): mean 2, unbiased std 1 -> (-1, 0, 1);
    # objective 1 constant (5, 5, 5) -> 0; group 1 = rows 3, 4 with (0, nan) / (4, 2): one valid
    # entry -> 0, and (4 - 3)/std(4, 2) = 1/sqrt(2)
    scores = torch.tensor([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0], [0.0, 4.0], [float("nan"), 2.0]])
    z = group_zscore(scores, torch.tensor([7, 7, 7, 3, 3]), std_eps=0.0)
    expected = [[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1 / math.sqrt(2)], [0.0, -1 / math.sqrt(2)]]
    assert z.tolist() == [pytest.approx(row) for row in expected]
    # constant values whose float mean is inexact still give exactly 0
    assert group_zscore(torch.full((3, 1), 0.1), torch.zeros(3, dtype=torch.long)).abs().max() == 0


def test_normalize_sum_restores_a_weight_that_group_normalisation_cancels():
    # group 0: only objective 0 varies (1, 0); group 1: only objective 1 varies (1, 0).
    scores = torch.tensor([[1.0, 0.5], [0.0, 0.5], [1.0, 1.0], [1.0, 0.0]])
    ids = torch.tensor([0, 0, 1, 1])
    plain = {}
    for w in ([0.8, 0.2], [0.2, 0.8]):
        reward, _, _ = COMBINERS.get("fixed")(scores, ids, weights=w)
        plain[tuple(w)], _ = grpo_advantage(reward, ids)
    # plain sum + GRPO z-score: +-1/sqrt(2) in both groups whatever the weights (w cancelled)
    for adv in plain.values():
        assert adv.tolist() == pytest.approx([0.70710, -0.70710, 0.70710, -0.70710], abs=1e-4)
    # per-objective z-scores (+-1/sqrt(2)) weighted after: group 0 -> +-0.8/sqrt(2) = +-0.5657,
    # group 1 -> +-0.2/sqrt(2) = +-0.1414; a mean-only advantage keeps the 4:1 ratio of the weights
    reward, _, _ = COMBINERS.get("normalize_sum")(scores, ids, weights=[0.8, 0.2], std_eps=0.0)
    adv, _ = grpo_advantage(reward, ids, scale="none")
    assert adv.tolist() == pytest.approx([0.565685, -0.565685, 0.141421, -0.141421], abs=1e-5)


def test_weight_scaling_shift_and_one_hot():
    # Safe multi-objective GRPO (arXiv 2503.21819), R = sum_k w_k f_k: scaling all weights by c > 0, or
    # shifting one aspect, leaves GRPO advantages unchanged
    gen = torch.Generator().manual_seed(0)
    scores = torch.rand(8, 4, generator=gen)
    ids = torch.arange(8) // 4
    w = torch.tensor([0.25, 0.25, 0.25, 0.25])
    for name in ("fixed", "normalize_sum"):
        base, _ = grpo_advantage(COMBINERS.get(name)(scores, ids, weights=w)[0], ids)
        scaled, _ = grpo_advantage(COMBINERS.get(name)(scores, ids, weights=3 * w)[0], ids)
        shifted_scores = scores + torch.tensor([0.0, 0.0, 0.0, 2.0])
        shifted, _ = grpo_advantage(COMBINERS.get(name)(shifted_scores, ids, weights=w)[0], ids)
        assert torch.allclose(base, scaled, atol=1e-5) and torch.allclose(base, shifted, atol=1e-5)
        # w = one-hot(safety = aspect 3) -> the advantages of the safety score alone
        one_hot, _ = grpo_advantage(COMBINERS.get(name)(scores, ids, weights=[0.0, 0.0, 0.0, 1.0])[0], ids)
        alone, _ = grpo_advantage(scores[:, 3].contiguous(), ids)
        assert torch.allclose(one_hot, alone, atol=1e-5)


# ----------------------------------------------------------------------------- hypervolume


def test_hypervolume_exact_values():
    assert hypervolume([[1, 2], [2, 1]], [0, 0]) == pytest.approx(3.0)  # 2 + 2 - 1 overlap
    assert hypervolume([[1, 2], [2, 1], [1.5, 1.5]], [0, 0]) == pytest.approx(3.25)  # ΔHV = 0.25
    assert hypervolume([[1, 2, 3]], [0, 0, 0]) == pytest.approx(6.0)
    assert hypervolume([[2, 1, 1], [1, 2, 1]], [0, 0, 0]) == pytest.approx(3.0)  # 2 + 2 - 1
    assert hypervolume([[3, -1]], [0, 0]) == 0.0  # worse than the reference in one coordinate
    assert hypervolume([], [0, 0]) == 0.0


def test_hypervolume_meta_reward_sequence():
    # user weights fixed at (0.75, 0.25); rows score (1, 0) and (0, 1) -> base reward (0.75, 0.25)
    scores, ids, w = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 0]), [0.75, 0.25]
    fn = COMBINERS.get("hypervolume")
    reward, state, m = fn(scores, ids, weights=w)  # before any validation: m = 1
    assert reward.tolist() == [0.75, 0.25] and state.multiplier == 1.0
    steps = [
        ([0.0, 0.0], 0.0, 1.0),  # initial model: becomes the reference, m stays 1
        ([1.0, 2.0], 2.0, 0.5 + 1.5 * math.tanh(2.0)),  # HV 2 -> m = 0.5 + 1.5 * 0.96403 = 1.94604
        ([2.0, 1.0], 1.0, 0.5 + 1.5 * math.tanh(1.0)),  # HV 3 - 2 = 1 -> m = 1.64239
        ([1.5, 1.5], 0.25, 0.5 + 1.5 * math.tanh(0.25)),  # 3.25 - 3 -> m = 0.86738
        ([1.0, 1.0], 0.0, 0.5),  # dominated: ΔHV = 0 -> m(0) = 0.5, not added to the buffer
    ]
    for point, delta, multiplier in steps:
        reward, state, m = fn(scores, ids, weights=w, state=state, validation=point)
        assert state.delta_hv == pytest.approx(delta) and state.multiplier == pytest.approx(multiplier)
        assert reward.tolist() == pytest.approx([0.75 * multiplier, 0.25 * multiplier])
    assert state.buffer.shape == (4, 2)  # reference + 3 improving points
    assert float(m["combiner/meta_reward"]) == pytest.approx(0.5)
    huge = HypervolumeState()
    huge.observe([0, 0])
    huge.observe([100, 100])
    assert huge.multiplier == pytest.approx(2.0)  # m(large) -> 2


def test_hypervolume_minimised_metrics_and_checkpoint():
    state = HypervolumeState()
    # length is minimised: (acc, len) = (0, 0) -> (1, -2) improves both: maximisation coords (1, 2) -> ΔHV 2
    state.observe([0.0, 0.0], maximize=[True, False])
    state.observe([1.0, -2.0])
    assert state.delta_hv == pytest.approx(2.0)
    restored = new_combiner_state("hypervolume")
    restored.load_state_dict(state.state_dict())
    for s in (state, restored):
        s.observe([2.0, -1.0])
    assert restored.multiplier == state.multiplier and torch.equal(restored.buffer, state.buffer)


def test_meta_reward_cancels_under_grpo_std_but_not_with_normalize_and_mean_only():
    scores = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.3, 1.0], [0.1, 0.0]])
    ids = torch.tensor([0, 0, 1, 1])
    state = HypervolumeState()
    state.observe([0, 0])
    state.observe([1, 2])  # m = 1.94604
    unscaled, _ = grpo_advantage(COMBINERS.get("fixed")(scores, ids, weights=[0.5, 0.5])[0], ids)
    scaled, _ = grpo_advantage(COMBINERS.get("hypervolume")(scores, ids, weights=[0.5, 0.5], state=state)[0], ids)
    assert torch.allclose(unscaled, scaled, atol=1e-5)  # m cancels in the z-score (up to eps)
    norm = COMBINERS.get("normalize_sum")(scores, ids, weights=[0.5, 0.5])[0]
    kept = COMBINERS.get("hypervolume")(scores, ids, weights=[0.5, 0.5], state=state, normalize=True)[0]
    a, _ = grpo_advantage(norm, ids, scale="none")
    b, _ = grpo_advantage(kept, ids, scale="none")
    assert torch.allclose(b, state.multiplier * a, atol=1e-5)  # m survives a mean-only advantage


# ----------------------------------------------------------------------------- mirror descent


def test_mirror_descent_toy_update():
    # g1 = (1, 0), g2 = (1, 1): sum (2, 1) -> I = (<g1,sum>, <g2,sum>) = (2, 3).
    # lr / rho = 1e-6 / 1e-5 = 0.1: log w + (0.2, 0.3) -> w2 / w1 = e^0.1 -> w = (0.475021, 0.524979)
    grads = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert gradient_influence(grads).tolist() == [2.0, 3.0]
    scores = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    reward, state, metrics = COMBINERS.get("mirror_descent")(
        scores, torch.tensor([0, 0]), weights=[0.5, 0.5], objective_grads=grads, lr=1e-6, rho=1e-5
    )
    assert state.weights.tolist() == pytest.approx([0.475021, 0.524979], abs=1e-6)
    assert reward.tolist() == pytest.approx([0.475021, 0.524979], abs=1e-6)  # this step uses the new weights
    assert float(metrics["combiner/w1"]) == pytest.approx(0.524979, abs=1e-6) and state.updates == 1


def test_mirror_descent_properties_and_accumulation():
    fn = COMBINERS.get("mirror_descent")
    scores, ids = torch.rand(4, 3), torch.tensor([0, 0, 1, 1])
    # I ∝ (1, 1, 1) leaves the weights unchanged; weights given unnormalised are put on the simplex
    _, state, _ = fn(scores, ids, weights=[1.0, 2.0, 1.0], influence=[5.0, 5.0, 5.0])
    assert state.weights.tolist() == pytest.approx([0.25, 0.5, 0.25])
    # accumulation over 2 calls: no move after the first, then the mean influence (0, 0, 2) -> step 0.2 on w3
    _, state, _ = fn(scores, ids, weights=[1.0, 1.0, 1.0], influence=[0.0, 0.0, 4.0], accumulation_steps=2)
    assert state.weights.tolist() == pytest.approx([1 / 3] * 3) and state.accumulated == 1
    restored = new_combiner_state("mirror_descent")
    restored.load_state_dict(state.state_dict())
    _, state, _ = fn(scores, ids, weights=[1.0] * 3, state=restored, influence=[0.0] * 3, accumulation_steps=2)
    e = math.exp(0.2)  # softmax(log(1/3) + (0, 0, 0.2)) = (1, 1, e^0.2) / (2 + e^0.2)
    assert state.weights.tolist() == pytest.approx([1 / (2 + e), 1 / (2 + e), e / (2 + e)])
    assert state.accumulated == 0 and float(state.weights.sum()) == pytest.approx(1.0) and (state.weights > 0).all()
    # no gradient information: weights stay
    _, same, _ = fn(scores, ids, weights=[1.0, 1.0, 1.0], state=state)
    assert torch.equal(same.weights, state.weights)
    with pytest.raises(ValueError, match="> 0"):
        fn(scores, ids, weights=[1.0, 0.0, 1.0])
    assert isinstance(MirrorDescentState().state_dict()["weights"], torch.Tensor)
