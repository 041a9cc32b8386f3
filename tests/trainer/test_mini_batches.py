"""algorithm.mini_batches: one rollout batch, several optimizer updates on whole-group mini-batches (TRL's steps_per_generation)."""

import pytest
import torch

from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.inputs import RunContractError, check_run
from grpokit.trainer.learn_batch import LearnBatch, mini_batch_rows
from grpokit.trainer.loop import Trainer


def test_mini_batches_are_whole_groups_covering_the_batch_once_in_batch_order():
    gids = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    runs = mini_batch_rows(gids, 2, seed=3)
    assert [len(r) for r in runs] == [6, 4]  # 5 groups into 2: 3 + 2 groups of 2 rows
    assert sorted(torch.cat(runs).tolist()) == list(range(10))
    for r in runs:
        assert torch.equal(r, r.sort().values)  # batch order: each group's rows stay adjacent
        assert all(int((gids[r] == g).sum()) in (0, 2) for g in range(5))  # whole groups only
    assert all(torch.equal(a, b) for a, b in zip(runs, mini_batch_rows(gids, 2, seed=3)))  # a function of the seed
    orders = {tuple(mini_batch_rows(gids, 5, seed=s)[0].tolist()) for s in range(8)}
    assert len(orders) > 1  # the seed draws the order
    assert [len(r) for r in mini_batch_rows(torch.tensor([0, 0, 1, 1]), 3, seed=0)] == [2, 2, 0]  # fewer groups than k


def _trainer_and_batch(tiny_cfg, adv_scale=(1.0, 1.0), **sets):
    trainer = Trainer(tiny_cfg(**{"optim.lr": 0.05, **sets}), *tiny_model_and_tokenizer(seed=5))
    rows = trainer.splits.train[:2]
    torch.manual_seed(0)
    batch = trainer.backend.generate(trainer._prompt_texts(rows), rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
    adv = torch.tensor([adv_scale[g] for g in batch.group_ids.tolist()]) * torch.linspace(-1, 1, len(batch))
    lb = LearnBatch(rollout=batch, adv=adv, mask=batch.completion_mask.clone(), rewards=torch.zeros(len(batch)),
                    behaviour_logp=batch.sampling_logp)
    return trainer, lb


def _weights(model):
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def test_the_first_update_is_an_update_on_its_mini_batch_alone_and_the_second_is_clipped_against_the_sampler(tiny_cfg):
    split, lb = _trainer_and_batch(tiny_cfg, **{"algorithm.mini_batches": 2})
    after_first = {}
    split.update_hooks.append(lambda ctx, n: after_first.setdefault(n, _weights(split.model)) is None or [])  # pre-update weights
    first_rows = mini_batch_rows(lb.rollout.group_ids, 2, split._split_seed())[0]
    metrics = split._learn(lb)
    assert metrics["learn/updates"] == 2.0 and split.updates == 2
    assert lb.old_logp is not None  # the pre-update policy was scored: later mini-batches' ratios read it
    assert metrics["clip/frac"] > 0  # the second mini-batch moved off the sampler's policy (lr 0.05) and was clipped

    alone, lb2 = _trainer_and_batch(tiny_cfg)  # same start, same samples, one update on the first mini-batch only
    alone._learn(lb2.select(first_rows))
    torch.testing.assert_close(after_first[2], _weights(alone.model), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(after_first[2], _weights(split.model))  # and the second update moved the weights on


def test_a_mini_batch_without_gradient_takes_an_update_of_size_0_that_the_schedule_counts(tiny_cfg):
    trainer, lb = _trainer_and_batch(tiny_cfg, adv_scale=(0.0, 1.0), **{"algorithm.mini_batches": 2, "algorithm.num_iterations": 2, "optim.lr": 1e-4})
    metrics = trainer._learn(lb)
    assert trainer.updates == 4  # 2 passes x 2 mini-batches, whatever their gradient
    assert metrics["learn/updates"] == 2.0  # only the mini-batch holding group 1 moved the weights, once per pass


@pytest.mark.parametrize("sets, named", [
    ({"algorithm.mini_batches": 3}, "rollout.prompts_per_step >= 3"),
    ({"algorithm.mini_batches": 2, "verification.enabled": True, "algorithm.loss": "grpo_verif"}, "verification.enabled"),
])
def test_a_split_the_run_cannot_make_is_refused_in_one_line(tiny_cfg, sets, named):
    with pytest.raises(RunContractError, match=named.replace(".", r"\.")) as err:
        check_run(tiny_cfg(**sets))
    assert "\n" not in str(err.value)


def test_after_a_reference_sync_each_later_mini_batch_reads_the_moved_reference(tiny_cfg, monkeypatch):
    """Humanline syncs the reference before every update: each mini-batch's ref_logp is rescored, on its own rows only."""
    import dataclasses

    from grpokit.trainer import producers, updates

    trainer, lb = _trainer_and_batch(tiny_cfg, **{"algorithm.loss": "humanline", "algorithm.ref_sync_every": 1, "algorithm.mini_batches": 2,
                                                  "algorithm.num_iterations": 2, "optim.lr": 0.01})
    seen, real = [], updates.accumulate_gradients

    def checked(policy, parts, sub, objective, **kw):
        fresh = dataclasses.replace(sub, ref_logp=None)
        producers.score_inputs(policy, fresh, parts, ["ref_logp"])  # the reference as it is right now
        seen.append((sub.ref_logp.clone(), fresh.ref_logp, len(sub)))
        return real(policy, parts, sub, objective, **kw)

    monkeypatch.setattr(updates, "accumulate_gradients", checked)
    trainer._learn(lb)
    assert [n for *_, n in seen] == [4, 4, 4, 4]  # 2 passes x 2 mini-batches of one group each
    for used, fresh, _ in seen:
        torch.testing.assert_close(used, fresh, atol=1e-6, rtol=1e-5)  # never a stale reference
    assert not torch.allclose(seen[0][0], seen[2][0])  # pass 2 re-reads the same rows under a reference that moved
