"""Trainer-side fidelity: DAPO's dynamic sampling on the outcome reward, humanline's reference sync, eval, entropy.

Each fault of issue 13 (5: dynamic sampling, 6: humanline syncing, eval's ``accuracy``, the
entropy of all-skipped steps) has a test here that fails on d3cb0f9 through the APIs it had.
"""

import math

import pytest
import torch

from grpokit.rewards import NamedReward, RewardScores
from grpokit.rollout.types import RolloutBatch, SamplingParams
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.evaluation import evaluate_accuracy
from grpokit.trainer.loop import Trainer


def always_correct(prompts, completions, **_):
    """An outcome judge that marks every completion correct: no group is informative."""
    return [1.0] * len(completions)


def text_length(prompts, completions, **_):
    """A second reward that differs inside every group (the completion's length in characters / 10)."""
    return [len(c) / 10 for c in completions]


def constant(prompts, completions, **_):
    return [0.5] * len(completions)


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def _rows(n_rows: int, group_size: int) -> RolloutBatch:
    """A RolloutBatch of ``n_rows`` one-token completions in groups of ``group_size`` (enough for collect_rounds)."""
    z = torch.zeros(n_rows, 1, dtype=torch.long)
    return RolloutBatch(
        prompt_ids=z, prompt_mask=torch.ones_like(z), completion_ids=z, completion_mask=torch.ones_like(z),
        group_ids=torch.arange(n_rows) // group_size, sampling_logp=torch.zeros(n_rows, 1),
        truncated=torch.zeros(n_rows, dtype=torch.bool), prompts=["p"] * n_rows, completions=["c"] * n_rows,
        rows=[{"prompt": "p"}] * n_rows,
    )


# ----------------------------------------------------------------------------- DAPO dynamic sampling
def test_dynamic_sampling_keeps_groups_by_the_outcome_reward_not_the_shaped_total(tiny_cfg):
    # outcome 'judge' per group: g0 [1,1,1,1] (solved), g1 [1,0,0,0] (informative), g2 [0,0,0,0] (unsolved).
    # The shaped totals vary inside every group (judge + 0.1 * row index), so a filter on the
    # total would keep all three; DAPO (0 < #correct < G) keeps g1 alone.
    from grpokit.trainer.collect import collect_rounds  # (in-process and async rounds: after d3cb0f9)

    cfg = tiny_cfg(**{"algorithm.dynamic_sampling": "true", "rollout.prompts_per_step": 1, "algorithm.max_sampling_rounds": 3})
    judge = torch.tensor([1.0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    total = judge + 0.1 * torch.arange(12.0)

    def one_round():
        return _rows(12, 4), RewardScores(per_reward={"judge": judge}, total=total, failures={}), {}

    batch, scores, m = collect_rounds(cfg, one_round, pad_id=0, outcome="judge")
    assert batch.group_ids.tolist() == [0, 0, 0, 0] and scores.per_reward["judge"].tolist() == [1.0, 0, 0, 0]
    torch.testing.assert_close(scores.total, torch.tensor([1.4, 0.5, 0.6, 0.7]))  # rows 4..7 of the round
    assert m["dynamic_sampling/rounds"] == 1.0 and m["dynamic_sampling/informative_groups"] == 1.0
    assert m["dynamic_sampling/kept_groups"] == 1.0 and m["dynamic_sampling/exhausted"] == 0.0
    assert m["dynamic_sampling/sampled_groups"] == 3.0


def test_dynamic_sampling_exhausted_trains_on_the_informative_groups_found(tiny_cfg):
    # 2 groups wanted, 2 rounds of 2 groups, one informative group in round 1 only:
    # the step keeps that one group (a smaller batch) and says the rounds ran out.
    from grpokit.trainer.collect import collect_rounds  # (in-process and async rounds: after d3cb0f9)

    cfg = tiny_cfg(**{"algorithm.dynamic_sampling": "true", "rollout.prompts_per_step": 2, "algorithm.max_sampling_rounds": 2})
    rounds = iter([torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1]), torch.tensor([0.0] * 8)])

    def one_round():
        judge = next(rounds)
        return _rows(8, 4), RewardScores(per_reward={"judge": judge}, total=judge.clone(), failures={}), {}

    batch, scores, m = collect_rounds(cfg, one_round, pad_id=0, outcome="judge")
    assert len(batch) == 4 and scores.per_reward["judge"].tolist() == [1.0, 0, 0, 0]
    assert (m["dynamic_sampling/rounds"], m["dynamic_sampling/informative_groups"], m["dynamic_sampling/exhausted"]) == (2.0, 1.0, 1.0)


def test_a_step_without_an_informative_group_takes_no_update(tiny_cfg):
    # The judge (first reward) says every completion is correct, so no group is informative;
    # the second reward and the overlong penalty make the totals differ inside the groups, which
    # at d3cb0f9 kept the groups and trained on them. Now: no update, no scheduler step.
    cfg = tiny_cfg(**{
        "rewards": f"[{{name: '{__file__}:always_correct'}}, {{name: '{__file__}:text_length'}}]",
        "algorithm.dynamic_sampling": "true", "algorithm.max_sampling_rounds": 2, "algorithm.overlong_cache": 6,
        "optim.lr": 0.01, "optim.weight_decay": 0.1, "rollout.temperature": 1.0,
    })
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    before = _params(trainer.model)
    m = trainer.train_step()
    assert torch.equal(_params(trainer.model), before)  # AdamW would move them (decay, momentum) even on a zero gradient
    assert trainer.scheduler.last_epoch == 0 and trainer.step == 1  # the step counts; the lr schedule counts updates
    assert m["dynamic_sampling/exhausted"] == 1.0 and m["dynamic_sampling/informative_groups"] == 0.0
    assert m["dynamic_sampling/rounds"] == 2.0 and m["learn/updates"] == 0.0
    assert m["accuracy"] == 1.0 and m["reward/text_length/std"] > 0  # the step's metrics still describe what was sampled


def test_a_batch_without_loss_units_takes_no_optimizer_update(tiny_cfg):
    # Generic rule of the loop (no method named): every row masked out -> nothing to learn.
    # (Through the LearnBatch API, which came after d3cb0f9; the test above fails there.)
    from grpokit.trainer.learn_batch import LearnBatch

    # At d3cb0f9 AdamW stepped anyway: p <- p (1 - lr wd) = p (1 - 0.01 * 0.1) on the zero gradient.
    trainer = Trainer(tiny_cfg(**{"optim.lr": 0.01, "optim.weight_decay": 0.1, "train.skip_zero_advantage": "false"}),
                      *tiny_model_and_tokenizer(seed=1))
    rows = trainer.splits.train[:2]
    batch = trainer.policy.sample(trainer._prompt_texts(rows), rows, 4, SamplingParams(max_new_tokens=4))
    lb = LearnBatch(rollout=batch, adv=torch.linspace(-1, 1, len(batch)), mask=torch.zeros_like(batch.completion_mask),
                    rewards=torch.zeros(len(batch)), behaviour_logp=batch.behaviour_logp)
    before = _params(trainer.model)
    m = trainer._learn(lb)
    assert torch.equal(_params(trainer.model), before) and trainer.scheduler.last_epoch == 0
    assert m.get("learn/updates") == 0.0


# ----------------------------------------------------------------------------- humanline syncing
class _Recorder:
    """Snapshots of the policy after every optimizer update, and which of them the reference was whenever it scored.

    Only ``Trainer.ref_model`` and ``Trainer._optimizer_step`` are used, which d3cb0f9 had too.
    """

    def __init__(self, trainer):
        self.trainer, self.snaps, self.scored = trainer, [_params(trainer.model)], []
        step = trainer._optimizer_step

        def optimizer_step():
            out = step()
            self.snaps.append(_params(trainer.model))
            return out

        def on_reference_forward(module, args):
            ref = _params(trainer.ref_model)
            which = [i for i, s in enumerate(self.snaps) if torch.equal(s, ref)]
            event = (len(self.snaps) - 1, which[-1] if which else None)  # (updates so far, reference = theta_#)
            if event not in self.scored:
                self.scored.append(event)

        trainer._optimizer_step = optimizer_step
        trainer.ref_model.get_input_embeddings().register_forward_pre_hook(on_reference_forward)  # every forward embeds

    def reference_is(self, i: int) -> bool:
        return torch.equal(_params(self.trainer.ref_model), self.snaps[i])


def _humanline(tiny_cfg, every: int, mu: int) -> Trainer:
    cfg = tiny_cfg(**{"algorithm.loss": "humanline", "algorithm.ref_sync_every": every, "algorithm.num_iterations": mu,
                      "optim.lr": 0.01, "rewards": f"[{{name: '{__file__}:text_length'}}]", "rollout.max_new_tokens": 8})
    return Trainer(cfg, *tiny_model_and_tokenizer(seed=0))


def test_humanline_k1_ratio_is_against_the_policy_one_update_back(tiny_cfg):
    # k = 1: after update n the reference holds theta_{n-1} (the weights from before update n).
    # Update 2 is therefore scored against theta_0, not against theta_1 (a ratio of exactly 1,
    # d3cb0f9's sync at the start of the step).
    trainer = _humanline(tiny_cfg, every=1, mu=1)
    rec = _Recorder(trainer)
    trainer.train_step()
    trainer.train_step()
    assert rec.scored == [(0, 0), (1, 0)]  # (updates so far, reference = theta_#)
    assert rec.reference_is(1) and not rec.reference_is(2)


def test_humanline_k2_syncs_after_every_second_update(tiny_cfg):
    # k = 2: no sync after update 1 (reference theta_0); after update 2 it gets theta_1.
    # d3cb0f9 synced at the start of steps 1, 3, 5, ... so after 2 steps its reference was theta_0.
    trainer = _humanline(tiny_cfg, every=2, mu=1)
    rec = _Recorder(trainer)
    trainer.train_step()
    assert rec.reference_is(0)
    trainer.train_step()
    assert rec.reference_is(1) and not rec.reference_is(0)


def test_humanline_mu2_counts_updates_and_rescores_the_reference(tiny_cfg):
    # mu = 2 updates per batch, k = 1: updates 1..4 are scored against theta_0, theta_0, theta_1, theta_2
    # (the reference moves inside a batch: ref_logp is rescored before the batch's second update).
    # d3cb0f9 scored it once per step, against theta_0 and then theta_2.
    trainer = _humanline(tiny_cfg, every=1, mu=2)
    rec = _Recorder(trainer)
    trainer.train_step()
    trainer.train_step()
    assert rec.scored == [(0, 0), (1, 0), (2, 1), (3, 2)]
    assert rec.reference_is(3) and trainer.scheduler.last_epoch == 4


# ----------------------------------------------------------------------------- entropy of the sampler
def test_rollout_entropy_hand_computed():
    from grpokit.trainer.metrics import rollout_entropy

    # rows [1, 2, (9 pad)] and [3, (0 pad), (0 pad)]: (1 + 2 + 3) / 3 tokens = 2.0
    b = _rows(2, 2)
    b.entropy, b.completion_mask = torch.tensor([[1.0, 2.0, 9.0], [3.0, 0.0, 0.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert rollout_entropy(b) == {"rollout/entropy": 2.0}
    b.entropy = None
    assert rollout_entropy(b) == {}  # a sampler without entropies (vLLM)


def test_entropy_of_a_step_whose_rows_were_all_skipped(tiny_cfg):
    # A constant reward: every advantage is 0, every row is left out of the learner, so the
    # learner's `entropy` has no row to average; the sampler's entropy covers all rows.
    trainer = Trainer(tiny_cfg(**{"rewards": f"[{{name: '{__file__}:constant'}}]"}), *tiny_model_and_tokenizer(seed=2))
    seen = []
    generate = trainer.backend.generate
    trainer.backend.generate = lambda *a, **k: seen.append(generate(*a, **k)) or seen[-1]
    m = trainer.train_step()
    assert m["learn/skipped_rows"] == 1.0 and "entropy" not in m
    b = seen[0]
    expected = float((b.entropy * b.completion_mask).sum() / b.completion_mask.sum())
    assert m["rollout/entropy"] == pytest.approx(expected, rel=1e-6) and m["rollout/entropy"] > 0


# ----------------------------------------------------------------------------- eval: greedy accuracy, mean@k, pass@k
class _ScriptedBackend:
    """Greedy: prompt 'a' correct, 'b' wrong. Sampled (k = 4): 'a' gives 1 correct of 4, 'b' none."""

    def generate(self, prompt_texts, rows, group_size, params):
        script = {("a", True): ["1"], ("b", True): ["0"], ("a", False): ["1", "0", "0", "0"], ("b", False): ["0"] * 4}
        completions = [c for p in prompt_texts for c in script[(p, params.greedy)]]
        batch = _rows(len(completions), group_size)
        batch.completions, batch.prompts = completions, [p for p in prompt_texts for _ in range(group_size)]
        return batch


def test_eval_accuracy_stays_greedy_with_k_samples():
    judge = NamedReward("correct", lambda prompts, completions, **_: [float(c) for c in completions])
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    r = evaluate_accuracy(_ScriptedBackend(), rows, ["a", "b"], judge, k=4)
    # greedy: (1 + 0) / 2 = 0.5; mean@4: (1/4 + 0/4) / 2 = 0.125; pass@4: (1 + 0) / 2 = 0.5
    assert r["accuracy"] == 0.5 and r["mean@4"] == 0.125 and r["pass@4"] == 0.5 and r["n"] == 2
    r1 = evaluate_accuracy(_ScriptedBackend(), rows, ["a", "b"], judge, k=1)
    assert r1 == {"accuracy": 0.5, "n": 2, "completion_len": 1.0}


def test_cli_eval_prints_greedy_accuracy_and_mean_at_k(tmp_path, capsys, monkeypatch):
    from grpokit.cli import main
    from grpokit.testing import save_tiny_model

    monkeypatch.chdir(tmp_path)
    tiny = save_tiny_model(tmp_path / "tiny")
    args = ["--set", f"model.name={tiny}", "--set", "data.task=arithmetic", "--set", "data.n_train=4",
            "--set", "data.n_heldout=3", "--set", "eval.max_new_tokens=3"]
    assert main(["eval", *args]) == 0
    greedy = capsys.readouterr().out.split()
    assert main(["eval", *args, "--k", "2"]) == 0
    sampled = capsys.readouterr().out.split()
    assert greedy[0].startswith("accuracy=") and sampled[0] == greedy[0]  # the same greedy number, k or not
    assert any(t.startswith("mean@2=") for t in sampled) and any(t.startswith("pass@2=") for t in sampled)
    assert not math.isnan(float(sampled[0].split("=")[1]))


def test_humanline_reference_survives_a_resume(tiny_cfg, tmp_path):
    # k = 2: after updates 1..3 the reference is theta_1 (loaded after update 2). A run resumed from
    # the step-3 checkpoint must continue with that reference, not with a copy of its starting weights.
    common = {"algorithm.loss": "humanline", "algorithm.ref_sync_every": 2, "optim.lr": 0.01, "train.steps": 3,
              "logging.checkpoint_every": 3, "rewards": f"[{{name: '{__file__}:text_length'}}]",
              "rollout.max_new_tokens": 8, "logging.output_dir": str(tmp_path / "run")}
    trainer = Trainer(tiny_cfg(**common), *tiny_model_and_tokenizer(seed=0))
    rec = _Recorder(trainer)
    trainer.train()
    assert rec.reference_is(1)
    resumed = Trainer(tiny_cfg(**common), *tiny_model_and_tokenizer(seed=0))
    assert resumed.resume() and resumed.step == 3
    assert torch.equal(_params(resumed.ref_model), rec.snaps[1]) and torch.equal(_params(resumed.model), rec.snaps[3])


def test_lr_schedule_spans_every_update_of_the_run_at_mu_2(tiny_cfg):
    """The scheduler steps once per optimizer update, so a decay runs over train.steps x mu updates.

    d3cb0f9 built it over train.steps: with mu = 2 a linear decay reached 0 halfway and the second
    half of the run trained at lr 0. Here lr 1e-3, linear, 4 steps x 2 updates = 8 updates: after
    step s (2s updates) lr = 1e-3 * (1 - 2s / 8) = 7.5e-4, 5e-4, 2.5e-4, 0.
    """
    cfg = tiny_cfg(**{"optim.lr": 1e-3, "optim.schedule": "linear", "algorithm.num_iterations": 2, "train.steps": 4})
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    lrs = [trainer.train_step()["lr"] for _ in range(4)]
    assert lrs == pytest.approx([7.5e-4, 5e-4, 2.5e-4, 0.0], abs=1e-12)
