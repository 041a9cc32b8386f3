"""A deliberately stale batch (k = 1) is trained with decoupled PPO, checked against the formula by hand.

Decoupled PPO (AReaL, arXiv 2505.24298) at mu = 1: the proximal policy is the learner's current
weights, so r = pi_theta / pi_prox = 1 (value) and the clip is inactive; the behaviour weight
w_t = pi_prox(o_t) / pi_behav(o_t) (0 above the cap) multiplies each token's term:

    L      = (1/B) sum_i (1/|o_i|) sum_t  -w_it A_i r_it          (seq_mean_token_mean)
    dL/dθ  = (1/B) sum_i (1/|o_i|) sum_t  -w_it A_i d log pi_θ(o_it) / dθ
"""

import copy

import pytest
import torch

from grpokit.model.grad_sinks import in_place_embedding_grads
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.loop import Trainer


def _stale_batch(trainer, seed=0):
    """A batch sampled by a perturbed copy of the policy: the weights of one learner step ago."""
    stale = copy.deepcopy(trainer.model)
    with torch.no_grad():
        for p in stale.parameters():
            p.add_(0.05 * torch.randn_like(p))
    from grpokit.rollout.hf import HFBackend

    rows = trainer.splits.train[:2]
    torch.manual_seed(seed)
    batch = HFBackend(stale, trainer.tokenizer).generate(trainer._prompt_texts(rows), rows, 4, SamplingParams(6, 1.0))
    batch.weights_version = 0  # sampled at step 0, learned at step 1: staleness 1
    return batch


def test_stale_batch_loss_and_gradient_equal_the_decoupled_ppo_formula(tiny_cfg):
    trainer = Trainer(tiny_cfg(**{"optim.max_grad_norm": 0.0, "train.skip_zero_advantage": False}), *tiny_model_and_tokenizer(seed=3))
    trainer.step = 1
    batch = _stale_batch(trainer)
    adv = torch.linspace(-1.0, 1.0, len(batch))
    lb = LearnBatch(rollout=batch, adv=adv, mask=batch.completion_mask.clone(), rewards=torch.zeros(len(batch)),
                    behaviour_logp=batch.behaviour_logp)
    captured = {}

    def capture():
        captured["grads"] = [p.grad.clone() for p in trainer.model.parameters()]
        return 0.0

    trainer._optimizer_step = capture
    metrics = trainer._learn(lb)

    # by hand: current log-probs with gradient, behaviour weights from the recorded sampler log-probs
    trainer.model.zero_grad(set_to_none=True)
    fwd = trainer.policy.learn_forward(batch, with_entropy=False, entropy_grad=False)  # same forward/backward mechanics
    logp = fwd.logp
    mask = batch.completion_mask.float()
    w = torch.exp(logp.detach() - batch.sampling_logp) * mask
    w = torch.where(w > 5.0, torch.zeros_like(w), w)  # AReaL's cap (default 5): tokens above it get weight 0
    per_token = -w * adv[:, None] * torch.exp(logp - logp.detach())
    loss = ((per_token * mask).sum(-1) / mask.sum(-1)).sum() / len(batch)
    with in_place_embedding_grads(trainer.model):
        fwd.backward(loss)

    assert metrics["offpolicy/staleness"] == 1.0
    assert abs(metrics["loss"] - float(loss.detach())) < 1e-5
    assert metrics["offpolicy/kl_k3"] > 0  # the stale sampler differs from the learner
    for got, p in zip(captured["grads"], trainer.model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-6)


def test_stale_batch_without_correction_trains_a_different_gradient(tiny_cfg):
    def grads(correction):
        trainer = Trainer(tiny_cfg(**{"optim.max_grad_norm": 0.0, "train.skip_zero_advantage": False,
                                      "algorithm.correction": correction}), *tiny_model_and_tokenizer(seed=3))
        trainer.step = 1
        batch = _stale_batch(trainer)
        lb = LearnBatch(rollout=batch, adv=torch.linspace(-1.0, 1.0, len(batch)), mask=batch.completion_mask.clone(),
                        rewards=torch.zeros(len(batch)), behaviour_logp=batch.behaviour_logp)
        out = {}

        def capture():
            out["g"] = torch.cat([p.grad.flatten() for p in trainer.model.parameters()])
            return 0.0

        trainer._optimizer_step = capture
        out["metrics"] = trainer._learn(lb)
        return out

    corrected, plain = grads("auto"), grads("none")
    assert not torch.allclose(corrected["g"], plain["g"], rtol=1e-3, atol=1e-7)
    # trained uncorrected on purpose, the batch still reports how far the sampler was from the learner
    assert plain["metrics"]["offpolicy/kl_k3"] == corrected["metrics"]["offpolicy/kl_k3"] > 0
    assert "offpolicy/truncated_frac" not in plain["metrics"]


def test_on_policy_in_process_batch_is_not_corrected(tiny_cfg):
    trainer = Trainer(tiny_cfg(), *tiny_model_and_tokenizer(seed=3))
    metrics = trainer.train_step()
    assert not any(k.startswith("offpolicy/") for k in metrics)


def test_a_declared_loss_input_missing_from_the_batch_is_an_error_not_another_method(tiny_cfg):
    """Were a producer missing, the span-aware loss would train its answer term alone: the learner refuses."""
    trainer = Trainer(tiny_cfg(**{"algorithm.loss": "ts_grpo", "algorithm.plan_delimiter": "QQQ"}), *tiny_model_and_tokenizer(seed=3))
    batch = _stale_batch(trainer)
    lb = LearnBatch(rollout=batch, adv=torch.ones(len(batch)), mask=batch.completion_mask.clone(),
                    rewards=torch.zeros(len(batch)), behaviour_logp=batch.behaviour_logp)  # no plan_mask
    with pytest.raises(ValueError, match=r"declares inputs \['plan_mask'\] but this batch has none"):
        trainer._learn(lb)
