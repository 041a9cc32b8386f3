"""A whole learner step is the same with StreamBP (train.sequence_chunk) as without."""

import torch

from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.loop import Trainer


def test_trainer_step_with_sequence_chunk_equals_plain_step(tiny_cfg):
    """GSPO's sequence-level ratio and an entropy bonus: losses that need the whole row at once."""
    results = []
    for chunk in (0, 3):
        cfg = tiny_cfg(**{"algorithm.ratio": "sequence", "algorithm.entropy_coef": 0.01, "train.sequence_chunk": chunk,
                          "rollout.max_new_tokens": 10})
        trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=5))
        m = trainer.train_step()
        results.append((m, torch.cat([p.detach().flatten() for p in trainer.model.parameters()])))
    (m0, w0), (m1, w1) = results
    assert m0["reward/mean"] == m1["reward/mean"] and m0["completion_len/max"] > 3
    for key in ("loss", "grad_norm"):
        assert abs(m0[key] - m1[key]) <= 1e-5 * max(1.0, abs(m0[key])), key
    torch.testing.assert_close(w1, w0, atol=1e-6, rtol=1e-5)
