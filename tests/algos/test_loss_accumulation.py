"""Every registered loss: micro-batches cut at group boundaries accumulate to the full-batch gradient."""

import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.losses import POLICY_LOSSES, LossInputs
from grpokit.algos.objective import BatchTotals, ObjectiveTerms, grpo_objective

G, GROUPS, T = 3, 2, 5
ROWS = G * GROUPS


def batch(seed):
    g = torch.Generator().manual_seed(seed)
    logp = torch.randn(ROWS, T, generator=g) * 0.2 - 1
    mask = (torch.rand(ROWS, T, generator=g) > 0.3).float()
    mask[:, 0] = 1
    return {
        "logp": logp,
        "old_logp": logp + 0.05 * torch.randn(ROWS, T, generator=g),
        "adv": torch.tensor([1.0, -0.4, -0.6, 0.5, 0.5, -1.0]),
        "mask": mask,
        "group_ids": torch.arange(GROUPS).repeat_interleave(G),
        "rewards": torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]),
        "teacher_logp": logp + 0.1 * torch.randn(ROWS, T, generator=g),
        "ref_logp": logp + 0.05 * torch.randn(ROWS, T, generator=g),  # humanline's synced reference
        "aux_logp": logp - 0.2 * torch.rand(ROWS, T, generator=g),
        "plan_mask": (torch.arange(T) < 2).float().expand(ROWS, T).clone(),
        "verif_mask": (torch.arange(T) >= 3).float().expand(ROWS, T).clone(),
        "verif_adv": torch.tensor([0.3, -0.3, 0.0, 1.0, -0.5, -0.5]),
        "prev_logp": logp + 0.05 * torch.randn(ROWS, T, generator=g),  # reg_grpo's previous-iteration policy
    }


def grad(name, aggregation, rows_per_part):
    data = batch(0)
    logp = data.pop("logp").requires_grad_(True)
    for start in range(0, ROWS, rows_per_part):
        rows = slice(start, start + rows_per_part)
        inp = LossInputs(logp=logp[rows], **{k: v[rows] for k, v in data.items()})
        loss, _ = grpo_objective(
            inp,
            ObjectiveTerms(POLICY_LOSSES.get(name), AGGREGATIONS.get(aggregation),
                           loss_options={"epsilon_low": 0.2, "epsilon_high": 0.28}),  # what the trainer passes every loss
            BatchTotals(num_seqs=float(ROWS), num_tokens=float(data["mask"].sum())),
        )
        loss.backward()
    return logp.grad


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean"])
@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_group_aligned_accumulation_equals_full_batch(name, aggregation):
    full = grad(name, aggregation, ROWS)
    assert torch.isfinite(full).all() and float(full.abs().max()) > 0
    assert torch.allclose(grad(name, aggregation, G), full, atol=1e-7)
