"""Variational reasoning's posterior q with weights of its own, and the paper's Acc estimator (arXiv 2509.22637).

q is a LoRA adapter: beside the policy's on one PeftModel when the policy is LoRA ("shared"), on a
copy of the base loaded from model.name when the policy is fully fine-tuned ("separate"), on
``variational.q_model`` when set ("q_model"). Each test runs all three. The judge is a stand-in (a tiny random model never solves arithmetic).
"""

import pytest
import torch

from grpokit.trainer.posterior import ADAPTER

from tests.trainer.test_variational_stage import REWARD, manual_logp_ids, stage_output, tiny_dir, variational_trainer  # noqa: F401

CUE_JUDGE = f"{__file__}:names_the_answer"
MODES = {"separate": {}, "shared": {"model.lora.enabled": "true"}, "q_model": {"model.lora.enabled": "true", "variational.q_model": None}}


def sets(mode, tiny_dir):
    """The mode's overrides; q_model: a LoRA policy whose q still gets a base of its own (variational.q_model)."""
    return {k: (tiny_dir if v is None else v) for k, v in MODES[mode].items()}


def names_the_answer(prompts, completions, **columns):
    """1.0 when the judged text holds the answer cue: what the policy wrote after a trace always does, q's own text never."""
    return [float("The answer is" in c) for c in completions]


def policy_weights(trainer, q):
    """{name: copy} of every parameter of the policy's module but q's adapter (by name, not by q's own list)."""
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if f".{ADAPTER}." not in n}


def one_step(tiny_cfg, tiny_dir, mode, posterior_kl):
    trainer = variational_trainer(tiny_cfg, tiny_dir, **sets(mode, tiny_dir), **{"variational.posterior_kl": posterior_kl})
    m = trainer.train_step()
    q = trainer.stages[0].q
    return policy_weights(trainer, q), [p.detach().clone() for p in q.params], m


@pytest.mark.parametrize("mode", list(MODES))
def test_policy_update_is_bit_identical_with_and_without_q_rows(tiny_cfg, tiny_dir, mode):
    # same seed, same batch: with posterior_kl q takes its own step on the correct samples; the policy must not see it
    pi_with, q_with, m_with = one_step(tiny_cfg, tiny_dir, mode, "true")
    pi_without, q_without, m_without = one_step(tiny_cfg, tiny_dir, mode, "false")
    assert m_with["variational/q_rows"] > 0 and "variational/q_rows" not in m_without
    assert m_with["loss"] == m_without["loss"]
    assert pi_with.keys() == pi_without.keys()
    assert all(torch.equal(pi_with[n], pi_without[n]) for n in pi_with)  # bit-identical policy after the step
    assert any(not torch.equal(a, b) for a, b in zip(q_with, q_without))  # q's own update moved q


@pytest.mark.parametrize("mode", list(MODES))
def test_q_step_touches_only_q_and_the_policy_step_only_the_policy(tiny_cfg, tiny_dir, mode):
    trainer = variational_trainer(tiny_cfg, tiny_dir, **sets(mode, tiny_dir))
    batch, scores, _ = trainer._collect()
    lb, _ = trainer._learn_batch(batch, scores)
    stage = trainer.stages[0]
    q = stage.posterior(trainer.context)
    assert (q.module is trainer.model) == (mode == "shared")
    q_ids = {id(p) for p in q.params}
    assert q_ids and not q_ids & {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert {id(p) for g in q.optimizer.param_groups for p in g["params"]} == q_ids
    pi_before, q_before = policy_weights(trainer, q), [p.detach().clone() for p in q.params]
    torch.manual_seed(1)
    out, m = stage(trainer.context, lb, scores)  # samples from q, builds the policy's rows, takes q's step
    assert m["variational/q_rows"] > 0 and m["variational/q_grad_norm"] > 0
    assert all(torch.equal(p, pi_before[n]) for n, p in policy_weights(trainer, q).items())  # q's step: no policy weight moved
    assert any(not torch.equal(a, b) for a, b in zip(q_before, q.params))
    assert not q_ids & {id(p) for p in trainer.policy.trainable_parameters()}  # peft's set_adapter flags restored
    q_mid = [p.detach().clone() for p in q.params]
    learn = trainer._learn(out)
    assert learn["learn/updates"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(q_mid, q.params))  # the policy's step: no q weight moved
    assert any(not torch.equal(p, pi_before[n]) for n, p in policy_weights(trainer, q).items())


@pytest.mark.parametrize("mode", list(MODES))
def test_acc_estimator_samples_answers_from_the_policy_after_the_trace(tiny_cfg, tiny_dir, mode):
    trainer = variational_trainer(tiny_cfg, tiny_dir, reward=CUE_JUDGE, **sets(mode, tiny_dir), **{"variational.num_answers": 2})
    stage = trainer.stages[0]
    q = stage.posterior(trainer.context)
    with torch.no_grad():  # q away from the policy, so that answers sampled from q would show
        for n, p in q.module.named_parameters():
            if id(p) in {id(x) for x in q.params} and "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.5)
    seen = {}
    estimate = stage.estimate_acc

    def recording(ctx, plain, keep):
        seen.update(plain=plain, keep=keep, out=estimate(ctx, plain, keep))
        return seen["out"]

    stage.estimate_acc = recording
    _, _, _, m = stage_output(trainer)
    plain, keep, (correct, answers, _, _) = seen["plain"], seen["keep"], seen["out"]
    # pi_hat = 1 on every trace: the judge read what the policy wrote after the cue; judged on q's own completion
    # (the estimator before, with the reference in q's prompt) the cue is absent and pi_hat would be 0
    assert bool(correct.all()) and m["variational/pi_hat_mean"] == 1.0
    assert not any(names_the_answer([], plain.completions))
    tok, temp = trainer.tokenizer, trainer.cfg.rollout.temperature
    cue = tok("\nThe answer is", add_special_tokens=False, return_tensors="pt").input_ids[0]
    gap_q = gap_no_trace = 0.0
    for i in range(len(plain)):
        prompt = plain.prompt_ids[i][plain.prompt_mask[i].bool()]
        context = torch.cat([prompt, plain.completion_ids[i][: keep[i]], cue])  # x, the trace z, the cue
        for j in (2 * i, 2 * i + 1):  # the trace's n_ans = 2 answers
            mask = answers.completion_mask[j].bool()
            y = answers.completion_ids[j][mask]
            assert torch.equal(answers.prompt_ids[j][answers.prompt_mask[j].bool()], context)
            sampled = answers.sampling_logp[j][mask]
            with q.active():
                under_q = manual_logp_ids(q.module, context, y, temp)
            under_pi = manual_logp_ids(trainer.model, context, y, temp)
            assert torch.allclose(sampled, under_pi, atol=1e-4)  # drawn from the policy with the trace in context
            gap_q = max(gap_q, float((sampled - under_q).abs().max()))
            gap_no_trace = max(gap_no_trace, float((sampled - manual_logp_ids(trainer.model, torch.cat([prompt, cue]), y, temp)).abs().max()))
    assert gap_q > 1e-2 and gap_no_trace > 1e-3  # neither q's weights nor a context without the trace


@pytest.mark.parametrize("mode", list(MODES))
def test_checkpoint_carries_q_adapter_and_optimizer(tiny_cfg, tiny_dir, mode):
    trainer = variational_trainer(tiny_cfg, tiny_dir, **sets(mode, tiny_dir))
    trainer.train_step()
    q = trainer.stages[0].q
    assert q.optimizer.state  # q took a step: AdamW moments exist
    trainer.save()
    resumed = variational_trainer(tiny_cfg, tiny_dir, **sets(mode, tiny_dir))
    resumed.resume()
    q2 = resumed.stages[0].posterior(resumed.context)
    assert all(torch.equal(a, b) for a, b in zip(q.params, q2.params))
    s1, s2 = q.optimizer.state_dict()["state"], q2.optimizer.state_dict()["state"]
    assert s1.keys() == s2.keys()
    assert all(torch.equal(s1[k][key], s2[k][key]) for k in s1 for key in ("exp_avg", "exp_avg_sq", "step"))
    fresh = variational_trainer(tiny_cfg, tiny_dir, **sets(mode, tiny_dir))
    q3 = fresh.stages[0].posterior(fresh.context)
    assert any(not torch.equal(a, b) for a, b in zip(q2.params, q3.params))  # not a fresh adapter: the trained one
