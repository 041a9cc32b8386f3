"""Loss-side fidelity: token weights meet the KL term as their registration says (λ-GRPO, SPINE), rows
without loss tokens leave DisCO's and Reg-GRPO's group statistics, DisCO's constraint is exact under
accumulation, and SAPO's soft gate (hand-computed values and its defining properties)."""

import math
from dataclasses import replace

import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.kl import KL_ESTIMATORS
from grpokit.algos.losses import POLICY_LOSSES, LossInputs
from grpokit.algos.objective import BatchTotals, ObjectiveTerms, grpo_objective
from grpokit.algos.token_weights import TOKEN_WEIGHTS

SMTM = AGGREGATIONS.get("seq_mean_token_mean")
TOKEN_MEAN = AGGREGATIONS.get("token_mean")
PPO = POLICY_LOSSES.get("ppo_clip")
K3 = KL_ESTIMATORS.get("k3")
LN2 = math.log(2.0)
K3_LN2 = 2.0 - LN2 - 1.0  # k3 at d = ref - logp = ln 2: e^d - d - 1 = 0.30685

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------- token weights and the KL term


def test_kl_scopes_are_declared_by_the_registrations():
    assert TOKEN_WEIGHTS.spec("lambda_grpo").kl_scope == "weighted"
    assert TOKEN_WEIGHTS.spec("forking").kl_scope == "selected"
    assert TOKEN_WEIGHTS.spec("all").kl_scope == "weighted"


def _kl_row():
    """One row of 3 tokens, advantage 0 (no policy term), ref - logp = [ln 2, 0, ln 2]: k3 = [0.30685, 0, 0.30685]."""
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    ref = logp.detach() + torch.tensor([[LN2, 0.0, LN2]])
    return LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.zeros(1), mask=torch.ones(1, 3), ref_logp=ref)


def test_lambda_grpo_weights_scale_the_kl_term():
    # λ-GRPO's code weights the whole per-token objective w (g - β k3); g = 0 here (A = 0):
    # token_mean: β Σ w k3 / 3 = 0.5 (1/3 · 0.30685 + 1/2 · 0 + 1 · 0.30685) / 3 = 0.068190
    # (unweighted, the fault: 0.5 · 2 · 0.30685 / 3 = 0.10228)
    # d/dl_t = β w_t (1 - e^{d_t}) / 3 = 0.5 w_t (1 - 2) / 3 on t = 0, 2 -> [-1/18, 0, -1/6]
    inp = replace(_kl_row(), token_weights=torch.tensor([[1 / 3, 1 / 2, 1.0]]))
    loss, m = grpo_objective(inp, ObjectiveTerms(PPO, TOKEN_MEAN, kl_estimator=K3, beta=0.5))
    loss.backward()
    assert float(loss) == pytest.approx(0.5 * (K3_LN2 / 3 + K3_LN2) / 3, rel=1e-6)
    torch.testing.assert_close(inp.logp.grad, torch.tensor([[-1 / 18, 0.0, -1 / 6]]), rtol=1e-6, atol=1e-7)
    assert float(m["kl"]) == pytest.approx(2 * K3_LN2 / 3, rel=1e-6)  # the logged KL stays the plain token mean


def test_all_weights_leave_grpo_bit_identical():
    torch.manual_seed(0)
    logp = torch.randn(4, 5) * 0.3 - 1
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float32)
    ref, old = logp + 0.1 * torch.randn(4, 5), logp + 0.05 * torch.randn(4, 5)
    out = []
    for weights in (None, TOKEN_WEIGHTS.get("all")(mask)[0]):
        lp = logp.clone().requires_grad_(True)
        inp = LossInputs(logp=lp, old_logp=old, adv=torch.tensor([1.0, -0.5, 0.3, -0.8]), mask=mask, ref_logp=ref,
                         token_weights=weights)
        loss, _ = grpo_objective(inp, ObjectiveTerms(PPO, SMTM, kl_estimator=K3, beta=0.04))
        loss.backward()
        out.append((loss.detach(), lp.grad))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


def _fork_batch():
    """Two rows; forks f = [[1, 0, 0], [0, 1, 0]]; ref - logp = ln 2 everywhere (k3 = 0.30685 per token)."""
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -0.7]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    forks = torch.tensor([[1, 0, 0], [0, 1, 0]], dtype=torch.float32)
    return logp, mask, forks, logp.detach() + LN2


def test_spine_kl_acts_on_forks_only_normalised_by_their_count():
    # L = Agg[f g] + β Σ_f k3 / Σ f; with A = 0: β (0.30685 + 0.30685) / 2 = 0.1 · 0.30685 = 0.030685
    # d/dl on a fork: β (1 - e^{ln 2}) / 2 = -0.05; every non-fork token: exactly 0
    logp, mask, forks, ref = _fork_batch()
    inp = LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.zeros(2), mask=mask, ref_logp=ref, token_weights=forks)
    loss, _ = grpo_objective(inp, ObjectiveTerms(PPO, SMTM, kl_estimator=K3, beta=0.1, kl_scope="selected"))
    loss.backward()
    assert float(loss) == pytest.approx(0.1 * K3_LN2, rel=1e-6)
    torch.testing.assert_close(logp.grad, -0.05 * forks, rtol=1e-6, atol=0.0)


def test_spine_non_fork_tokens_get_no_gradient_with_advantages_and_kl():
    logp, mask, forks, ref = _fork_batch()
    old = logp.detach() + torch.tensor([[0.05, -0.02, 0.01], [0.03, 0.0, 0.0]])
    inp = LossInputs(logp=logp, old_logp=old, adv=torch.tensor([1.0, -1.0]), mask=mask, ref_logp=ref, token_weights=forks)
    loss, _ = grpo_objective(inp, ObjectiveTerms(PPO, TOKEN_MEAN, kl_estimator=K3, beta=0.1, kl_scope="selected"))
    loss.backward()
    assert float(logp.grad[forks == 0].abs().max()) == 0.0 and float(logp.grad[forks > 0].abs().min()) > 0


def test_spine_selected_kl_sums_over_micro_batches_with_the_batch_fork_count():
    logp, mask, forks, ref = _fork_batch()
    grads = []
    for parts in ([slice(0, 2)], [slice(0, 1), slice(1, 2)]):
        lp = logp.detach().clone().requires_grad_(True)
        for rows in parts:
            inp = LossInputs(logp=lp[rows], old_logp=lp[rows].detach(), adv=torch.zeros(2)[rows], mask=mask[rows],
                             ref_logp=ref[rows], token_weights=forks[rows])
            loss, _ = grpo_objective(inp, ObjectiveTerms(PPO, SMTM, kl_estimator=K3, beta=0.1, kl_scope="selected"),
                                     BatchTotals(num_seqs=2.0, num_selected=2.0))
            loss.backward()
        grads.append(lp.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


def test_spine_policy_term_is_the_mean_over_the_forks():
    # on-policy PPO: loss_it = -A_i; forks f = [[1,0,0],[0,1,0]] of 5 valid tokens, A = [1, 0.5]
    # token mean over the forks (the forking-token code: response_mask * entropy_top_mask):
    # L = (-1 - 0.5) / 2 = -0.75, dL/dl = -A / 2 on each fork = [-0.5, -0.25]
    # (over all 5 valid tokens, the fault: -0.3 and [-0.2, -0.1], 2.5x weaker here, 1/rho = 5x at rho 0.2)
    logp, mask, forks, _ = _fork_batch()
    inp = LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.tensor([1.0, 0.5]), mask=mask, token_weights=forks)
    loss, _ = grpo_objective(inp, ObjectiveTerms(PPO, TOKEN_MEAN, kl_scope="selected"))
    loss.backward()
    assert float(loss) == pytest.approx(-0.75, rel=1e-6)
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, 0.0, 0.0], [0.0, -0.25, 0.0]]), rtol=1e-6, atol=0.0)
    # weights that are not a selection keep the mask as the normaliser: 5 tokens
    lp = logp.detach().clone().requires_grad_(True)
    inp = LossInputs(logp=lp, old_logp=lp.detach(), adv=torch.tensor([1.0, 0.5]), mask=mask, token_weights=forks)
    loss, _ = grpo_objective(inp, ObjectiveTerms(PPO, TOKEN_MEAN, kl_scope="weighted"))
    assert float(loss) == pytest.approx(-0.3, rel=1e-6)


def test_spine_policy_term_sums_over_micro_batches_with_the_batch_fork_count():
    logp, mask, forks, ref = _fork_batch()
    old = logp.detach() + torch.tensor([[0.05, -0.02, 0.01], [0.03, 0.0, 0.0]])
    grads = []
    for parts in ([slice(0, 2)], [slice(0, 1), slice(1, 2)]):
        lp = logp.detach().clone().requires_grad_(True)
        for rows in parts:
            inp = LossInputs(logp=lp[rows], old_logp=old[rows], adv=torch.tensor([1.0, -0.5])[rows], mask=mask[rows],
                             ref_logp=ref[rows], token_weights=forks[rows])
            loss, _ = grpo_objective(inp, ObjectiveTerms(PPO, TOKEN_MEAN, kl_estimator=K3, beta=0.1, kl_scope="selected"),
                                     BatchTotals(num_tokens=5.0, num_selected=2.0))
            loss.backward()
        grads.append(lp.grad)
    assert float(grads[0].abs().max()) > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


def test_unknown_kl_scope_is_refused():
    with pytest.raises(ValueError, match="kl_scope"):
        ObjectiveTerms(PPO, SMTM, kl_scope="forks")


def test_a_kl_coefficient_without_an_estimator_or_below_zero_is_refused():
    # before, beta > 0 without an estimator silently dropped the KL term
    with pytest.raises(ValueError, match="beta is 0.1 but kl_estimator is None"):
        ObjectiveTerms(PPO, SMTM, beta=0.1)
    with pytest.raises(ValueError, match="beta is -0.1"):
        ObjectiveTerms(PPO, SMTM, kl_estimator=K3, beta=-0.1)


# ---------------------------------------------------------------- rows without loss tokens


def _one_token_rows(scores, adv, live, group_ids=None):
    """Rows of one token (score 'log_l' = logp); ``live`` 0 = the row's loss mask is all 0."""
    logp = torch.tensor([[s] for s in scores], requires_grad=True)
    mask = torch.tensor([[float(v)] for v in live])
    return LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.tensor(adv), mask=mask, group_ids=group_ids)


def test_disco_row_without_tokens_is_neither_positive_nor_negative():
    # group: positives s = [-1, (empty row)], negatives s = [-2, -4]; disco_b J = -1 - (-3) = 2 -> loss -2
    # (the fault: the empty row counted in O+ with s = 0: mean_pos -0.5, J = 2.5, loss -(3/4) 2.5 = -1.875)
    # gradient: d(-J)/ds = -1/|O+| = -1 on the live positive, +1/|O-| = 1/2 on each negative, 0 on the empty row
    inp = _one_token_rows([-1.0, 0.7, -2.0, -4.0], [1.0, 1.0, -1.0, -1.0], [1, 0, 1, 1])
    per_tok, m = POLICY_LOSSES.get("disco_b")(inp)
    loss = SMTM(per_tok, inp.mask)
    loss.backward()
    assert float(loss) == pytest.approx(-2.0, rel=1e-6)
    torch.testing.assert_close(inp.logp.grad[:, 0], torch.tensor([-1.0, 0.0, 0.5, 0.5]), rtol=1e-6, atol=1e-7)
    assert float(m["disco/score_pos"]) == pytest.approx(-1.0)


def test_reg_grpo_group_statistics_leave_out_rows_without_tokens():
    # live rho = [2, 0, -1] (one token each; row 3 is empty, its rho would be 0 and its target 0.5)
    # mean 1/3, centred [5/3, -1/3, -4/3], unbiased var (25 + 1 + 16) / 9 / 2 = 7/3
    # pred = centred / sqrt(7/3) = [1.091089, -0.218218, -0.872872]; targets [1, 0, -1]
    # errors^2 = [0.0082973, 0.0476190, 0.0161616], sum 0.0720780; loss (1/4)(4/3) sum = 0.0240260
    # (the fault: the empty row's rho = 0 in the statistics -> mean 1/4, var 19/12, loss 0.04805)
    logp = torch.tensor([[2.0], [0.0], [-1.0], [0.9]], requires_grad=True)
    inp = LossInputs(logp=logp, old_logp=torch.zeros(4, 1), prev_logp=torch.zeros(4, 1), adv=torch.tensor([1.0, 0.0, -1.0, 0.5]),
                     mask=torch.tensor([[1.0], [1.0], [1.0], [0.0]]))
    per_tok, m = POLICY_LOSSES.get("reg_grpo")(inp, eps=1e-12)
    loss = SMTM(per_tok, inp.mask)
    loss.backward()
    assert float(loss) == pytest.approx(0.0720779757 / 3, rel=1e-6)
    assert float(m["reg/sq_err"]) == pytest.approx(0.0720779757 / 3, rel=1e-6)  # mean over the 3 live rows
    assert float(logp.grad[3].abs()) == 0.0


@pytest.mark.parametrize("name", ["disco", "disco_b", "reg_grpo"])
def test_a_row_without_tokens_leaves_its_group_as_if_absent(name):
    # the same way in both losses: two groups of 4, row 3 of group 0 masked out (mask_truncated);
    # each question still weighs 1/2 and group 0's terms run over its 3 other rows:
    # L(batch) = 1/2 L(group 0's live rows alone) + 1/2 L(group 1 alone), value and gradient
    torch.manual_seed(1)
    logp = torch.randn(8, 3) * 0.3 - 1
    old = logp + 0.05 * torch.randn(8, 3)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]],
                        dtype=torch.float32)
    adv = torch.tensor([1.0, -0.5, -0.8, 2.0, 0.8, -1.2, 0.4, -0.3])
    gid = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    loss_fn = POLICY_LOSSES.get(name)

    def run(parts):
        lp = logp.clone().requires_grad_(True)
        total = 0.0
        for rows, weight in parts:
            inp = LossInputs(logp=lp[rows], old_logp=old[rows], prev_logp=old[rows], adv=adv[rows], mask=mask[rows],
                             group_ids=gid[rows])
            total = total + weight * SMTM(loss_fn(inp)[0], mask[rows])
        total.backward()
        return float(total), lp.grad

    whole = run([(torch.arange(8), 1.0)])
    apart = run([(torch.tensor([0, 1, 2]), 0.5), (torch.arange(4, 8), 0.5)])
    assert abs(whole[0]) > 1e-3 and whole[0] == pytest.approx(apart[0], rel=1e-6)
    torch.testing.assert_close(whole[1], apart[1], rtol=1e-5, atol=1e-7)
    assert float(whole[1][3].abs().max()) == 0.0


# ---------------------------------------------------------------- DisCO's constraint under accumulation


def _disco_batch(adv):
    """Two groups of 3 rows with 3, 1, 2 | 3, 3, 2 loss tokens (N = 14)."""
    g = torch.Generator().manual_seed(4)
    logp = torch.randn(6, 3, generator=g) * 0.3 - 1
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    old = logp + 0.1 * torch.randn(6, 3, generator=g)
    return logp, old, mask, torch.tensor(adv), torch.tensor([0, 0, 0, 1, 1, 1])


def _disco_grad(name, adv, rows_per_part, d):
    logp, old, mask, adv, gid = _disco_batch(adv)
    lp = logp.clone().requires_grad_(True)
    value = 0.0
    for start in range(0, 6, rows_per_part):
        rows = slice(start, start + rows_per_part)
        inp = LossInputs(logp=lp[rows], old_logp=old[rows], adv=adv[rows], mask=mask[rows], group_ids=gid[rows],
                         constraint_kl=torch.tensor(d))
        loss, _ = grpo_objective(inp, ObjectiveTerms(POLICY_LOSSES.get(name), SMTM, loss_options={"delta": 1e-4, "constraint_beta": 1e3}),
                                 BatchTotals(num_seqs=6.0, num_tokens=float(mask.sum())))
        loss.backward()
        value += float(loss)
    return value, lp.grad, mask


@pytest.mark.parametrize("rows_per_part", [6, 3])
def test_disco_penalty_gradient_is_beta_hinge_grad_d_over_the_whole_batch(rows_per_part):
    # no valid question (A = 0): the loss is the penalty alone. D = delta + 0.01, beta = 1e3:
    # dL/dD = beta [D - delta]_+ = 10, D = sum m (old - l) / 14 -> dL/dl_t = -10/14 on every loss token,
    # whether the batch is one micro-batch or two (the fault: -10 (3/6) / 6 = -0.833 in group 0, whose
    # 6 tokens stood for half of D, and -10 (3/6) / 8 = -0.625 in group 1); value 500 * 0.01^2 = 0.05
    value, grad, mask = _disco_grad("disco_b", [0.0] * 6, rows_per_part, 1e-4 + 0.01)
    assert value == pytest.approx(0.05, rel=1e-5)
    torch.testing.assert_close(grad, -10 / 14 * mask, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["disco", "disco_b"])
def test_disco_with_active_constraint_accumulates_to_the_full_batch_gradient(name):
    adv = [1.0, -0.5, -0.5, 0.7, -1.0, 0.3]
    full_value, full, _ = _disco_grad(name, adv, 6, 0.02)
    parts_value, parts, _ = _disco_grad(name, adv, 3, 0.02)
    assert parts_value == pytest.approx(full_value, rel=1e-6)
    torch.testing.assert_close(parts, full, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- SAPO


def _sapo(log_ratios, adv, **options):
    """One token per row with log-ratio l - l^old = ``log_ratios``; returns (per-token loss [B], d loss_i / d l_i [B])."""
    logp = torch.tensor([[x] for x in log_ratios], dtype=torch.float64, requires_grad=True)
    inp = LossInputs(logp=logp, old_logp=torch.zeros_like(logp), adv=torch.tensor(adv, dtype=torch.float64),
                     mask=torch.ones_like(logp))
    loss, metrics = POLICY_LOSSES.get("sapo")(inp, **options)
    loss.sum().backward()
    return loss.detach()[:, 0], logp.grad[:, 0], metrics


def test_sapo_hand_computed_values():
    # L = -sigmoid(tau (r - 1)) (4 / tau) A, tau = tau_pos = 1 for A > 0, tau_neg = 1.05 otherwise
    # r = 1, A = 1:  -sigmoid(0) * 4 = -2
    # r = 2, A = 1:  -4 sigmoid(1) = -4 * 0.7310586 = -2.9242343
    # r = 2, A = -1: +(4 / 1.05) sigmoid(1.05) = 3.8095238 * 0.7407749 = 2.8219996
    loss, _, m = _sapo([0.0, LN2, LN2], [1.0, 1.0, -1.0])
    torch.testing.assert_close(loss, torch.tensor([-2.0, -4 * sigmoid(1.0), 4 / 1.05 * sigmoid(1.05)], dtype=torch.float64))
    # gradient weights 4 s (1 - s): 1 at r = 1; 4 * 0.7310586 * 0.2689414 = 0.7864477 at r = 2 (tau 1);
    # 4 * 0.7407749 * 0.2592251 = 0.7681140 at r = 2 (tau 1.05) -> mean 0.8515206
    w = [1.0, 4 * sigmoid(1.0) * (1 - sigmoid(1.0)), 4 * sigmoid(1.05) * (1 - sigmoid(1.05))]
    assert float(m["sapo/grad_weight"]) == pytest.approx(sum(w) / 3, rel=1e-9)


def test_sapo_gradient_is_the_soft_gate_weight_times_the_policy_gradient():
    # dL/dl = -A w r, w = 4 s (1 - s), s = sigmoid(tau (r - 1)): at r = 2, tau 1, A = 1:
    # -0.7864477 * 2 = -1.5728955; at r = 2, tau 1.05, A = -1: +0.7681140 * 2 = 1.5362281
    _, grad, _ = _sapo([LN2, LN2], [1.0, -1.0])
    s_pos, s_neg = sigmoid(1.0), sigmoid(1.05)
    torch.testing.assert_close(grad, torch.tensor([-8 * s_pos * (1 - s_pos), 8 * s_neg * (1 - s_neg)], dtype=torch.float64))


@pytest.mark.parametrize("tau", [0.5, 1.0, 3.0])
def test_sapo_on_policy_gradient_is_grpo_for_every_temperature(tau):
    # r = 1: w = 4 sigmoid(0)^2 = 1, so dL/dl = -A exactly (PPO-clip's gradient on-policy)
    adv = [1.5, -0.7, 0.2]
    _, grad, _ = _sapo([0.0] * 3, adv, tau_pos=tau, tau_neg=tau)
    torch.testing.assert_close(grad, -torch.tensor(adv, dtype=torch.float64))
    inp = LossInputs(logp=torch.zeros(3, 1, requires_grad=True), old_logp=torch.zeros(3, 1), adv=torch.tensor(adv),
                     mask=torch.ones(3, 1))
    PPO(inp)[0].sum().backward()
    torch.testing.assert_close(grad.float(), inp.logp.grad[:, 0])


def test_sapo_attenuates_softly_where_the_hard_clip_cuts():
    # r = 1.5 is outside PPO's [0.8, 1.2]: PPO-clip's gradient is 0 there for A > 0, SAPO's is
    # -4 sigmoid(0.5) (1 - sigmoid(0.5)) * 1.5 = -1.4100223, and the weight w falls smoothly as r leaves 1
    r = [1.0, 1.2, 1.5, 2.0, 3.0, 5.0]
    _, grad, _ = _sapo([math.log(x) for x in r], [1.0] * len(r))
    w = -grad / torch.tensor(r, dtype=torch.float64)
    assert float(grad[2]) == pytest.approx(-4 * sigmoid(0.5) * (1 - sigmoid(0.5)) * 1.5, rel=1e-9)
    assert bool((w[1:] < w[:-1]).all()) and bool((w > 0).all())
    inp = LossInputs(logp=torch.tensor([[math.log(1.5)]], requires_grad=True), old_logp=torch.zeros(1, 1),
                     adv=torch.ones(1), mask=torch.ones(1, 1))
    PPO(inp)[0].sum().backward()
    assert float(inp.logp.grad) == 0.0


def test_sapo_negative_advantages_decay_faster_and_temperature_sets_the_rate():
    # same |A| and r = 1.5: tau_neg 1.05 > tau_pos 1 gives the negative token the smaller weight
    # (1.4012097 < 1.4100223 for |dL/dl|); equal temperatures give equal magnitudes
    _, grad, _ = _sapo([math.log(1.5)] * 2, [1.0, -1.0])
    assert float(grad[1]) == pytest.approx(4 * sigmoid(0.525) * (1 - sigmoid(0.525)) * 1.5, rel=1e-9)
    assert 0 < float(grad[1]) < -float(grad[0])
    _, same, _ = _sapo([math.log(1.5)] * 2, [1.0, -1.0], tau_neg=1.0)
    assert float(same[1]) == pytest.approx(-float(same[0]), rel=1e-12)
    _, sharp, _ = _sapo([math.log(1.5)], [1.0], tau_pos=10.0)
    assert -float(sharp[0]) < -float(grad[0])  # a larger tau attenuates faster


def test_sapo_small_temperature_tends_to_the_unclipped_ratio_gradient():
    # tau -> 0: f(r) = 2/tau + (r - 1) + O(tau^2), so dL/dl -> -A r (the unclipped surrogate r A)
    r = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    _, grad, _ = _sapo(r.log().tolist(), [1.0, -1.0, 1.0], tau_pos=1e-4, tau_neg=1e-4)
    torch.testing.assert_close(grad, -torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64) * r, rtol=1e-6, atol=0)


def test_sapo_far_off_policy_and_zero_advantage_stay_finite_and_zero():
    loss, grad, _ = _sapo([100.0, -100.0, 0.3], [1.0, -1.0, 0.0])  # log-ratio clamped to +-20 before exp
    assert bool(torch.isfinite(loss).all()) and bool(torch.isfinite(grad).all())
    assert float(grad[2]) == 0.0 and POLICY_LOSSES.spec("sapo").zero_advantage_zero_gradient
    with pytest.raises(ValueError, match="tau_pos"):
        _sapo([0.0], [1.0], tau_pos=0.0)
