"""Offline objectives (sft, dpo, kto, humanline_dpo, humanline_kto): hand-computed values and gradients."""

import math

import pytest
import torch

from grpokit.algos.offline import OFFLINE_LOSSES, OfflineInputs, kto_reference_point, sequence_log_ratios
from grpokit.registry import call_with


def t(rows, grad=False):
    return torch.tensor(rows, dtype=torch.float64, requires_grad=grad)


def run(name, inp, beta=0.1, num_rows=1.0, num_tokens=1.0, **options):
    return call_with(OFFLINE_LOSSES.get(name), inp, options=options, context=dict(beta=beta, num_rows=num_rows, num_tokens=num_tokens))


def test_sft_is_token_mean_nll_over_the_step():
    logp = t([[-1.0, -2.0, -9.0], [-0.5, -9.0, -9.0]], grad=True)  # -9: padding, masked out
    mask = t([[1, 1, 0], [1, 0, 0]])
    loss, metrics = run("sft", OfflineInputs(logp=logp, mask=mask), num_tokens=3.0)
    # (1 + 2 + 0.5) / 3 tokens = 1.1666...
    assert loss.item() == pytest.approx(3.5 / 3, abs=1e-12)
    loss.backward()
    assert torch.allclose(logp.grad, -mask / 3)  # dL/dlogp = -m / N; prompt and pad positions get 0
    # normalised by the step's tokens: two micro-batches of one row each sum to the full loss
    a, _ = run("sft", OfflineInputs(logp=logp[:1], mask=mask[:1]), num_tokens=3.0)
    b, _ = run("sft", OfflineInputs(logp=logp[1:], mask=mask[1:]), num_tokens=3.0)
    assert (a + b).item() == pytest.approx(loss.item(), abs=1e-12)
    assert metrics["nll"].item() == pytest.approx(3.5 / 3, abs=1e-12)


def dpo_inputs():
    # rows 0-1 chosen, 2-3 rejected (pairs (0, 2) and (1, 3)); the second chosen has one token
    logp = t([[-1.0, -1.0], [-2.0, 0.0], [-3.0, -1.0], [-0.5, -0.5]], grad=True)
    ref = t([[-1.5, -1.2], [-1.0, 0.0], [-2.0, -1.0], [-1.0, -1.0]])
    mask = t([[1, 1], [1, 0], [1, 1], [1, 1]])
    return OfflineInputs(logp=logp, mask=mask, ref_logp=ref)


def test_dpo_hand_computed():
    inp = dpo_inputs()
    loss, metrics = run("dpo", inp, beta=0.1, num_rows=2.0)
    # R = sum_t (logp - ref): chosen 0.5 + 0.2 = 0.7, -1.0; rejected -1.0 + 0 = -1.0, 0.5 + 0.5 = 1.0
    # pair 1: -log sigmoid(0.1 (0.7 + 1.0)) = log(1 + e^-0.17) = 0.6117553
    # pair 2: -log sigmoid(0.1 (-1.0 - 1.0)) = log(1 + e^0.2) = 0.7981389;  mean over 2 pairs = 0.7049471
    assert loss.item() == pytest.approx(0.7049471041261074, abs=1e-9)
    loss.backward()
    # dL/dlogp of a chosen token = -beta sigmoid(-margin) / n: pair 1 -0.05 sigmoid(-0.17) = -0.0228801,
    # pair 2 -0.05 sigmoid(0.2) = -0.0274917; rejected tokens the opposite; the pad token 0
    g1, g2 = 0.02288010296128245, 0.0274916998656239
    expected = torch.tensor([[-g1, -g1], [-g2, 0.0], [g1, g1], [g2, g2]], dtype=torch.float64)
    assert torch.allclose(inp.logp.grad, expected, atol=1e-12)
    assert metrics["rewards/chosen"].item() == pytest.approx(0.1 * (0.7 - 1.0) / 2, abs=1e-12)  # -0.015
    assert metrics["rewards/rejected"].item() == pytest.approx(0.0, abs=1e-12)  # 0.1 (-1 + 1) / 2
    assert metrics["rewards/margins"].item() == pytest.approx((0.17 - 0.2) / 2, abs=1e-12)
    assert metrics["rewards/accuracies"].item() == 0.5  # pair 1 ranked right, pair 2 wrong
    assert "humanline/unclamped_frac" not in metrics


def test_dpo_at_the_reference_is_log_2():
    # policy = reference: every margin 0, loss log 2 whatever the completions
    logp = t([[-1.0, -3.0], [-2.0, -0.1]])
    loss, _ = run("dpo", OfflineInputs(logp=logp, mask=torch.ones_like(logp), ref_logp=logp.clone()), num_rows=1.0)
    assert loss.item() == pytest.approx(math.log(2), abs=1e-12)


def test_humanline_dpo_clamps_token_log_ratios_with_zero_gradient_outside_the_band():
    logp = t([[0.0, -1.0], [-3.0, -1.0]], grad=True)  # chosen, rejected
    ref = t([[-2.0, -1.0], [-1.0, -1.2]])
    mask = torch.ones(2, 2, dtype=torch.float64)
    loss, metrics = run("humanline_dpo", OfflineInputs(logp=logp, mask=mask, ref_logp=ref), beta=0.1, log_eps_p=-1.0, log_eps_r=1.5)
    # log-ratios chosen [2, 0] -> clamp [1.5, 0], R = 1.5; rejected [-2, 0.2] -> [-1, 0.2], R = -0.8
    # loss = log(1 + exp(-0.1 (1.5 + 0.8))) = log(1 + e^-0.23) = 0.5847452
    assert loss.item() == pytest.approx(0.5847451567037305, abs=1e-9)
    loss.backward()
    g = 0.044275214540144436  # beta sigmoid(-0.23)
    expected = torch.tensor([[0.0, -g], [0.0, g]], dtype=torch.float64)  # clamped tokens: no gradient
    assert torch.allclose(logp.grad, expected, atol=1e-12)
    assert metrics["humanline/unclamped_frac"].item() == pytest.approx(0.5)  # 2 of 4 tokens inside the band


def test_humanline_dpo_with_an_infinite_band_is_dpo():
    a, _ = run("humanline_dpo", dpo_inputs(), num_rows=2.0, log_eps_p=-math.inf, log_eps_r=math.inf)
    b, _ = run("dpo", dpo_inputs(), num_rows=2.0)
    assert a.item() == pytest.approx(b.item(), abs=1e-12)


@pytest.mark.parametrize("name", ["humanline_dpo", "humanline_kto"])
def test_humanline_band_must_hold_zero(name):
    with pytest.raises(ValueError, match="log_eps_p < 0 < log_eps_r"):
        run(name, dpo_inputs(), log_eps_p=0.5, log_eps_r=1.5)


def kto_inputs():
    # R: row 0 (desirable) 0.5 + 0.5 = 1.0; row 1 (undesirable) -1.0; row 2 (desirable) 0.2
    logp = t([[-1.0, -1.0], [-2.0, 0.0], [-1.0, 0.0]], grad=True)
    ref = t([[-1.5, -1.5], [-1.0, 0.0], [-1.2, 0.0]])
    mask = t([[1, 1], [1, 0], [1, 0]])
    # mismatched pairs: R' = 0.6, -0.3, 0.3 -> mean 0.2
    kl_logp = t([[-0.4, -9.0], [-1.3, -9.0], [-0.7, -9.0]], grad=True)
    kl_ref = t([[-1.0, -9.0], [-1.0, -9.0], [-1.0, -9.0]])
    kl_mask = t([[1, 0], [1, 0], [1, 0]])
    return OfflineInputs(logp=logp, mask=mask, ref_logp=ref, label=t([1, 0, 1]), kl_logp=kl_logp, kl_ref_logp=kl_ref, kl_mask=kl_mask)


def test_kto_hand_computed():
    inp = kto_inputs()
    loss, metrics = run("kto", inp, beta=0.1, num_rows=3.0, desirable_weight=1.0, undesirable_weight=1.5)
    # z_ref = max(0, (0.6 - 0.3 + 0.3) / 3) = 0.2
    # row 0: 1 - sigmoid(0.1 (1.0 - 0.2)) = 1 - sigmoid(0.08) = 0.4800107
    # row 1: 1.5 (1 - sigmoid(0.1 (0.2 + 1.0))) = 1.5 (1 - sigmoid(0.12)) = 0.7050539
    # row 2: 1 - sigmoid(0.1 (0.2 - 0.2)) = 0.5;   mean over 3 rows = 0.5616882
    assert loss.item() == pytest.approx(0.5616881940658535, abs=1e-9)
    assert metrics["kl"].item() == pytest.approx(0.2, abs=1e-12)
    assert metrics["rewards/chosen"].item() == pytest.approx(0.1 * (1.0 + 0.2) / 2, abs=1e-12)  # 0.06
    assert metrics["rewards/rejected"].item() == pytest.approx(-0.1, abs=1e-12)
    loss.backward()
    # row 0 tokens: -beta s(0.08)(1 - s(0.08)) / 3 = -0.0083200; row 1: +1.5 beta s(0.12)(1 - s(0.12)) / 3 = 0.0124551
    assert inp.logp.grad[0].tolist() == pytest.approx([-0.00832001420933815] * 2, abs=1e-12)
    assert inp.logp.grad[1].tolist() == pytest.approx([0.012455107780092504, 0.0], abs=1e-12)
    assert inp.kl_logp.grad is None  # the reference point is detached


def test_kto_reference_point_is_clamped_at_zero():
    kl = t([[-2.0], [-1.0]])
    # mean log-ratio (-1 + 0) / 2 = -0.5 -> max(0, -0.5) = 0
    assert kto_reference_point(kl, t([[-1.0], [-1.0]]), t([[1], [1]])).item() == 0.0


def test_humanline_kto_clamps_the_rows_and_the_reference_point():
    logp = t([[0.0, -1.0], [-3.0, 0.0]], grad=True)
    inp = OfflineInputs(
        logp=logp, mask=t([[1, 1], [1, 0]]), ref_logp=t([[-2.0, -1.0], [-1.0, 0.0]]), label=t([1, 0]),
        kl_logp=t([[2.0], [0.4]]), kl_ref_logp=t([[-1.0], [0.0]]), kl_mask=t([[1], [1]]),
    )
    loss, metrics = run("humanline_kto", inp, beta=0.1, num_rows=2.0, log_eps_p=-1.0, log_eps_r=1.5)
    # R: row 0 clamp([2, 0]) = [1.5, 0] -> 1.5; row 1 clamp(-2) = -1 -> -1
    # z_ref = mean(clamp(3.0) = 1.5, 0.4) = 0.95 (0.5 + 0.4 / 2; unclamped it would be 1.7)
    # ((1 - sigmoid(0.1 (1.5 - 0.95))) + (1 - sigmoid(0.1 (0.95 + 1)))) / 2 = 0.4688287
    assert metrics["kl"].item() == pytest.approx(0.95, abs=1e-12)
    assert loss.item() == pytest.approx(0.46882867825725527, abs=1e-9)
    loss.backward()
    # only row 0's in-band token has a gradient: -beta s(0.055)(1 - s(0.055)) / 2
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -0.012490551638908918, 0.0, 0.0], abs=1e-12)


def test_sequence_log_ratios_sum_only_completion_tokens():
    r, frac = sequence_log_ratios(t([[-1.0, -5.0]]), t([[-2.0, 0.0]]), t([[1, 0]]))
    assert r.tolist() == [1.0] and frac.item() == 1.0  # the masked token's -5 is not counted


def test_every_offline_loss_declares_its_stage():
    assert {n: OFFLINE_LOSSES.spec(n).stage for n in OFFLINE_LOSSES.names()} == {
        "sft": "sft", "dpo": "dpo", "humanline_dpo": "dpo", "kto": "kto", "humanline_kto": "kto",
        "tpsft": "sft",  # EtCon's edit stage (tests/editing)
    }
    assert [n for n in OFFLINE_LOSSES.names() if OFFLINE_LOSSES.spec(n).ref_sync_every] == ["humanline_dpo", "humanline_kto"]
    assert OFFLINE_LOSSES.option_names("dpo") == [] and OFFLINE_LOSSES.option_names("kto") == ["desirable_weight", "undesirable_weight"]
