"""Hand-computed values and the papers' properties of cispo, reg_grpo, humanline and grpo_verif."""

import math

import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.losses import POLICY_LOSSES, LossInputs
from grpokit.algos.losses_extra import humanline_should_sync

SMTM = AGGREGATIONS.get("seq_mean_token_mean")
TOKEN_MEAN = AGGREGATIONS.get("token_mean")
LN = math.log

# float() of a loss that carries gradient is how these tests read values
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def leaf(values):
    return torch.tensor(values, dtype=torch.float32).requires_grad_(True)


# ----------------------------------------------------------------------------- cispo
def test_cispo_hand_computed_and_gradient_through_weight_stopped():
    # logp = [-1, -2, -0.5], ratios [2, 0.5, 1] (old = logp - ln r), A = 1, eps_high^IS = 0.28, no lower bound
    # weights sg(clip(r)) = [1.28, 0.5, 1]; loss = -w A l = [1.28, 1.0, 0.5]; grad = -w A = [-1.28, -0.5, -1]
    logp = leaf([[-1.0, -2.0, -0.5]])
    old = logp.detach() - torch.log(torch.tensor([[2.0, 0.5, 1.0]]))
    inp = LossInputs(logp=logp, old_logp=old, adv=torch.tensor([1.0]), mask=torch.ones(1, 3))
    loss, m = POLICY_LOSSES.get("cispo")(inp, is_clip_high=0.28)
    assert torch.allclose(loss, torch.tensor([[1.28, 1.0, 0.5]]))
    loss.sum().backward()
    # were the weight not detached, token 2 (r = 1, unclipped) would get -A (r + r l) = -0.5
    assert torch.allclose(logp.grad, torch.tensor([[-1.28, -0.5, -1.0]]))
    assert float(m["clip/frac"]) == pytest.approx(1 / 3)


def test_cispo_keeps_gradient_where_ppo_clip_drops_it():
    logp = leaf([[-1.0]])
    inp = LossInputs(logp=logp, old_logp=logp.detach() - LN(2.0), adv=torch.tensor([1.0]), mask=torch.ones(1, 1))
    POLICY_LOSSES.get("cispo")(inp)[0].sum().backward()
    assert float(logp.grad) == pytest.approx(-1.28)  # PPO-clip would give 0 (A > 0, r = 2 > 1.2)


def test_cispo_lower_bound_and_ppo_mask():
    logp = leaf([[-1.0, -2.0]])
    old = logp.detach() - torch.log(torch.tensor([[2.0, 0.5]]))
    inp = LossInputs(logp=logp, old_logp=old, adv=torch.tensor([1.0]), mask=torch.ones(1, 2))
    # is_clip_low 0.2: r = 0.5 -> weight 0.8 -> loss -0.8 * 1 * -2 = 1.6
    loss, _ = POLICY_LOSSES.get("cispo")(inp, is_clip_low=0.2)
    assert float(loss[0, 1]) == pytest.approx(1.6)
    # unified form: A > 0 and r = 2 > 1 + 0.2 -> M = 0 (token dropped); r = 0.5 with A > 0 is kept
    loss, m = POLICY_LOSSES.get("cispo")(inp, ppo_mask=True, epsilon_low=0.2, epsilon_high=0.2)
    loss.sum().backward()
    assert float(loss[0, 0]) == 0.0 and float(logp.grad[0, 0]) == 0.0
    assert float(logp.grad[0, 1]) == pytest.approx(-0.5)
    assert float(m["clip/masked_frac"]) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- reg_grpo
def test_reg_grpo_hand_computed():
    # rho = [0.1 + 0.2, -0.1 + 0] = [0.3, -0.1]; mean 0.1; unbiased var = (0.2^2 + 0.2^2) / 1 = 0.08
    # eps 0.01: sqrt(0.09) = 0.3 -> A_theta = [2/3, -2/3]; target [1, -1] -> (1/3)^2 each -> loss 1/9
    logp = leaf([[0.1, 0.2], [-0.1, 0.0]])
    inp = LossInputs(logp=logp, old_logp=logp.detach(), prev_logp=torch.zeros(2, 2), adv=torch.tensor([1.0, -1.0]), mask=torch.ones(2, 2))
    loss, _ = POLICY_LOSSES.get("reg_grpo")(inp, eps=0.01)
    assert float(SMTM(loss, inp.mask)) == pytest.approx(1 / 9, rel=1e-6)


def test_reg_grpo_first_on_policy_update_is_finite_reinforce():
    # the run's very first update (no earlier policy: prev = current): rho = 0, var = 0,
    # dL/drho_j = -2 A_j / (G sqrt(eps)) (sum A = 0); drho_j/dl_jt = m_jt
    torch.manual_seed(0)
    logp = (torch.randn(4, 3) - 1).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    eps = 1e-4
    inp = LossInputs(logp=logp, old_logp=logp.detach(), prev_logp=logp.detach(), adv=adv, mask=mask)
    loss, _ = POLICY_LOSSES.get("reg_grpo")(inp, eps=eps)
    SMTM(loss, mask).backward()
    assert torch.isfinite(logp.grad).all()
    expected = -2 * adv.unsqueeze(-1) * mask / (4 * math.sqrt(eps))
    assert torch.allclose(logp.grad, expected, rtol=1e-5)
    with pytest.raises(ValueError, match="eps"):
        POLICY_LOSSES.get("reg_grpo")(inp, eps=0.0)


def test_reg_grpo_first_update_of_a_batch_regresses_against_the_previous_iterations_policy():
    # A batch's first update is on-policy (old = current), but pi_old is the policy one update behind:
    # rho = logp - prev = [-1 + 1.2, -2 + 1.9, -0.5 + 0.5] = [0.2, -0.1, 0]; mean 1/30;
    # centred [1/6, -2/15, -1/30]; unbiased var = (1/36 + 4/225 + 1/900) / 2 = 7/300 = 0.023333
    # pred = centred / sqrt(7/300 + 1e-6) = [1.091066, -0.872853, -0.218213]; targets [1, -1, 0]
    # errors^2 = [0.0082930, 0.0161664, 0.0476170] -> loss = sum / 3 = 0.0240255
    logp = leaf([[-1.0], [-2.0], [-0.5]])
    prev = torch.tensor([[-1.2], [-1.9], [-0.5]])
    adv, mask = torch.tensor([1.0, -1.0, 0.0]), torch.ones(3, 1)
    inp = LossInputs(logp=logp, old_logp=logp.detach(), prev_logp=prev, adv=adv, mask=mask)
    loss, m = POLICY_LOSSES.get("reg_grpo")(inp, eps=1e-6)
    SMTM(loss, mask).backward()
    assert float(SMTM(loss, mask)) == pytest.approx(0.0240254774, rel=1e-5)
    assert float(m["reg/rho_std"]) == pytest.approx(math.sqrt(7 / 300), rel=1e-4)
    # a regression step (row 0 overshoots its target: its log-prob goes down), not the rescaled
    # REINFORCE step of rho = 0, whose gradient here would be -2 A_j / (G sqrt(eps)) = [-666.7, 666.7, 0]
    torch.testing.assert_close(logp.grad.flatten(), torch.tensor([0.311737, 0.623463, -0.935200]), rtol=1e-4, atol=1e-6)


def test_reg_grpo_groups_are_independent_and_equal_reward_groups_skipped():
    torch.manual_seed(1)
    logp = torch.randn(4, 3) * 0.2 - 1
    old = logp + 0.05 * torch.randn(4, 3)
    mask = torch.ones(4, 3)
    fn = POLICY_LOSSES.get("reg_grpo")
    both = LossInputs(logp=logp, old_logp=old, prev_logp=old, adv=torch.tensor([1.0, -1.0, 0.0, 0.0]), mask=mask,
                      group_ids=torch.tensor([7, 7, 3, 3]))
    only_first = LossInputs(logp=logp[:2], old_logp=old[:2], prev_logp=old[:2], adv=torch.tensor([1.0, -1.0]), mask=mask[:2])
    # group 3 has all-zero targets: contributes 0 but counts in B (4 rows vs 2)
    total = float(SMTM(fn(both)[0], mask))
    assert total == pytest.approx(float(SMTM(fn(only_first)[0], mask[:2])) / 2, rel=1e-6)



@pytest.mark.parametrize("name, options", [("cispo", {}), ("humanline", {"log_eps_p": -1.0, "log_eps_r": 1.5})])
def test_zero_advantage_row_has_no_gradient_and_the_registration_says_so(name, options):
    # Row 0: A = 1, r = e^0.1 = 1.1052 against old (cispo) and ref (humanline): inside every band, so
    # grad = -w A = -1.1052 for both (cispo: w = min(r, 1.28); humanline: d(-r A)/dl = -r A).
    # Row 1: A = 0, r = e^1 = 2.718 and e^-1 = 0.368, beyond the PPO and IS bands: grad 0 at any ratio,
    # so the learner may leave the row out; it does only if the registration declares it (issue 28:
    # cispo and humanline did not, and learned zero-advantage groups at full cost).
    logp = leaf([[-1.0, -2.0], [-1.0, -2.0]])
    base = logp.detach() - torch.tensor([[0.1, 0.1], [1.0, -1.0]])
    inp = LossInputs(logp=logp, old_logp=base, ref_logp=base, adv=torch.tensor([1.0, 0.0]), mask=torch.ones(2, 2))
    loss, _ = POLICY_LOSSES.get(name)(inp, **options)
    TOKEN_MEAN(loss, inp.mask).backward()
    expected = torch.tensor([[-math.exp(0.1) / 4, -math.exp(0.1) / 4], [0.0, 0.0]])  # token mean over 4 tokens
    assert torch.allclose(logp.grad, expected, atol=1e-7)
    assert POLICY_LOSSES.spec(name).zero_advantage_zero_gradient

# ----------------------------------------------------------------------------- humanline
def test_humanline_clamp_hand_computed():
    # log-ratios vs ref [2.0, 0.3, -2.0], band [-1, 1.5], A = -1, eps 0.2:
    # r = [e^1.5, e^0.3, e^-1] = [4.4817, 1.3499, 0.3679]; loss = max(r, clip(r)) for A = -1:
    # [4.4817 (clamped: grad 0), 1.3499 (grad r = 1.3499), max(0.3679, 0.8) = 0.8 (PPO clip: grad 0)]
    logp = leaf([[2.0, 0.3, -2.0]])
    inp = LossInputs(logp=logp, old_logp=torch.full((1, 3), 5.0), adv=torch.tensor([-1.0]), mask=torch.ones(1, 3),
                     ref_logp=torch.zeros(1, 3))
    loss, m = POLICY_LOSSES.get("humanline")(inp, log_eps_p=-1.0, log_eps_r=1.5)
    assert torch.allclose(loss, torch.tensor([[math.exp(1.5), math.exp(0.3), 0.8]]), atol=1e-6)
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, math.exp(0.3), 0.0]]), atol=1e-6)
    assert float(m["humanline/unclamped_frac"]) == pytest.approx(1 / 3)


def test_humanline_without_band_is_grpo_against_the_reference():
    torch.manual_seed(2)
    logp = torch.randn(3, 4) * 0.1 - 1
    ref = logp + 0.1 * torch.randn(3, 4)
    adv, mask = torch.tensor([1.0, -0.3, 0.4]), torch.ones(3, 4)
    h, _ = POLICY_LOSSES.get("humanline")(
        LossInputs(logp=logp, old_logp=torch.zeros(3, 4), adv=adv, mask=mask, ref_logp=ref),
        log_eps_p=-math.inf, log_eps_r=math.inf,
    )
    g, _ = POLICY_LOSSES.get("ppo_clip")(LossInputs(logp=logp, old_logp=ref, adv=adv, mask=mask))
    assert torch.allclose(h, g)
    # no ref_logp: an error, never a ratio against old_logp (another method)
    with pytest.raises(ValueError, match="ref_logp"):
        POLICY_LOSSES.get("humanline")(LossInputs(logp=logp, old_logp=ref, adv=adv, mask=mask),
                                       log_eps_p=-math.inf, log_eps_r=math.inf)


def test_humanline_should_sync():
    assert [s for s in range(1, 13) if humanline_should_sync(s, 4)] == [4, 8, 12]
    assert all(humanline_should_sync(s, 1) for s in range(1, 5))
    assert not any(humanline_should_sync(s, 0) for s in range(1, 5))


# ----------------------------------------------------------------------------- grpo_verif
def test_grpo_verif_hand_computed():
    # on-policy (r = 1): solution tokens g = A = 1 -> 1; verification token g = A^V = -1 -> alpha * -1 = -0.2
    # J = 1 - 0.2 = 0.8 -> loss -0.8 (one row, seq_mean_token_mean)
    logp = leaf([[-1.0, -1.5, -0.7]])
    inp = LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.tensor([1.0]), mask=torch.ones(1, 3),
                     verif_mask=torch.tensor([[0.0, 0.0, 1.0]]), verif_adv=torch.tensor([-1.0]))
    loss, _ = POLICY_LOSSES.get("grpo_verif")(inp, alpha=0.2)
    assert float(SMTM(loss, inp.mask)) == pytest.approx(-0.8, rel=1e-6)


def _verif_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    logp = (torch.randn(3, 6, generator=g) * 0.2 - 1).requires_grad_(True)
    old = logp.detach() + 0.1 * torch.randn(3, 6, generator=g)
    mask = torch.tensor([[1] * 6, [1] * 5 + [0], [1] * 3 + [0] * 3], dtype=torch.float32)
    verif = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], dtype=torch.float32)
    return LossInputs(logp=logp, old_logp=old, adv=torch.tensor([1.0, -0.5, 0.3]), mask=mask,
                      verif_mask=verif, verif_adv=torch.tensor([-1.0, 0.8, 0.2]))


def test_grpo_verif_alpha_zero_is_grpo_on_the_solutions():
    inp = _verif_inputs(0)
    loss, _ = POLICY_LOSSES.get("grpo_verif")(inp, alpha=0.0, epsilon_low=0.28, epsilon_high=0.28)
    SMTM(loss, inp.mask).backward()
    ref = _verif_inputs(0)
    sol_mask = ref.mask * (1 - ref.verif_mask)
    grpo_in = LossInputs(logp=ref.logp, old_logp=ref.old_logp, adv=ref.adv, mask=sol_mask)
    grpo, _ = POLICY_LOSSES.get("ppo_clip")(grpo_in, epsilon_low=0.28, epsilon_high=0.28)
    SMTM(grpo, sol_mask).backward()
    assert float(SMTM(loss, inp.mask)) == pytest.approx(float(SMTM(grpo, sol_mask)), abs=1e-6)
    assert torch.allclose(inp.logp.grad, ref.logp.grad, atol=1e-7)


def test_grpo_verif_without_verification_is_ppo_clip():
    inp = _verif_inputs(1)
    plain = LossInputs(logp=inp.logp, old_logp=inp.old_logp, adv=inp.adv, mask=inp.mask)
    a, _ = POLICY_LOSSES.get("grpo_verif")(plain)
    b, _ = POLICY_LOSSES.get("ppo_clip")(plain)
    assert torch.allclose(a * plain.mask, b * plain.mask)


def test_grpo_verif_advantage_parts_are_independent():
    # permuting the verification advantages leaves the solution term alone
    inp = _verif_inputs(2)
    perm = _verif_inputs(2)
    perm.verif_adv = perm.verif_adv[[2, 0, 1]]
    a, _ = POLICY_LOSSES.get("grpo_verif")(inp, alpha=0.2)
    b, _ = POLICY_LOSSES.get("grpo_verif")(perm, alpha=0.2)
    sol = inp.mask * (1 - inp.verif_mask)
    assert torch.allclose(a * sol, b * sol)
    assert not torch.allclose(a * inp.verif_mask, b * inp.verif_mask)
