"""Importance ratios (token / GSPO sequence / TS-GRPO span), ppo_clip's ratio and two-sided clip options, ts_grpo."""

import math

import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.losses import POLICY_LOSSES, LossInputs
from grpokit.algos.ratios import RATIOS

SMTM = AGGREGATIONS.get("seq_mean_token_mean")
LN = math.log

# float() of a loss that carries gradient is how these tests read values
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def inp_from_ratios(log_ratios, adv, mask=None, plan=None, requires_grad=False):
    """Inputs with old_logp = 0, so logp is the log-ratio itself."""
    logp = torch.tensor(log_ratios, dtype=torch.float32).requires_grad_(requires_grad)
    mask = torch.ones_like(logp) if mask is None else torch.tensor(mask, dtype=torch.float32)
    plan = None if plan is None else torch.tensor(plan, dtype=torch.float32)
    return LossInputs(logp=logp, old_logp=torch.zeros_like(logp), adv=torch.tensor(adv), mask=mask, plan_mask=plan)


def test_ratio_names_registered():
    assert RATIOS.names() == ["sequence", "span", "token"]


def test_token_ratio_hand_computed():
    r = RATIOS.get("token")(inp_from_ratios([[LN(1.5), LN(0.5)]], [1.0]))
    assert torch.allclose(r, torch.tensor([[1.5, 0.5]]))


def test_sequence_ratio_hand_computed():
    # masked log-ratios [ln 4, 0] -> mean ln 2 -> s = 2 on every token; the masked ln 100 is ignored
    r = RATIOS.get("sequence")(inp_from_ratios([[LN(4.0), 0.0, LN(100.0)]], [1.0], mask=[[1, 1, 0]]))
    assert torch.allclose(r, torch.full((1, 3), 2.0))


def test_span_ratio_hand_computed():
    # plan token: r = 3; answer tokens [ln 4, 0] -> s = exp(ln 4 / 2) = 2
    r = RATIOS.get("span")(inp_from_ratios([[LN(3.0), LN(4.0), 0.0]], [1.0], plan=[[1, 0, 0]]))
    assert torch.allclose(r, torch.tensor([[3.0, 2.0, 2.0]]))


def test_gspo_all_token_ratios_c_give_s_equal_c():
    c = 1.37
    r = RATIOS.get("sequence")(inp_from_ratios([[LN(c)] * 5], [1.0]))
    assert torch.allclose(r, torch.full((1, 5), c))


def test_gspo_outlier_moves_log_s_by_its_geometric_share():
    base = inp_from_ratios([[0.1, -0.2, 0.05, 0.0]], [1.0])
    moved = inp_from_ratios([[0.1 + 0.8, -0.2, 0.05, 0.0]], [1.0])
    # one token's log-ratio +0.8 -> log s moves by 0.8 / |o| = 0.2
    d = torch.log(RATIOS.get("sequence")(moved)) - torch.log(RATIOS.get("sequence")(base))
    assert torch.allclose(d, torch.full((1, 4), 0.2), atol=1e-6)


def test_gspo_hand_computed_loss():
    # s = 2 (log-ratios [ln 4, 0]); eps 0.2: A = +1 -> -min(2, 1.2) = -1.2; A = -1 -> -min(-2, -1.2) = 2
    fn = POLICY_LOSSES.get("ppo_clip")
    for adv, expected in ((1.0, -1.2), (-1.0, 2.0)):
        inp = inp_from_ratios([[LN(4.0), 0.0]], [adv])
        loss, _ = fn(inp, ratio="sequence", epsilon_low=0.2, epsilon_high=0.2)
        assert float(SMTM(loss, inp.mask)) == pytest.approx(expected, rel=1e-6)


def _grad(loss_name, inp, **options):
    per_tok, _ = POLICY_LOSSES.get(loss_name)(inp, **options)
    SMTM(per_tok, inp.mask).backward()
    return inp.logp.grad.clone()


def _random_inputs(seed, off_policy=0.0, plan=False):
    g = torch.Generator().manual_seed(seed)
    logp = torch.randn(4, 6, generator=g) * 0.3 - 1.0
    old = logp + off_policy * torch.randn(4, 6, generator=g)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4, [1] * 5 + [0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2])
    plan_mask = torch.tensor([[1] * 3 + [0] * 3, [1, 0, 0, 0, 0, 0], [0] * 6, [1] * 5 + [0]], dtype=torch.float32)
    return LossInputs(
        logp=logp.requires_grad_(True), old_logp=old, adv=adv, mask=mask, plan_mask=plan_mask if plan else None
    )


def test_on_policy_gspo_gradient_equals_grpo_gradient():
    gspo = _grad("ppo_clip", _random_inputs(0), ratio="sequence", epsilon_low=3e-4, epsilon_high=4e-4)
    grpo = _grad("ppo_clip", _random_inputs(0))
    assert torch.allclose(gspo, grpo, atol=1e-7)


def test_off_policy_gspo_gradient_is_per_sequence():
    # unclipped: d/dl_it [-(1/|o_i|) sum_t s_i A_i] (seq_mean_token_mean, B = 4) = -s_i A_i / (4 |o_i|)
    inp = _random_inputs(1, off_policy=0.01)
    grad = _grad("ppo_clip", inp, ratio="sequence", epsilon_low=10.0, epsilon_high=10.0)
    lengths = inp.mask.sum(-1)
    s = torch.exp(((inp.logp.detach() - inp.old_logp) * inp.mask).sum(-1) / lengths)
    expected = -(s * inp.adv / (4 * lengths)).unsqueeze(-1) * inp.mask
    assert torch.allclose(grad, expected, atol=1e-7)


def test_span_ratio_without_plan_is_gspo():
    a = _grad("ppo_clip", _random_inputs(2, off_policy=0.05), ratio="span")
    b = _grad("ppo_clip", _random_inputs(2, off_policy=0.05), ratio="sequence")
    assert torch.allclose(a, b)


def test_ts_grpo_hand_computed():
    # plan [ln 1.5, 0] -> r = [1.5, 1]; A = 1, eps 0.2: g = [min(1.5, 1.2), 1] -> J_P = (1.2 + 1) / 2 = 1.1
    # answer [ln 4, 0] -> s = 2, eps_s 3e-4/4e-4: J_S = min(2, 1.0004) = 1.0004; loss = -(1.1 + 1.0004)
    inp = inp_from_ratios([[LN(1.5), 0.0, LN(4.0), 0.0]], [1.0], plan=[[1, 1, 0, 0]])
    loss, _ = POLICY_LOSSES.get("ts_grpo")(inp, epsilon_low=0.2, epsilon_high=0.2)
    assert float(SMTM(loss, inp.mask)) == pytest.approx(-2.1004, rel=1e-6)


def test_ts_grpo_empty_plan_equals_gspo():
    inp = _random_inputs(3, off_policy=0.05)
    ts, _ = POLICY_LOSSES.get("ts_grpo")(inp, seq_epsilon_low=0.2, seq_epsilon_high=0.2)
    gspo, _ = POLICY_LOSSES.get("ppo_clip")(inp, ratio="sequence", epsilon_low=0.2, epsilon_high=0.2)
    assert float(SMTM(ts, inp.mask)) == pytest.approx(float(SMTM(gspo, inp.mask)), abs=1e-6)
    ts_grad = _grad("ts_grpo", _random_inputs(3, off_policy=0.05), seq_epsilon_low=0.2, seq_epsilon_high=0.2)
    gspo_grad = _grad("ppo_clip", _random_inputs(3, off_policy=0.05), ratio="sequence")
    assert torch.allclose(ts_grad, gspo_grad, atol=1e-7)


def test_ts_grpo_all_plan_equals_grpo():
    def full_plan():
        inp = _random_inputs(4, off_policy=0.1)
        inp.plan_mask = inp.mask.clone()
        return inp

    ts, _ = POLICY_LOSSES.get("ts_grpo")(full_plan())
    grpo, _ = POLICY_LOSSES.get("ppo_clip")(full_plan())
    m = full_plan().mask
    assert float(SMTM(ts, m)) == pytest.approx(float(SMTM(grpo, m)), abs=1e-6)
    assert torch.allclose(_grad("ts_grpo", full_plan()), _grad("ppo_clip", full_plan()), atol=1e-7)


def test_ts_grpo_on_policy_value_counts_spans():
    # on-policy: loss = -(1/G) sum_i (lambda_P 1[|P_i|>0] + lambda_S 1[|S_i|>0]) A_i
    inp = _random_inputs(5, plan=True)
    loss, _ = POLICY_LOSSES.get("ts_grpo")(inp, plan_weight=0.5, answer_weight=2.0)
    plan = inp.plan_mask * inp.mask
    has_p, has_s = (plan.sum(-1) > 0).float(), ((inp.mask - plan).sum(-1) > 0).float()
    expected = -((0.5 * has_p + 2.0 * has_s) * inp.adv).mean()
    assert float(SMTM(loss, inp.mask)) == pytest.approx(float(expected), abs=1e-6)


def test_ts_grpo_answer_token_shift_moves_log_s_by_share():
    inp = _random_inputs(6, off_policy=0.05, plan=True)
    row, t = 0, 4  # an answer token of row 0 (answer span = tokens 3..5, |S_0| = 3)
    r0 = RATIOS.get("span")(inp).detach()
    inp.logp.data[row, t] += 0.3
    r1 = RATIOS.get("span")(inp).detach()
    assert float(torch.log(r1[row, 3]) - torch.log(r0[row, 3])) == pytest.approx(0.1, abs=1e-6)
    assert float(r1[row, 0]) == pytest.approx(float(r0[row, 0]))  # plan tokens keep their own ratio


@pytest.mark.parametrize(
    "adv,ratio,loss,grad",
    [(-1.0, 10.0, 4.0, 0.0), (-1.0, 3.0, 3.0, 3.0), (1.0, 10.0, -1.2, 0.0)],
)
def test_two_sided_clip_intellect2(adv, ratio, loss, grad):
    # INTELLECT-2, delta = 4, eps 0.2: A=-1, r=10 -> clamp 4 -> max(4, 1.2) = 4, grad 0;
    # A=-1, r=3 -> max(3, 1.2) = 3, d/dl (-r A) = 3; A=+1, r=10 -> -min(4, 1.2) = -1.2, grad 0
    inp = inp_from_ratios([[LN(ratio)]], [adv], requires_grad=True)
    out, m = POLICY_LOSSES.get("ppo_clip")(inp, clip_ratio_c=4.0)
    out.sum().backward()
    assert float(out) == pytest.approx(loss, rel=1e-6)
    assert float(inp.logp.grad) == pytest.approx(grad, abs=1e-6)
    assert "clip/dual_frac" in m


def test_two_sided_clip_off_by_default_and_validated():
    inp = inp_from_ratios([[LN(10.0)]], [-1.0])
    out, m = POLICY_LOSSES.get("ppo_clip")(inp)
    assert float(out) == pytest.approx(10.0) and "clip/dual_frac" not in m
    with pytest.raises(ValueError, match="clip_ratio_c"):
        POLICY_LOSSES.get("ppo_clip")(inp, clip_ratio_c=0.5)


def test_ts_grpo_kl_is_a_token_mean_over_the_batch_not_a_sequence_mean():
    # adv = 0, on-policy: the policy term is 0 and the loss is beta * KL alone.
    # logp = 0; ref_logp: row 0 has one token with d = ln 2, row 1 three tokens with d = 0.
    # k3 = e^d - d - 1: row 0 -> 2 - ln 2 - 1 = 0.306853, row 1 -> 0, 0, 0.
    # token mean (TS-GRPO): beta * 0.306853 / 4 tokens = 0.5 * 0.076713 = 0.038357
    # (a sequence mean would give 0.5 * (0.306853 / 1 + 0 / 3) / 2 = 0.076713)
    from grpokit.algos.kl import KL_ESTIMATORS
    from grpokit.algos.objective import ObjectiveTerms, grpo_objective
    from grpokit.config.loading import load_config
    from grpokit.trainer.learner import Objective

    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    logp = torch.zeros(2, 3, requires_grad=True)
    ref = torch.tensor([[LN(2.0), 0.0, 0.0], [0.0, 0.0, 0.0]])
    inp = LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.zeros(2), mask=mask, ref_logp=ref,
                     plan_mask=torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    cfg = load_config(preset="ts_grpo", overrides=["algorithm.beta=0.5"])
    obj = Objective.from_config(cfg, POLICY_LOSSES.get("ts_grpo"))
    assert obj.kl_aggregate is AGGREGATIONS.get("token_mean")  # declared by the registration, wired by the learner
    assert obj.terms().kl_aggregate is obj.kl_aggregate  # Objective builds the terms grpo_objective takes
    loss, metrics = grpo_objective(inp, ObjectiveTerms(obj.policy_loss, obj.aggregate, kl_estimator=KL_ESTIMATORS.get("k3"),
                                                       beta=0.5, loss_options=obj.loss_options, kl_aggregate=obj.kl_aggregate))
    assert float(loss) == pytest.approx(0.5 * (1.0 - LN(2.0)) / 4, rel=1e-6)
    # the sequence-mean objective of other losses is unchanged: same batch through ppo_clip averages per sequence
    grpo, _ = grpo_objective(inp, ObjectiveTerms(POLICY_LOSSES.get("ppo_clip"), SMTM, kl_estimator=KL_ESTIMATORS.get("k3"), beta=0.5))
    assert float(grpo) == pytest.approx(0.5 * (1.0 - LN(2.0)) / 2, rel=1e-6)
