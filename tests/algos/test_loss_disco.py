"""DisCO / DisCO-b: hand-computed values, the softmax gradient over negatives, the KL constraint, N_q."""

import math

import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.disco import disco_constraint_kl
from grpokit.algos.losses import POLICY_LOSSES, LossInputs

SMTM = AGGREGATIONS.get("seq_mean_token_mean")
LN = math.log

# float() of a loss that carries gradient is how these tests read values
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def one_token_group(scores, adv, group_ids=None):
    """Rows of one token each, so the 'log_l' score of row i is logp[i] itself."""
    logp = torch.tensor([[s] for s in scores], dtype=torch.float32).requires_grad_(True)
    return LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.tensor(adv), mask=torch.ones_like(logp),
                      group_ids=group_ids)


def total(name, inp, **options):
    per_tok, metrics = POLICY_LOSSES.get(name)(inp, **options)
    return SMTM(per_tok, inp.mask), metrics


def test_disco_hand_computed():
    # positive s = [-1]; negatives s = [0, ln 3]; tau = 1: log mean exp = ln((1 + 3) / 2) = ln 2
    # J = -1 - ln 2 -> loss 1 + ln 2 = 1.6931
    loss, m = total("disco", one_token_group([-1.0, 0.0, LN(3.0)], [1.0, -0.5, -0.5]), tau=1.0)
    assert float(loss) == pytest.approx(1 + LN(2.0), rel=1e-6)
    assert float(m["disco/valid_frac"]) == 1.0


def test_disco_b_hand_computed():
    # J_b = mean_pos s - mean_neg s = -1 - (0 + ln 3) / 2 = -1.5493 -> loss 1.5493
    loss, _ = total("disco_b", one_token_group([-1.0, 0.0, LN(3.0)], [1.0, -0.5, -0.5]))
    assert float(loss) == pytest.approx(1 + LN(3.0) / 2, rel=1e-6)


def test_l_ratio_score_hand_computed():
    # two tokens, ratios [2, 1] -> s = 1.5 (positive); negative row ratios [1, 0.5] -> s = 0.75
    # disco_b: J = 1.5 - 0.75 = 0.75 -> loss -0.75
    old = torch.zeros(2, 2)
    logp = torch.log(torch.tensor([[2.0, 1.0], [1.0, 0.5]]))
    inp = LossInputs(logp=logp, old_logp=old, adv=torch.tensor([1.0, -1.0]), mask=torch.ones(2, 2))
    loss, _ = total("disco_b", inp, score="l_ratio")
    assert float(loss) == pytest.approx(-0.75, rel=1e-6)


def test_disco_gradient_is_softmax_over_negatives():
    # one group (B = G): loss = -J, so d loss / d s(o'_k) = softmax_k(s(O-)/tau), d loss / d s(o) = -1/|O+|
    tau = 2.0
    scores = [-1.0, -0.5, -2.0, -0.3, -1.1]
    adv = [1.0, 1.0, -1.0, -1.0, -1.0]
    inp = one_token_group(scores, adv)
    loss, _ = total("disco", inp, tau=tau)
    loss.backward()
    neg = torch.tensor(scores[2:])
    assert torch.allclose(inp.logp.grad[2:, 0], torch.softmax(neg / tau, 0), atol=1e-6)
    assert torch.allclose(inp.logp.grad[:2, 0], torch.full((2,), -0.5), atol=1e-6)


def test_large_tau_disco_matches_disco_b():
    torch.manual_seed(0)
    logp = torch.randn(6, 4) * 0.3 - 1
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]] * 2, dtype=torch.float32)
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, -1.0])
    grads = []
    for name, opts in (("disco", {"tau": 1e6}), ("disco_b", {})):
        lp = logp.clone().requires_grad_(True)
        inp = LossInputs(logp=lp, old_logp=logp, adv=adv, mask=mask, group_ids=torch.tensor([0, 0, 0, 1, 1, 1]))
        total(name, inp, **opts)[0].backward()
        grads.append(lp.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


def test_equal_reward_group_contributes_zero_but_counts_in_n_q():
    mixed = one_token_group([-1.0, -2.0], [1.0, -1.0])
    both = one_token_group([-1.0, -2.0, -1.5, -0.5], [1.0, -1.0, 0.0, 0.0], group_ids=torch.tensor([0, 0, 1, 1]))
    alone, _ = total("disco", mixed, tau=1.0)
    with_flat, m = total("disco", both, tau=1.0)
    assert float(with_flat) == pytest.approx(float(alone) / 2, rel=1e-6)
    assert float(m["disco/valid_frac"]) == 0.5
    with_flat.backward()
    assert float(both.logp.grad[2:].abs().max()) == 0.0


def test_batch_without_valid_group_and_no_constraint_is_zero():
    inp = one_token_group([-1.0, -2.0, -3.0], [0.0, 0.0, 0.0])
    loss, _ = total("disco", inp)
    loss.backward()
    assert float(loss) == 0.0 and torch.isfinite(inp.logp.grad).all() and float(inp.logp.grad.abs().max()) == 0.0


def _constraint_inputs(d_target):
    """One row of 4 tokens whose token-mean of old - logp is exactly d_target; no valid group (A = 0)."""
    logp = torch.tensor([[-1.0, -2.0, -0.5, -1.5]], requires_grad=True)
    old = logp.detach() + torch.tensor([[2.0, 1.0, 1.5, -0.5]]) * d_target  # mean = d_target
    return LossInputs(logp=logp, old_logp=old, adv=torch.zeros(1), mask=torch.ones(1, 4))


def test_constraint_inactive_below_delta():
    # D = delta / 2 -> penalty 0, gradient 0
    inp = _constraint_inputs(0.5e-4)
    loss, _ = total("disco", inp, local_constraint=True, delta=1e-4, constraint_beta=1e3)
    loss.backward()
    assert float(loss) == 0.0 and float(inp.logp.grad.abs().max()) == 0.0


@pytest.mark.parametrize("given", [False, True])
def test_constraint_gradient_is_ten_grad_d(given):
    # D = delta + 0.01, beta = 1e3 -> dL/dD = beta [D - delta]_+ = 10; dD/dl_t = -1/4 -> grad -2.5 per token
    # value (beta/2) [D - delta]^2 = 500 * 1e-4 = 0.05
    d = 1e-4 + 0.01
    inp = _constraint_inputs(d)
    assert float(disco_constraint_kl(inp.logp, inp.old_logp, inp.mask)) == pytest.approx(d, rel=1e-4)
    if given:
        inp.constraint_kl = torch.tensor(d)
    loss, m = total("disco_b", inp, local_constraint=not given, delta=1e-4, constraint_beta=1e3)
    loss.backward()
    assert float(loss) == pytest.approx(0.05, rel=1e-4)
    assert torch.allclose(inp.logp.grad, torch.full((1, 4), -2.5), rtol=1e-4)
    assert float(m["disco/constraint_kl"]) == pytest.approx(d, rel=1e-4)


def test_difficulty_bias_identity_grpo_equals_sqrt_p1mp_times_disco_b():
    # binary rewards, p = 1/4, population std sigma = sqrt(p(1-p)); GRPO with every ratio inside the clip
    # range (so min(rA, clip(r)A) = rA) against DisCO-b with l_ratio scores: (1/G) sum_i A_i s_i expands to
    # sigma (mean_pos s - mean_neg s), so L_GRPO = sqrt(p(1-p)) * L_DisCO-b for the value and the gradient
    torch.manual_seed(3)
    logp = torch.randn(4, 3) * 0.3 - 1
    old = logp + 0.05 * torch.randn(4, 3)  # ratios within [0.8, 1.2]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    p = 0.25
    sigma = math.sqrt(p * (1 - p))
    adv = (rewards - p) / sigma
    out = {}
    for name, opts in (("ppo_clip", {}), ("disco_b", {"score": "l_ratio"})):
        lp = logp.clone().requires_grad_(True)
        loss, _ = total(name, LossInputs(logp=lp, old_logp=old, adv=adv, mask=mask), **opts)
        loss.backward()
        out[name] = (float(loss), lp.grad)
    assert ((logp - old).exp() - 1).abs().max() < 0.2
    assert abs(out["disco_b"][0]) > 1e-3
    assert out["ppo_clip"][0] == pytest.approx(sigma * out["disco_b"][0], rel=1e-5)
    assert torch.allclose(out["ppo_clip"][1], sigma * out["disco_b"][1], atol=1e-7)


def test_disco_option_errors():
    inp = one_token_group([-1.0, -2.0], [1.0, -1.0])
    with pytest.raises(ValueError, match="score"):
        POLICY_LOSSES.get("disco")(inp, score="nope")
    with pytest.raises(ValueError, match="tau"):
        POLICY_LOSSES.get("disco")(inp, tau=0.0)
