"""Losses with a second distribution: kdrl (teacher reverse KL) and papo (masked-input perception KL)."""

import math

import pytest
import torch

from grpokit.algos.kdrl import kd_weights, kdrl_coefficient
from grpokit.algos.losses import POLICY_LOSSES, LossInputs
from grpokit.algos.papo import perception_kl

E = math.e

# float() of a loss that carries gradient is how these tests read values
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def leaf(values):
    return torch.tensor(values, dtype=torch.float32).requires_grad_(True)


# ----------------------------------------------------------------------------- kdrl
def kd_inputs(adv=0.0, rewards=(0.0,)):
    logp = leaf([[-1.0, -2.0]])
    return LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.tensor([adv]), mask=torch.ones(1, 2),
                      teacher_logp=torch.tensor([[-1.5, -1.0]]), rewards=torch.tensor(list(rewards)))


def test_kdrl_k2_hand_computed():
    # delta = l - l^T = [0.5, -1]; k2 = delta^2 / 2 = [0.125, 0.5]; A = 0 -> GRPO part 0
    # kd_coef 0.1 -> loss [0.0125, 0.05]; d k2 / d l = delta -> grad 0.1 * [0.5, -1] = [0.05, -0.1]
    inp = kd_inputs()
    loss, m = POLICY_LOSSES.get("kdrl")(inp, kd_coef=0.1, kd_estimator="k2")
    assert torch.allclose(loss, torch.tensor([[0.0125, 0.05]]))
    loss.sum().backward()
    assert torch.allclose(inp.logp.grad, torch.tensor([[0.05, -0.1]]))
    assert float(m["kd/mask_frac"]) == 1.0


def test_kdrl_k3_gradient():
    # d k3 / d l = 1 - exp(-delta) = [1 - e^-0.5, 1 - e] ; kd_coef 1
    inp = kd_inputs()
    POLICY_LOSSES.get("kdrl")(inp, kd_coef=1.0, kd_estimator="k3")[0].sum().backward()
    assert torch.allclose(inp.logp.grad, torch.tensor([[1 - E**-0.5, 1 - E]]), atol=1e-6)


def test_kdrl_correct_responses_are_not_distilled():
    # mask 'response', all r = 1 -> L_KD = 0 and the loss equals ppo_clip
    inp = kd_inputs(adv=0.7, rewards=(1.0,))
    loss, m = POLICY_LOSSES.get("kdrl")(inp, kd_coef=0.1)
    grpo, _ = POLICY_LOSSES.get("ppo_clip")(inp)
    assert torch.allclose(loss, grpo) and float(m["kd/mask_frac"]) == 0.0


def test_kdrl_kl_in_reward_hand_computed():
    # A_it = A - kd_coef * delta = 1 - 0.1 * [0.5, -1] = [0.95, 1.1]; on-policy r = 1 -> loss = -A_it
    loss, _ = POLICY_LOSSES.get("kdrl")(kd_inputs(adv=1.0), kd_coef=0.1, kd_placement="reward")
    assert torch.allclose(loss, torch.tensor([[-0.95, -1.1]]))


def test_kdrl_group_mask_and_denominator_flag():
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0])
    inp = LossInputs(logp=torch.zeros(4, 2), old_logp=torch.zeros(4, 2), adv=torch.zeros(4), mask=torch.ones(4, 2),
                     rewards=rewards, group_ids=torch.tensor([5, 5, 9, 9]), teacher_logp=torch.full((4, 2), -1.0))
    assert kd_weights(inp, "group").tolist() == [1.0, 1.0, 0.0, 0.0]  # only the prompt never solved
    assert kd_weights(inp, "response").tolist() == [1.0, 1.0, 0.0, 1.0]
    # k1 = delta = 1 on distilled rows; full denominator: per-token 1 there, 0 elsewhere;
    # renormalised over distilled tokens: x (8 tokens / 4 distilled) = 2
    full, _ = POLICY_LOSSES.get("kdrl")(inp, kd_coef=1.0, kd_estimator="k1", kd_mask="group")
    part, _ = POLICY_LOSSES.get("kdrl")(inp, kd_coef=1.0, kd_estimator="k1", kd_mask="group", kd_full_denominator=False)
    assert full.tolist() == [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    assert torch.allclose(part, 2 * full)


def test_kdrl_errors_and_no_teacher_is_refused():
    inp = kd_inputs(adv=1.0)
    inp.rewards = None
    with pytest.raises(ValueError, match="rewards"):
        POLICY_LOSSES.get("kdrl")(inp)
    with pytest.raises(ValueError, match="kd_mask"):
        POLICY_LOSSES.get("kdrl")(inp, kd_mask="sometimes")
    inp.teacher_logp = None
    with pytest.raises(ValueError, match="teacher_logp"):  # never ppo_clip in disguise
        POLICY_LOSSES.get("kdrl")(inp, kd_mask="none")


def test_kdrl_teacher_gap_is_zero_only_for_the_student_itself():
    inp = kd_inputs(adv=1.0)
    _, m = POLICY_LOSSES.get("kdrl")(inp, kd_mask="none")
    # |l - l^T| = |-1 + 1.5|, |-2 + 1| = 0.5, 1 -> mean 0.75
    assert float(m["kd/teacher_gap"]) == pytest.approx(0.75)
    inp.teacher_logp = inp.logp.detach().clone()
    assert float(POLICY_LOSSES.get("kdrl")(inp, kd_mask="none")[1]["kd/teacher_gap"]) == 0.0


def test_kdrl_coefficient_schedule():
    # beta_0 5e-3, beta_min 1e-3, kappa 1e-4: t = 0 -> 5e-3, t = 20 -> 3e-3, t >= (5e-3 - 1e-3) / 1e-4 = 40 -> 1e-3
    betas = [kdrl_coefficient(t, beta_0=5e-3, beta_min=1e-3, kappa=1e-4) for t in range(0, 60)]
    assert betas[0] == pytest.approx(5e-3) and betas[20] == pytest.approx(3e-3)
    assert betas[40] == pytest.approx(1e-3) and betas[59] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(betas, betas[1:]))
    assert kdrl_coefficient(1000) == 5e-3  # kappa = 0: constant


# ----------------------------------------------------------------------------- papo
def papo_inputs(aux):
    logp = leaf([[-1.0, -2.0]])
    return LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.zeros(1), mask=torch.ones(1, 2),
                      aux_logp=torch.tensor(aux))


def test_papo_hand_computed():
    # l = [-1, -2], l^mask = [-1.5, -2]: d = [-0.5, 0], kappa = [e^-0.5 + 0.5 - 1, 0] = [0.106531, 0]
    # A = 0; gamma 0.01, eta 0.03: token 0: -0.00106531 + 0.03 * 1 + 0.03 * 1.5 = 0.07393469
    #                              token 1: 0 + 0.03 * 2 + 0.03 * 2 = 0.12
    # grad: -gamma (1 - exp(l^mask - l)) - eta_1 = [-0.01 * 0.393469 - 0.03, -0.03]
    inp = papo_inputs([[-1.5, -2.0]])
    loss, m = POLICY_LOSSES.get("papo")(inp, gamma=0.01, entropy_coef=0.03, mask_entropy_coef=0.03)
    assert torch.allclose(loss, torch.tensor([[0.07393469, 0.12]]), atol=1e-6)
    loss.sum().backward()
    assert torch.allclose(inp.logp.grad, torch.tensor([[-0.01 * (1 - E**-0.5) - 0.03, -0.03]]), atol=1e-6)
    assert float(m["papo/kl_prcp"]) == pytest.approx((E**-0.5 - 0.5) / 2, rel=1e-5)


def test_perception_kl_zero_at_equal_logprobs_and_nonnegative():
    logp = leaf([[-1.0, -0.3, -4.0]])
    kappa = perception_kl(logp, logp.detach())
    kappa.sum().backward()
    assert float(kappa.abs().max()) == 0.0 and float(logp.grad.abs().max()) == 0.0
    torch.manual_seed(0)
    assert float(perception_kl(torch.randn(50, 7) * 3, torch.randn(50, 7) * 3).min()) >= -1e-6  # float32 rounding


def test_papo_loss_decreases_as_masked_view_diverges():
    vals = [float(POLICY_LOSSES.get("papo")(papo_inputs([[-1.0 - gap, -2.0]]), entropy_coef=0.0,
                                            mask_entropy_coef=0.0)[0].sum()) for gap in (0.0, 0.5, 1.0)]
    assert vals[0] == 0.0 and vals[0] > vals[1] > vals[2]


def test_papo_gradient_independent_of_eta2_with_detached_mask_pass():
    grads = []
    for eta2 in (0.0, 5.0):
        inp = papo_inputs([[-1.5, -2.5]])
        POLICY_LOSSES.get("papo")(inp, mask_entropy_coef=eta2)[0].sum().backward()
        grads.append(inp.logp.grad)
    assert torch.equal(grads[0], grads[1])


def test_papo_without_masked_pass_is_ppo_clip():
    inp = papo_inputs([[-1.5, -2.0]])
    inp.aux_logp = None
    inp.adv = torch.tensor([0.8])
    assert torch.allclose(POLICY_LOSSES.get("papo")(inp)[0], POLICY_LOSSES.get("ppo_clip")(inp)[0])


def test_the_perception_kl_keeps_its_value_for_tiny_log_prob_changes():
    # exp(d) - d - 1 cancels to exactly 0 in float32 for |d| ~ 1e-5; expm1(d) - d keeps d^2 / 2
    from grpokit.algos.papo import perception_kl

    logp = torch.full((1, 3), -1.0)
    kappa = perception_kl(logp, logp + torch.tensor([[1e-5, -1e-4, 0.0]]))
    assert torch.allclose(kappa, torch.tensor([[5e-11, 5e-9, 0.0]]), rtol=1e-2, atol=0)


def test_kdrl_distilled_rows_are_the_reward_mask_by_hand():
    from grpokit.algos.kdrl import distilled_rows

    rewards, groups = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    assert distilled_rows(rewards, groups, kd_mask="response").tolist() == [False, True, False, False]
    assert distilled_rows(rewards, groups, kd_mask="group").tolist() == [False, False, False, False]
    assert distilled_rows(torch.tensor([0.0, 0.0, 1.0, 0.0]), groups, kd_mask="group").tolist() == [True, True, False, False]
    assert distilled_rows(rewards, groups, kd_mask="none") is None  # every row is distilled
    assert distilled_rows(rewards, groups, kd_full_denominator=False) is None  # a per-micro-batch normaliser: keep all
