"""Through the real learner: DisCO with its constraint active and SPINE's fork-restricted KL give the same
gradient for one micro-batch as for several (batch 8 x 1 == 2 x 4 whole groups, or 8 x 1 rows)."""

import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.kl import KL_ESTIMATORS
from grpokit.algos.losses import POLICY_LOSSES
from grpokit.config import load_config
from grpokit.families.causal_lm.policy import CausalLMPolicy
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.learner import Objective, accumulate_gradients, micro_batches
from grpokit.trainer.producers import constraint_kl, score_inputs


class OneLearner:
    """The single-process learners' all-reduce (identity)."""

    def all_sum(self, value):
        return value


def _grads(policy, lb, parts, objective):
    model = policy.module
    model.zero_grad(set_to_none=True)
    metrics = accumulate_gradients(policy, parts, lb, objective)
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), metrics


def test_disco_with_active_constraint_is_micro_batch_invariant(rollout):
    policy, batch = rollout
    lengths = batch.completion_mask.sum(-1)
    assert len(set(lengths[:4].tolist()) | set(lengths[4:].tolist())) > 1  # groups of unequal token counts
    lb = LearnBatch(rollout=batch, adv=torch.tensor([1.0, -1.0, 0.5, -0.5] * 2), mask=batch.completion_mask.float(),
                    rewards=torch.zeros(8), behaviour_logp=batch.sampling_logp)
    full_parts = micro_batches(batch, 8)
    score_inputs(policy, lb, full_parts, ["old_logp"])
    lb.old_logp = lb.old_logp + 0.05 * lb.mask  # as after an update: D = 0.05 > delta
    lb.constraint_kl = constraint_kl(policy, lb, full_parts, OneLearner())
    assert float(lb.constraint_kl) == pytest.approx(0.05, rel=1e-3)
    objective = Objective(
        policy_loss=POLICY_LOSSES.get("disco"), aggregate=AGGREGATIONS.get("seq_mean_token_mean"), kl_estimator=None,
        beta=0.0, loss_options={"epsilon_low": 0.2, "epsilon_high": 0.2, "ratio": "token", "delta": 1e-4, "constraint_beta": 1e3},
        max_len=6,
    )
    g_full, m_full = _grads(policy, lb, full_parts, objective)
    g_acc, m_acc = _grads(policy, lb, micro_batches(batch, 4), objective)  # DisCO is groupwise: whole groups
    assert g_full.abs().max() > 0
    torch.testing.assert_close(g_acc, g_full, atol=1e-6, rtol=1e-5)
    assert m_acc["loss"] == pytest.approx(m_full["loss"], rel=1e-5)


def test_spine_fork_kl_is_micro_batch_invariant(rollout):
    """token_weights 'forking' declares kl_scope 'selected': the learner normalises the policy term and the KL by the
    batch's fork count (token mean over the forks), so micro-batches sum to the full batch."""
    policy, batch = rollout
    cfg = load_config(preset="spine", overrides=["algorithm.beta=0.1", "algorithm.entropy_band_coef=0.0"])
    objective = Objective.from_config(cfg, POLICY_LOSSES.get("ppo_clip"))
    assert objective.kl_scope == "selected"
    objective.kl_estimator, objective.max_len = KL_ESTIMATORS.get("k3"), 6
    mask = batch.completion_mask.float()
    forks = (torch.rand(mask.shape, generator=torch.Generator().manual_seed(0)) > 0.6).float() * mask
    lb = LearnBatch(rollout=batch, adv=torch.linspace(-1.0, 1.0, 8), mask=mask, rewards=torch.zeros(8),
                    behaviour_logp=batch.sampling_logp, token_weights=forks)
    score_inputs(policy, lb, micro_batches(batch, 8), ["old_logp"])
    lb.ref_logp, lb.old_logp = lb.old_logp + 0.1, None  # a fixed, different reference; on-policy policy term
    g_full, _ = _grads(policy, lb, micro_batches(batch, 8), objective)
    g_acc, _ = _grads(policy, lb, micro_batches(batch, 1), objective)
    assert g_full.abs().max() > 0
    torch.testing.assert_close(g_acc, g_full, atol=1e-6, rtol=1e-5)


def test_lambda_grpo_preset_weights_the_kl():
    cfg = load_config(preset="lambda_grpo")
    assert Objective.from_config(cfg, POLICY_LOSSES.get("ppo_clip")).kl_scope == "weighted"
