import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.kl import KL_ESTIMATORS
from grpokit.registry import call_with


def toy():
    # seq 1: length 1, loss 1; seq 2: length 3, losses 0 (hand toy)
    loss = torch.tensor([[1.0, 9.0, 9.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    return loss, mask


def test_aggregation_toy_values():
    loss, mask = toy()
    assert float(AGGREGATIONS.get("seq_mean_token_mean")(loss, mask)) == pytest.approx(0.5)
    assert float(AGGREGATIONS.get("token_mean")(loss, mask)) == pytest.approx(0.25)
    assert float(AGGREGATIONS.get("seq_mean_token_sum")(loss, mask)) == pytest.approx(0.5)
    # constant: sum 1 / (B=2 * L_max=4)
    assert float(AGGREGATIONS.get("constant")(loss, mask, max_len=4)) == pytest.approx(0.125)


def test_constant_needs_max_len():
    loss, mask = toy()
    with pytest.raises(ValueError, match="max_len"):
        AGGREGATIONS.get("constant")(loss, mask)


@pytest.mark.parametrize("name", AGGREGATIONS.names())
def test_aggregation_split_sums_to_whole(name):
    torch.manual_seed(0)
    loss = torch.rand(6, 5)
    mask = (torch.rand(6, 5) > 0.3).float()
    mask[:, 0] = 1
    whole = call_with(AGGREGATIONS.get(name), loss, mask, context=dict(max_len=5))
    kw = dict(num_seqs=6.0, num_tokens=float(mask.sum()), max_len=5)
    parts = sum(call_with(AGGREGATIONS.get(name), loss[i : i + 2], mask[i : i + 2], context=kw) for i in range(0, 6, 2))
    assert float(parts) == pytest.approx(float(whole), abs=1e-6)


@pytest.mark.parametrize("name", AGGREGATIONS.names())
def test_masked_tokens_never_change_aggregate(name):
    loss, mask = toy()
    changed = loss.clone()
    changed[mask == 0] = 1e6
    f = AGGREGATIONS.get(name)
    ctx = dict(max_len=4)
    assert float(call_with(f, changed, mask, context=ctx)) == pytest.approx(float(call_with(f, loss, mask, context=ctx)))


def test_kl_hand_values():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    # d = ref - logp = [-0.5, 1.0]
    assert torch.allclose(KL_ESTIMATORS.get("k1")(logp, ref), torch.tensor([[0.5, -1.0]]))
    assert torch.allclose(KL_ESTIMATORS.get("k2")(logp, ref), torch.tensor([[0.125, 0.5]]))
    e = torch.exp(torch.tensor([-0.5, 1.0]))
    k3 = torch.stack([e[0] + 0.5 - 1, e[1] - 1.0 - 1])
    assert torch.allclose(KL_ESTIMATORS.get("k3")(logp, ref), k3.unsqueeze(0))


def test_k3_nonnegative_and_zero_grad_at_ref():
    torch.manual_seed(0)
    logp = torch.randn(4, 7)
    ref = torch.randn(4, 7)
    assert bool((KL_ESTIMATORS.get("k3")(logp, ref) >= 0).all())
    x = ref.clone().requires_grad_(True)
    k3 = KL_ESTIMATORS.get("k3")(x, ref)
    k3.sum().backward()
    assert float(k3.detach().abs().max()) == 0.0
    assert float(x.grad.abs().max()) == 0.0


def test_k3_clamp_behind_flag():
    logp = torch.tensor([[0.0]])
    ref = torch.tensor([[50.0]])
    assert float(KL_ESTIMATORS.get("k3")(logp, ref, clamp=True)) == pytest.approx(10.0)
    assert float(KL_ESTIMATORS.get("k3")(logp, ref)) > 1e20


def test_kl_none_is_zero_and_needs_no_reference():
    f = KL_ESTIMATORS.get("none")
    assert torch.equal(f(torch.randn(2, 3), None), torch.zeros(2, 3))
    assert KL_ESTIMATORS.spec("none").inputs == () and KL_ESTIMATORS.spec("k3").inputs == ("ref_logp",)
