"""GRPO-Verif's verification rollout ("From Solving to Verifying", arXiv 2511.15137)."""

import pytest
import torch

from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.loop import Trainer
from grpokit.trainer.verification import parse_verdict, verification_rewards


@pytest.mark.parametrize(
    "text,verdict",
    [("Yes, it is correct.", True), ("No.", False), ("That is incorrect", False), ("The answer is wrong, not right", False),
     ("hmm", None), ("Correct!", True)],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) is verdict


def test_verification_rewards_spec_example():
    # paper's reward rule: solutions [correct, incorrect], verdicts [correct, correct] -> rewards [+1, -1]
    assert verification_rewards([True, True], [True, False]).tolist() == [1.0, -1.0]
    assert verification_rewards([None], [True]).tolist() == [-1.5]


def test_grpo_verif_trains_with_verification_rows(tiny_cfg):
    cfg = tiny_cfg(**{"train.steps": 1, "algorithm.loss": "grpo_verif", "verification.enabled": "true",
                      "verification.max_new_tokens": 4})
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    m = trainer.train_step()
    for key in ("verif/reward_mean", "verif/accuracy", "verif/valid_frac", "verif/token_frac"):
        assert key in m, key
    assert m["verif/token_frac"] > 0  # verification tokens reached the loss
    assert torch.isfinite(torch.tensor(m["loss"]))
