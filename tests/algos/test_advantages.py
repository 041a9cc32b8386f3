import pytest
import torch

from grpokit.algos.advantages import ADVANTAGES, grpo_advantage


def test_grpo_hand_computed_unbiased():
    # group 0: rewards [1, 0, 0, 1] -> mean 0.5, unbiased std = sqrt(4 * 0.25 / 3) = 0.57735
    # group 1: rewards [1, 1, 1, 1] -> zero variance -> advantage 0
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv, m = ADVANTAGES.get("grpo")(r, g, std_eps=0.0)
    expected = 0.5 / (1.0 / 3.0) ** 0.5  # 0.8660
    assert torch.allclose(adv[:4], torch.tensor([expected, -expected, -expected, expected]), atol=1e-6)
    assert torch.equal(adv[4:], torch.zeros(4))
    assert float(m["adv/zero_var_frac"]) == pytest.approx(0.5)


def test_grpo_population_unit_rms_and_zero_sum():
    torch.manual_seed(0)
    r = torch.rand(12)
    g = torch.arange(3).repeat_interleave(4)
    adv, _ = grpo_advantage(r, g, std_mode="population", std_eps=0.0)
    for k in range(3):
        a = adv[g == k]
        assert float(a.sum()) == pytest.approx(0.0, abs=1e-6)
        assert float((a**2).mean().sqrt()) == pytest.approx(1.0, abs=1e-5)


def test_grpo_scale_none_and_batch():
    r = torch.tensor([2.0, 0.0, 4.0, 0.0])
    g = torch.tensor([0, 0, 1, 1])
    adv, _ = grpo_advantage(r, g, scale="none")
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 2.0, -2.0]))
    adv_b, _ = grpo_advantage(r, g, scale="batch", std_eps=0.0)
    # batch unbiased std of [2, 0, 4, 0]: mean 1.5, ss = 0.25+2.25+6.25+2.25 = 11, /3 -> sqrt(11/3)
    s = (11 / 3) ** 0.5
    assert torch.allclose(adv_b, torch.tensor([1.0, -1.0, 2.0, -2.0]) / s, atol=1e-6)


def test_dr_grpo_is_mean_centred_and_scales_linearly():
    r = torch.tensor([3.0, 1.0, 0.0, 0.0])
    g = torch.tensor([0, 0, 1, 1])
    adv, _ = ADVANTAGES.get("dr_grpo")(r, g)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0.0, 0.0]))
    adv2, _ = ADVANTAGES.get("dr_grpo")(5 * r, g)
    assert torch.allclose(adv2, 5 * adv)


def test_singleton_group_raises_unless_allowed():
    r = torch.tensor([1.0, 0.5])
    g = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="group_size"):
        grpo_advantage(r, g)
    adv, _ = grpo_advantage(r, g, allow_singleton_groups=True, std_eps=0.0)
    assert torch.allclose(adv, r)  # verl convention: mean 0, std 1


def test_grpo_zero_variance_is_exact_for_non_representable_rewards():
    # 0.1 is not exact in binary: the float mean of [0.1, 0.1, 0.1] differs from 0.1, but the
    # group is still constant and must give exactly 0 (and be counted).
    r = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 0.0])
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    adv, m = ADVANTAGES.get("grpo")(r, g)
    assert torch.equal(adv[:3], torch.zeros(3))
    assert float(m["adv/zero_var_frac"]) == pytest.approx(0.5)
