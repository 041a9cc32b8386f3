"""Rows whose advantages are all 0 are left out of the learner only where that is the same update."""

import pytest
import torch

from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.loop import Trainer


def _learn_once(cfg, adv_of_group):
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=5))
    rows = trainer.splits.train[:2]
    texts = trainer._prompt_texts(rows)
    torch.manual_seed(0)
    batch = trainer.backend.generate(texts, rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
    adv = torch.tensor([adv_of_group[g] for g in batch.group_ids.tolist()]) * torch.linspace(-1, 1, len(batch))
    mask = batch.completion_mask.clone()
    lb = LearnBatch(rollout=batch, adv=adv, mask=mask, rewards=torch.zeros(len(batch)), behaviour_logp=batch.sampling_logp)
    metrics = trainer._learn(lb)
    return metrics, torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


# cispo and humanline (which reads the synced reference) with mu = 2, so the second update is off-policy;
# before issue 28 neither skipped a row (CISPO's study steps cost as much as with no group solved)
LOSSES = {
    "ppo_clip": {},
    "cispo": {"algorithm.loss": "cispo", "algorithm.num_iterations": 2, "optim.lr": 0.01},
    "humanline": {"algorithm.loss": "humanline", "algorithm.ref_sync_every": 1, "algorithm.num_iterations": 2, "optim.lr": 0.01},
}


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("adv_of_group", [(0.0, 1.0), (0.0, 0.0)])  # one group solved / every group solved
def test_skipping_zero_advantage_rows_gives_the_same_update(tiny_cfg, adv_of_group, loss):
    common = {"optim.weight_decay": 0.1, **LOSSES[loss]}
    plain_m, plain_w = _learn_once(tiny_cfg(**{"train.skip_zero_advantage": False, **common}), adv_of_group)
    skip_m, skip_w = _learn_once(tiny_cfg(**common), adv_of_group)
    assert skip_m["learn/skipped_rows"] == (0.5 if adv_of_group[1] else 1.0) and "learn/skipped_rows" not in plain_m
    torch.testing.assert_close(skip_w, plain_w, atol=1e-6, rtol=1e-5)  # AdamW steps (decay) even on a zero gradient
    assert abs(skip_m["grad_norm"] - plain_m["grad_norm"]) <= 1e-5 * max(1.0, plain_m["grad_norm"])


def test_rows_are_kept_when_a_term_has_gradient_without_advantage(tiny_cfg):
    for overrides in ({"algorithm.beta": 0.04}, {"algorithm.entropy_coef": 0.01}, {"algorithm.loss": "disco"}):
        metrics, _ = _learn_once(tiny_cfg(**overrides), (0.0, 1.0))
        assert "learn/skipped_rows" not in metrics, overrides
