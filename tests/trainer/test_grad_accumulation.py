"""Gradient accumulation invariance: batch 8 x 1 micro-batch == 8 micro-batches of 1 (TRL's test)."""

import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.kl import KL_ESTIMATORS
from grpokit.algos.losses import POLICY_LOSSES
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.families.causal_lm.policy import CausalLMPolicy
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.learner import Objective, accumulate_gradients, micro_batches
from grpokit.trainer.producers import score_inputs


def learn_batch(batch, adv, **fields):
    return LearnBatch(rollout=batch, adv=adv, mask=batch.completion_mask, rewards=torch.zeros(len(batch)),
                      behaviour_logp=batch.sampling_logp, **fields)


def grads(policy, batch, micro, aggregation, beta):
    model = policy.module
    model.zero_grad(set_to_none=True)
    objective = Objective(
        policy_loss=POLICY_LOSSES.get("ppo_clip"),
        aggregate=AGGREGATIONS.get(aggregation),
        kl_estimator=KL_ESTIMATORS.get("k3"),
        beta=beta,
        loss_options={"epsilon_low": 0.2, "epsilon_high": 0.2},
        max_len=6,
    )
    adv = torch.linspace(-1.5, 1.5, len(batch))
    parts = micro_batches(batch, micro)
    lb = learn_batch(batch, adv)
    if beta > 0:
        score_inputs(policy, lb, parts, ["old_logp"])
        lb.ref_logp, lb.old_logp = lb.old_logp + 0.1, None  # a fixed, different "reference"
    accumulate_gradients(policy, parts, lb, objective)
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_one_batch_of_8_equals_8_micro_batches(rollout, aggregation, beta):
    policy, batch = rollout
    g_full = grads(policy, batch, 8, aggregation, beta)
    g_acc = grads(policy, batch, 1, aggregation, beta)
    assert g_full.abs().max() > 0
    torch.testing.assert_close(g_acc, g_full, atol=1e-6, rtol=1e-5)


def test_entropy_band_regulariser_is_micro_batch_invariant(rollout):
    """SPINE's band penalty (per-row quantiles, batch fork count) sums exactly over micro-batches."""
    policy, batch = rollout
    model = policy.module
    weights = (torch.rand(batch.completion_mask.shape, generator=torch.Generator().manual_seed(0)) > 0.5).float()

    def band_grads(micro):
        model.zero_grad(set_to_none=True)
        objective = Objective(
            policy_loss=POLICY_LOSSES.get("ppo_clip"), aggregate=AGGREGATIONS.get("token_mean"),
            kl_estimator=None, beta=0.0, loss_options={}, max_len=6, entropy_band_coef=1.0,
        )
        lb = learn_batch(batch, torch.zeros(len(batch)), token_weights=weights * batch.completion_mask)
        accumulate_gradients(policy, micro_batches(batch, micro), lb, objective)
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    full, acc = band_grads(8), band_grads(1)
    assert full.abs().max() > 0  # zero advantage: the gradient is the band penalty's alone
    torch.testing.assert_close(acc, full, atol=1e-6, rtol=1e-5)


def test_micro_batches_sort_rows_by_length_inside_groups():
    """Rows of similar length share a micro-batch (less padding); groups stay contiguous and in order."""
    from grpokit.rollout.types import RolloutBatch
    from grpokit.trainer.learner import micro_batches

    lengths = [5, 1, 4, 2, 3, 3, 1, 6]
    mask = torch.tensor([[1] * n + [0] * (6 - n) for n in lengths])
    b = RolloutBatch(
        prompt_ids=torch.ones(8, 2, dtype=torch.long), prompt_mask=torch.ones(8, 2, dtype=torch.long),
        completion_ids=torch.ones(8, 6, dtype=torch.long), completion_mask=mask,
        group_ids=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), sampling_logp=torch.zeros(8, 6),
        truncated=torch.zeros(8, dtype=torch.bool), prompts=["p"] * 8, completions=["c"] * 8, rows=[{}] * 8,
    )
    parts = micro_batches(b, 2)
    assert [r.tolist() for r, _ in parts] == [[1, 3], [2, 0], [6, 4], [5, 7]]
    assert [mb.completion_ids.shape[1] for _, mb in parts] == [2, 5, 3, 6]  # unsorted: 5, 4, 3, 6
