"""The masked-diffusion policy through the trainer: common random numbers, gradients, learning, load-time refusals."""

from pathlib import Path

import pytest
import torch

from grpokit.config import load_config
from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm, save_mdm
from grpokit.rollout.types import SamplingParams
from grpokit.trainer.inputs import RunContractError, check_run
from grpokit.trainer.learner import micro_batches

TOK = MDMTokenizer()
PRESETS = {"espo_elbo": "espo", "stand_in": "diffu_grpo", "mask_grpo_step": "mask_grpo"}


def sevens(prompts, completions, **kwargs):
    """Test reward: the fraction of the 8-position canvas that is the digit 7 (a signal a random model can climb)."""
    return [sum(c == "7" for c in text) / 8 for text in completions]


@pytest.fixture(scope="module")
def mdm_dir(tmp_path_factory):
    return save_mdm(build_mdm(len(TOK), hidden=32, layers=2, heads=2, seed=0), TOK, tmp_path_factory.mktemp("mdm") / "m")


def mdm_cfg(tmp_path, folder, preset, *extra):
    return load_config(preset=preset, overrides=[
        f"model.name={folder}", f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0",
        "data.n_train=16", "data.n_heldout=4", "rollout.group_size=4", "rollout.prompts_per_step=4", "train.steps=1",
        "train.max_minutes=0", "eval.before=false", "eval.after=false", "logging.checkpoint_every=0", "train.micro_batch_size=16",
        *extra,
    ])


def trainer(tmp_path, folder, preset, *extra):
    from grpokit.trainer.loop import Trainer

    torch.manual_seed(0)
    return Trainer(mdm_cfg(tmp_path, folder, preset, *extra))


@pytest.mark.parametrize("likelihood", sorted(PRESETS))
def test_same_seed_gives_ratio_exactly_one_in_any_micro_batch_and_units_carry_gradient(tmp_path, mdm_dir, likelihood):
    tr = trainer(tmp_path, mdm_dir, PRESETS[likelihood])
    policy = tr.policy
    assert type(policy).__name__ == "MaskedDiffusionPolicy" and policy.capabilities.unit_kind == {
        "espo_elbo": "sequence", "stand_in": "token", "mask_grpo_step": "unmask_step"}[likelihood]
    rows = tr.splits.train[:4]
    batch = policy.sample([r["prompt"] for r in rows], rows, 3, SamplingParams(max_new_tokens=8, temperature=1.0))
    old = policy.score(batch, "current")
    fwd = policy.learn_forward(batch, with_entropy=False, entropy_grad=False)
    mask = batch.unit_mask.bool()
    assert torch.equal(torch.exp(fwd.logp - old)[mask], torch.ones(int(mask.sum())))  # exactly 1, not approximately
    for rows_idx, mb in micro_batches(batch, 5):  # other micro-batch cuts (trimmed prompts): the same values
        assert torch.allclose(policy.score(mb, "current"), old[rows_idx], atol=1e-6)
    assert float(old[mask].abs().sum()) > 0 and float(old[~mask].abs().sum()) == 0
    fwd.backward(-(fwd.logp * batch.unit_mask).sum())
    grads = [p.grad for p in policy.module.parameters() if p.grad is not None]
    assert grads and sum(float(g.abs().sum()) for g in grads) > 0
    # another step's seeds give another estimate (the surrogates are random in the seed); the sampler record is kept
    if policy.capabilities.logprob_is_surrogate:
        moved = batch.select(torch.arange(len(batch)))
        moved.estimator_seeds = moved.estimator_seeds + 1
        assert not torch.equal(policy.score(moved, "current"), old)
    assert bool((batch.commit_step >= 0).all())


@pytest.mark.parametrize("preset", ["espo", "diffu_grpo", "mask_grpo"])
def test_each_likelihood_raises_a_reward_it_is_trained_on(tmp_path, mdm_dir, preset):
    reward = f"{Path(__file__).resolve()}:sevens"
    tr = trainer(tmp_path, mdm_dir, preset, "train.steps=8", "optim.lr=2e-2", f"rewards=[{{name: '{reward}', weight: 1.0}}]",
                 "rollout.group_size=8")
    means = []
    for _ in range(8):
        metrics = tr.train_step()
        means.append(metrics["reward/mean"])
    # a random model writes a 7 in ~1/50 of the positions; 8 steps of RL on the fraction of 7s must multiply that
    assert sum(means[-3:]) / 3 > 3 * max(sum(means[:3]) / 3, 0.02), means


def refusal(tmp_path, folder, preset, *extra):
    with pytest.raises(RunContractError) as info:
        check_run(mdm_cfg(tmp_path, folder, preset, *extra))
    return str(info.value)


def test_text_lm_only_methods_fail_at_load_naming_the_capability(tmp_path, mdm_dir):
    msg = refusal(tmp_path, mdm_dir, "espo", "algorithm.kl=k3")
    assert "algorithm.kl 'k3'" in msg and "per-token log-probs" in msg and "seq_k2" in msg
    assert "per-token log-probs" in refusal(tmp_path, mdm_dir, "espo", "algorithm.ratio=token")
    assert "unit_kind 'sequence'" in refusal(tmp_path, mdm_dir, "diffu_grpo", "algorithm.kl=seq_k2")
    assert "entropies" in refusal(tmp_path, mdm_dir, "diffu_grpo", "algorithm.token_weights=forking")
    assert "stage=sft" in refusal(tmp_path, mdm_dir, "espo", "stage=sft")
    assert "diffusion.block_length 3" in refusal(tmp_path, mdm_dir, "espo", "diffusion.block_length=3")
    assert "not an option of likelihood 'espo_elbo'" in refusal(tmp_path, mdm_dir, "espo", "diffusion.likelihood_options={mc: 2}")
    assert "seq_k2" in refusal(tmp_path, "smollm2-135m-instruct", "grpo", "algorithm.kl=seq_k2", "algorithm.beta=0.1")
    # Reg-GRPO regresses against the policy one update behind, a role the masked-diffusion policy does not score
    msg = refusal(tmp_path, mdm_dir, "diffu_grpo", "algorithm.loss=reg_grpo")
    assert "'previous' role" in msg and "masked_diffusion" in msg and "\n" not in msg
    check_run(mdm_cfg(tmp_path, mdm_dir, "espo"))  # the presets themselves pass


def test_a_run_folder_loads_back_as_a_masked_diffusion_policy(tmp_path, mdm_dir):
    from grpokit.families.masked_diffusion.checks import is_mdm_model

    tr = trainer(tmp_path, mdm_dir, "mask_grpo", "train.steps=1")
    tr.train()
    run = tmp_path / "run"
    assert is_mdm_model(str(run))
    again = trainer(tmp_path / "b", run, "mask_grpo")
    for a, b in zip(tr.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)


def test_grpokit_list_shows_the_policy_families(capsys):
    from grpokit.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out.replace("\n", "")
    assert "family" in out and "masked_diffusion" in out and "flow_matching" in out  # every family, from FAMILIES
