import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.kl import KL_ESTIMATORS
from grpokit.algos.losses import POLICY_LOSSES, LossInputs, ppo_clip_loss
from grpokit.algos.objective import BatchTotals, ObjectiveTerms, grpo_objective


def inputs(logp, old, adv, mask, ref=None):
    return LossInputs(logp=logp, old_logp=old, adv=adv, mask=mask, ref_logp=ref)


def test_ppo_clip_hand_computed():
    # ratios exp([0, ln 1.5, ln 0.5]) = [1, 1.5, 0.5]; eps 0.2
    logp = torch.log(torch.tensor([[1.0, 1.5, 0.5]]))
    old = torch.zeros(1, 3)
    mask = torch.ones(1, 3)
    loss, m = POLICY_LOSSES.get("ppo_clip")(inputs(logp, old, torch.tensor([2.0]), mask), epsilon_low=0.2, epsilon_high=0.2)
    # A = 2: min(r A, clip(r) A) = [2, min(3, 2.4) = 2.4, min(1, 1.6) = 1.0]
    assert torch.allclose(loss, -torch.tensor([[2.0, 2.4, 1.0]]))
    assert float(m["clip/frac"]) == pytest.approx(1 / 3)


def test_clipped_token_has_zero_gradient():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]])).requires_grad_(True)
    old = torch.zeros(1, 3)
    loss, _ = ppo_clip_loss(inputs(logp, old, torch.tensor([1.0]), torch.ones(1, 3)), epsilon_low=0.2, epsilon_high=0.2)
    loss.sum().backward()
    # A > 0 and r = 1.5 > 1.2 -> grad 0; r = 0.5 (A > 0) not clipped in min -> grad -r = -0.5
    assert float(logp.grad[0, 0]) == 0.0
    assert float(logp.grad[0, 1]) == pytest.approx(-0.5)
    assert float(logp.grad[0, 2]) == pytest.approx(-1.1)


def test_separate_eps_low_high():
    logp = torch.log(torch.tensor([[1.25, 0.75]]))
    old = torch.zeros(1, 2)
    # A < 0: clip(r, 1-0.1, 1+0.3): r = 0.75 -> 0.9; objective min(-0.75, -0.9) = -0.9
    loss, _ = ppo_clip_loss(inputs(logp, old, torch.tensor([-1.0]), torch.ones(1, 2)), epsilon_low=0.1, epsilon_high=0.3)
    assert torch.allclose(loss, torch.tensor([[1.25, 0.9]]))


def test_on_policy_gradient_matches_formula():
    # On-policy, beta = 0, seq-mean-token-mean: grad = -(1/G) sum_i A_i (1/|o_i|) sum_t grad logp
    torch.manual_seed(0)
    logp = torch.randn(3, 4).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -0.5, 2.0])
    loss, _ = grpo_objective(inputs(logp, logp.detach(), adv, mask), ObjectiveTerms(ppo_clip_loss, AGGREGATIONS.get("seq_mean_token_mean")))
    loss.backward()
    lengths = mask.sum(-1, keepdim=True)
    expected = -(adv.unsqueeze(-1) * mask / lengths) / 3
    assert torch.allclose(logp.grad, expected, atol=1e-6)


def test_kl_term_added_with_beta():
    logp = torch.zeros(1, 2, requires_grad=True)
    ref = torch.tensor([[0.5, -0.5]])
    loss, m = grpo_objective(
        inputs(logp, logp.detach(), torch.zeros(1), torch.ones(1, 2), ref),
        ObjectiveTerms(ppo_clip_loss, AGGREGATIONS.get("token_mean"), kl_estimator=KL_ESTIMATORS.get("k3"), beta=0.1),
    )
    k3 = (torch.exp(ref) - ref - 1).mean()
    assert float(loss) == pytest.approx(0.1 * float(k3), rel=1e-6)
    assert float(m["kl"]) == pytest.approx(float(k3), rel=1e-6)


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_every_loss_invariants(name):
    """Every registered loss: no gradient to old/ref/teacher log-probs or advantages, masked
    tokens never change the loss, zero advantage (beta = 0, no extra terms) gives zero gradient."""
    fn = POLICY_LOSSES.get(name)
    torch.manual_seed(1)
    logp = (torch.randn(4, 5) * 0.1 - 1).requires_grad_(True)
    old = (logp.detach() + torch.randn(4, 5) * 0.05).requires_grad_(True)
    ref = (logp.detach() + torch.randn(4, 5) * 0.05).requires_grad_(True)
    teacher = (logp.detach() + torch.randn(4, 5) * 0.05).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], requires_grad=True)
    mask = (torch.rand(4, 5) > 0.3).float()
    mask[:, 0] = 1
    extras = dict(group_ids=torch.tensor([0, 0, 1, 1]), rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]))

    def loss_of(lp, o, r, t):
        inp = LossInputs(logp=lp, old_logp=o, prev_logp=o, adv=adv, mask=mask, ref_logp=r, teacher_logp=t, **extras)
        per_tok, _ = fn(inp)
        return AGGREGATIONS.get("token_mean")(per_tok, mask)

    loss = loss_of(logp, old, ref, teacher)
    loss.backward()
    for t in (old, ref, teacher, adv):
        assert t.grad is None or float(t.grad.abs().max()) == 0.0
    assert float(logp.grad[mask == 0].abs().max()) == 0.0
    # values at masked positions are irrelevant
    junk = (1 - mask) * 3.0
    with torch.no_grad():
        moved = loss_of(logp - junk, old + junk, ref - junk, teacher + junk)
    assert float(moved) == pytest.approx(float(loss.detach()), rel=1e-6, abs=1e-7)
    # zero advantage -> zero gradient
    logp2 = logp.detach().clone().requires_grad_(True)
    # humanline and kdrl refuse to run without their reference / teacher; kdrl's distillation term is off (kd_coef 0)
    no_extra_terms = {"kd_coef": 0.0} if name == "kdrl" else {}
    per_tok, _ = fn(LossInputs(logp=logp2, old_logp=old.detach(), prev_logp=old.detach(), adv=torch.zeros(4), mask=mask,
                               ref_logp=ref.detach(),
                               teacher_logp=teacher.detach(), **extras), **no_extra_terms)
    AGGREGATIONS.get("token_mean")(per_tok, mask).backward()
    assert float(logp2.grad.abs().max()) == 0.0


def test_batch_totals_normalise_a_micro_batch_by_the_whole_batch():
    # A = 1 on-policy: ppo_clip's per-token loss is -1 on each of the 2 tokens of this micro-batch.
    # token_mean over the optimizer batch's 8 tokens: -2 / 8 = -0.25 (alone: -2 / 2 = -1);
    # constant (Dr.GRPO) with 4 sequences of cap 5: -2 / (4 * 5) = -0.1
    logp = torch.zeros(1, 2)
    inp = inputs(logp, logp, torch.ones(1), torch.ones(1, 2))
    token_mean = ObjectiveTerms(ppo_clip_loss, AGGREGATIONS.get("token_mean"))
    assert float(grpo_objective(inp, token_mean)[0]) == pytest.approx(-1.0)
    assert float(grpo_objective(inp, token_mean, BatchTotals(num_tokens=8.0))[0]) == pytest.approx(-0.25)
    constant = ObjectiveTerms(ppo_clip_loss, AGGREGATIONS.get("constant"))
    assert float(grpo_objective(inp, constant, BatchTotals(num_seqs=4.0, max_len=5))[0]) == pytest.approx(-0.1)
    with pytest.raises(ValueError, match="max_len"):
        grpo_objective(inp, constant)


def test_entropy_bonus_subtracts_coef_times_entropy():
    logp = torch.zeros(1, 2)
    ent = torch.tensor([[1.0, 3.0]], requires_grad=True)
    inp = LossInputs(logp=logp, old_logp=logp, adv=torch.zeros(1), mask=torch.ones(1, 2), entropy=ent)
    loss, _ = grpo_objective(inp, ObjectiveTerms(ppo_clip_loss, AGGREGATIONS.get("token_mean"), entropy_coef=0.1))
    # adv = 0: loss = -0.1 * mean(1, 3) = -0.2; d loss / d H = -0.1 / 2 per token
    assert float(loss) == pytest.approx(-0.2)
    loss.backward()
    assert torch.allclose(ent.grad, torch.tensor([[-0.05, -0.05]]))
