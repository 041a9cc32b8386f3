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
    torch.testing.assert_close(skip_w, plain_w, atol=1e-6, rtol=1e-5)
    if adv_of_group[1]:
        assert skip_m["learn/skipped_rows"] == 0.5 and "learn/skipped_rows" not in plain_m
        assert abs(skip_m["grad_norm"] - plain_m["grad_norm"]) <= 1e-5 * max(1.0, plain_m["grad_norm"])
    else:  # a gradient of exactly 0: no update either way (optim.step_without_gradient=false)
        assert skip_m["learn/updates"] == plain_m["learn/updates"] == 0.0
        assert skip_m["loss"] == skip_m["grad_norm"] == 0.0  # the loss and its gradient are exactly 0 (logged as TRL logs them)


def test_a_zero_gradient_batch_moves_no_weight_unless_asked(tiny_cfg):
    """AdamW on a zero gradient still moves the weights: by its momentum m / (sqrt(v) + eps) and its decay.

    A first update with a real gradient fills the moments; a second batch whose advantages are all 0
    then moves nothing by default, and by lr * (0.9 m / (sqrt(0.99 v) + eps) + wd * w) per weight with
    optim.step_without_gradient=true (TRL's and verl's behaviour).
    """
    def two_updates(**sets):
        trainer = Trainer(tiny_cfg(**{"optim.weight_decay": 0.1, "optim.lr": 0.01, **sets}), *tiny_model_and_tokenizer(seed=5))
        rows = trainer.splits.train[:2]
        torch.manual_seed(0)
        batch = trainer.backend.generate(trainer._prompt_texts(rows), rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
        learn = lambda adv: trainer._learn(LearnBatch(rollout=batch, adv=adv, mask=batch.completion_mask.clone(),
                                                      rewards=torch.zeros(len(batch)), behaviour_logp=batch.sampling_logp))
        first = learn(torch.linspace(-1, 1, len(batch)))
        before = [p.detach().clone() for p in trainer.model.parameters()]
        state = {id(p): {k: v.clone() for k, v in trainer.optimizer.state[p].items()} for p in trainer.model.parameters()}
        second = learn(torch.zeros(len(batch)))
        return first, second, before, list(trainer.model.parameters()), state, trainer

    first, second, before, after, _, _ = two_updates()
    assert first["learn/updates"] == 1.0 and second["learn/updates"] == 0.0 and second["learn/skipped_rows"] == 1.0
    assert all(torch.equal(b, a.detach()) for b, a in zip(before, after))
    _, second, before, after, state, trainer = two_updates(**{"optim.step_without_gradient": True})
    assert second["learn/updates"] == 1.0 and second["grad_norm"] == 0.0
    (beta1, beta2), eps = trainer.optimizer.param_groups[0]["betas"], trainer.optimizer.param_groups[0]["eps"]
    for b, a, p in zip(before, after, trainer.model.parameters()):
        s = state[id(p)]
        step = float(s["step"]) + 1
        m, v = beta1 * s["exp_avg"], beta2 * s["exp_avg_sq"]
        coast = (m / (1 - beta1 ** step)) / ((v / (1 - beta2 ** step)).sqrt() + eps)
        expected = b * (1 - 0.01 * 0.1) - 0.01 * coast
        torch.testing.assert_close(a.detach(), expected, atol=1e-6, rtol=1e-5)
    assert max(float((a.detach() - b).abs().max()) for b, a in zip(before, after)) > 1e-3  # it coasted


def _disco_learn(cfg, adv, step=0):
    """One DisCO batch of two groups of 4 at trainer step ``step`` (it seeds the mini-batch order).

    Returns (metrics, weights after, each update's fraction of rows left out: None where it did not say).
    """
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=5))
    trainer.step = step
    rows = trainer.splits.train[:2]
    torch.manual_seed(0)
    batch = trainer.backend.generate(trainer._prompt_texts(rows), rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
    seen, update = [], trainer._update

    def recorded(lb, parts, *args, **kwargs):
        out = update(lb, parts, *args, **kwargs)
        seen.append(out[0].get("learn/skipped_rows"))
        return out

    trainer._update = recorded
    metrics = trainer._learn(LearnBatch(rollout=batch, adv=adv, mask=batch.completion_mask.clone(),
                                        rewards=torch.zeros(len(batch)), behaviour_logp=batch.sampling_logp))
    return metrics, torch.cat([p.detach().flatten() for p in trainer.model.parameters()]), seen


# group 0 tied (every advantage 0), group 1 mixed: DisCO's J pushes the three negatives down, so D > 0 after an update
DISCO_ADV = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, -1.0, -1.0, -1.0])


@pytest.mark.parametrize("delta", [1e-8, 10.0])  # the second update's constraint active / slack
@pytest.mark.parametrize("structure, step", [({"algorithm.num_iterations": 2, "optim.lr": 0.001}, 0),
                                             ({"algorithm.mini_batches": 2, "optim.lr": 0.01}, 0),   # the tied group's mini-batch first
                                             ({"algorithm.mini_batches": 2, "optim.lr": 0.01}, 1)])  # the mixed group's first
def test_disco_leaves_out_tied_groups_only_while_its_constraint_is_slack(tiny_cfg, delta, structure, step):
    """DisCO (arXiv 2505.12366): a tied question has J = 0; only the KL penalty beta [D - delta]_+ grad D reaches it.

    Before issue 28's fix every DisCO update ran the tied groups' forward and backward (its hard-task
    steps took 12-15 s against 5 s for GRPO with the same mini-batches). The first update (at the sampler's weights, D unmeasured) and any
    update whose D <= delta now leave the tied group out; an update whose D > delta keeps it. The
    weights equal those of a run that skips nothing, in every case.
    """
    common = {"algorithm.loss": "disco", "algorithm.loss_options": {"delta": delta}, **structure}  # lr: D > 0 after an update
    plain_m, plain_w, plain_seen = _disco_learn(tiny_cfg(**{"train.skip_zero_advantage": False, **common}), DISCO_ADV, step)
    skip_m, skip_w, seen = _disco_learn(tiny_cfg(**common), DISCO_ADV, step)
    torch.testing.assert_close(skip_w, plain_w, atol=1e-6, rtol=1e-5)
    assert skip_m["learn/updates"] == plain_m["learn/updates"]
    if "algorithm.num_iterations" in structure:
        assert plain_seen == [0.0, 0.0]
        assert seen[0] == 0.5  # the first update: the tied group is left out
        assert seen[1] == (0.0 if delta < 1 else 0.5)  # the second: kept while D > delta
        assert skip_m["disco/constraint_kl"] > 1e-3
    elif delta > 1:  # one group per mini-batch: the tied one has no gradient, an update of size 0 wherever it comes
        assert skip_m["learn/updates"] == 1.0 and sorted(seen) == [0.0, 1.0] and skip_m["learn/skipped_rows"] == 0.5
    elif step == 1:  # after the mixed group's update (D > delta) the penalty pulls the tied group back: a real update
        assert seen == [0.0, 0.0] and skip_m["learn/updates"] == 2.0 and skip_m["disco/constraint_kl"] > 1e-3
    else:  # before it the weights are the sampler's (D = 0): an update of size 0
        assert seen == [1.0, 0.0] and skip_m["learn/updates"] == 1.0


def test_disco_all_tied_batch_takes_no_update(tiny_cfg):
    cfg = tiny_cfg(**{"algorithm.loss": "disco", "algorithm.num_iterations": 2, "optim.lr": 0.01})
    metrics, _, seen = _disco_learn(cfg, torch.zeros(8))
    assert metrics["learn/updates"] == 0.0 and metrics["learn/skipped_rows"] == 1.0 and seen == []


def test_rows_are_kept_when_a_term_has_gradient_without_advantage(tiny_cfg):
    for overrides in ({"algorithm.beta": 0.04}, {"algorithm.entropy_coef": 0.01}):
        metrics, _ = _learn_once(tiny_cfg(**overrides), (0.0, 1.0))
        assert "learn/skipped_rows" not in metrics, overrides
    # DisCO with its micro-batch's own D (unknown before the forward): it reports its per-update count, 0 here
    metrics, _ = _learn_once(tiny_cfg(**{"algorithm.loss": "disco", "algorithm.loss_options": {"local_constraint": True}}), (0.0, 1.0))
    assert metrics["learn/skipped_rows"] == 0.0


def test_a_zero_gradient_batch_still_counts_for_update_hooks(tiny_cfg):
    """Humanline syncing every update (arXiv 2509.24207): an update of size 0 still syncs pi_ref to the policy.

    After one real update the reference holds the weights from before it; a following batch whose
    advantages are all 0 takes no AdamW step but its (size-0) update syncs the reference to the
    current weights, as the stepped update would have, and the schedule counts it.
    """
    cfg = tiny_cfg(**{"algorithm.loss": "humanline", "algorithm.ref_sync_every": 1, "optim.lr": 0.01})
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=5))
    rows = trainer.splits.train[:2]
    torch.manual_seed(0)
    batch = trainer.backend.generate(trainer._prompt_texts(rows), rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
    learn = lambda adv: trainer._learn(LearnBatch(rollout=batch, adv=adv, mask=batch.completion_mask.clone(),
                                                  rewards=torch.zeros(len(batch)), behaviour_logp=batch.sampling_logp))
    weights = lambda m: torch.cat([p.detach().flatten() for p in m.parameters()])
    learn(torch.linspace(-1, 1, len(batch)))
    assert trainer.updates == 1 and not torch.equal(weights(trainer.policy.reference), weights(trainer.model))  # lags one update
    assert learn(torch.zeros(len(batch)))["learn/updates"] == 0.0
    assert trainer.updates == 2 and torch.equal(weights(trainer.policy.reference), weights(trainer.model))  # synced


def test_an_update_whose_every_token_is_clipped_moves_no_weight(tiny_cfg):
    """GSPO's failure at lr >> its clip range (issue 28): the second update of a batch clips every sequence.

    Every row has advantage 1 and the sequence ratio's clip range is 1e-6, so after the first update
    (lr 0.01) every sequence's ratio is above 1 + 1e-6 and PPO-clip takes its constant branch: the
    gradient is exactly 0. By default that update is of size 0 (AdamW does not coast on its momentum);
    optim.step_without_gradient=true steps it as TRL and verl do.
    """
    def learn(**sets):
        cfg = tiny_cfg(**{"algorithm.ratio": "sequence", "algorithm.epsilon_low": 1e-6, "algorithm.epsilon_high": 1e-6,
                          "algorithm.aggregation": "seq_mean_token_mean", "algorithm.num_iterations": 2, "optim.lr": 0.01,
                          **sets})
        trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=5))
        rows = trainer.splits.train[:2]
        torch.manual_seed(0)
        batch = trainer.backend.generate(trainer._prompt_texts(rows), rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
        steps, step = [], trainer._optimizer_step

        def recorded():
            norm = step()
            steps.append((norm, trainer._steps(norm), torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])))
            return norm

        trainer._optimizer_step = recorded
        metrics = trainer._learn(LearnBatch(rollout=batch, adv=torch.ones(len(batch)), mask=batch.completion_mask.clone(),
                                            rewards=torch.zeros(len(batch)), behaviour_logp=batch.sampling_logp))
        return metrics, steps, trainer

    metrics, steps, trainer = learn()
    (norm1, stepped1, w1), (norm2, stepped2, w2) = steps
    assert norm1 > 0 and stepped1 and norm2 == 0.0 and not stepped2
    assert metrics["clip/frac"] == 1.0 and metrics["learn/updates"] == 1.0 and trainer.updates == 2  # the schedule counts it
    assert torch.equal(w1, w2)
    metrics, steps, _ = learn(**{"optim.step_without_gradient": True})
    assert metrics["learn/updates"] == 2.0 and steps[1][0] == 0.0
    assert float((steps[1][2] - steps[0][2]).abs().max()) > 1e-4  # AdamW coasted on its momentum


# no learner pass at all / a learner pass (a KL term keeps every row) whose gradient is exactly 0: the policy
# equals its reference and every advantage is 0 (the first GRPO step after SFT, seen in benchmarks/sql_cot.py)
@pytest.mark.parametrize("sets", [{}, {"algorithm.beta": 0.05}])
def test_a_first_update_of_size_0_advances_the_schedule_without_torch_warning(tiny_cfg, sets):
    """The schedule counts a size-0 update; torch must not warn that the scheduler stepped before the optimizer."""
    import warnings

    trainer = Trainer(tiny_cfg(**{"optim.warmup_steps": 2, **sets}), *tiny_model_and_tokenizer(seed=5))
    rows = trainer.splits.train[:2]
    torch.manual_seed(0)
    batch = trainer.backend.generate(trainer._prompt_texts(rows), rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
    lb = LearnBatch(rollout=batch, adv=torch.zeros(len(batch)), mask=batch.completion_mask.clone(),
                    rewards=torch.zeros(len(batch)), behaviour_logp=batch.sampling_logp)
    lr_before = trainer.scheduler.get_last_lr()[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = trainer._learn(lb)
    assert metrics["learn/updates"] == 0.0 and trainer.updates == 1
    assert trainer.scheduler.get_last_lr()[0] > lr_before  # warm-up moved on
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]


def _kdrl_learn(cfg, rewards, adv):
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=5))
    rows = trainer.splits.train[:2]
    torch.manual_seed(0)
    batch = trainer.backend.generate(trainer._prompt_texts(rows), rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
    metrics = trainer._learn(LearnBatch(rollout=batch, adv=adv, mask=batch.completion_mask.clone(), rewards=rewards,
                                        behaviour_logp=batch.sampling_logp))
    return metrics, torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


# group 0 tied (advantage 0), group 1 mixed: KDRL's reward-masked distillation acts on the incorrect rows (r < 1) only
KDRL_ADV = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, -1.0, -1.0, -1.0])


@pytest.mark.parametrize("tied_reward, kd_mask, left_out", [(1.0, "response", 0.5),   # solved: no term acts on it
                                                            (0.0, "response", None),  # failed: distilled, kept
                                                            (1.0, "group", 0.5),      # a group with a correct answer: not distilled
                                                            (1.0, "none", None)])     # every row distilled
def test_kdrl_leaves_out_the_rows_neither_its_advantage_nor_its_distillation_reaches(tiny_cfg, tmp_path, tied_reward, kd_mask, left_out):
    """KDRL (arXiv 2506.02208): L = -min(r A, clip(r) A) + beta_t w_i k2(l - l^T), w_i the reward-guided mask.

    A solved tied group (A = 0, w = 0) has no gradient; before issue 28's fix every KDRL row went
    through the teacher forward and the learner (hard-task steps 9 s against GRPO's 5.5 s). The
    weights equal those of a run that skips nothing.
    """
    from grpokit.testing import save_tiny_model

    teacher = save_tiny_model(tmp_path / "teacher", seed=11)
    rewards = torch.tensor([tied_reward] * 4 + [0.0] * 4)  # the mixed group's advantages are given, not its rewards
    common = {"algorithm.loss": "kdrl", "model.teacher": teacher, "optim.lr": 0.01,
              "algorithm.loss_options": {"kd_mask": kd_mask, "kd_coef": 0.5}}
    plain_m, plain_w = _kdrl_learn(tiny_cfg(**{"train.skip_zero_advantage": False, **common}), rewards, KDRL_ADV)
    skip_m, skip_w = _kdrl_learn(tiny_cfg(**common), rewards, KDRL_ADV)
    torch.testing.assert_close(skip_w, plain_w, atol=1e-6, rtol=1e-5)
    assert skip_m.get("learn/skipped_rows") == left_out and "learn/skipped_rows" not in plain_m
    assert skip_m["learn/updates"] == plain_m["learn/updates"] == 1.0 and plain_m["kd/kl"] > 0
