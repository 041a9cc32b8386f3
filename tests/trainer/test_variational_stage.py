"""Variational reasoning's training step on the trainer (arXiv 2509.22637), on the tiny model.

The judge is ``even_length`` (below): a tiny random model never solves arithmetic, so correctness
is made deterministic and frequent by scoring the completion's length instead.
"""

import math

import pytest
import torch

from grpokit.config import load_config
from grpokit.config.schema import RewardConfig
from grpokit.testing import save_tiny_model
from grpokit.trainer.loop import Trainer

REWARD = f"{__file__}:even_length"


def even_length(prompts, completions, **columns):
    """1.0 for a completion of even character length (a stand-in judge, about half the samples)."""
    return [float(len(c) % 2 == 0) for c in completions]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """The tiny model as a folder: the policy loads it, and (full fine-tune) q loads its own copy of it."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def variational_trainer(tiny_cfg, tiny_dir, reward=REWARD, **overrides):
    sets = {"variational.enabled": "true", "algorithm.aggregation": "constant", "variational.num_traces": 3,
            "model.name": tiny_dir, **overrides}
    cfg = tiny_cfg(**sets)
    cfg.rewards = [RewardConfig(name=reward)]
    return Trainer(cfg)


def stage_output(trainer, seed=1):
    """(the step's batch, scores, the LearnBatch after the variational stage, its metrics)."""
    batch, scores, _ = trainer._collect()
    lb, _ = trainer._learn_batch(batch, scores)
    torch.manual_seed(seed)
    out, metrics = trainer.stages[0](trainer.context, lb, scores)
    return batch, scores, out, metrics


def manual_logp(model, tokenizer, prompt_text, completion_ids, temperature):
    """log pi(c_t | prompt, c_<t) of every completion token from one plain forward (no padding, no grpokit scoring)."""
    prompt = tokenizer(prompt_text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    return manual_logp_ids(model, prompt, completion_ids, temperature)


def manual_logp_ids(model, context_ids, completion_ids, temperature):
    """log pi(c_t | context, c_<t) from token ids, one plain forward."""
    ids = torch.cat([context_ids, completion_ids])[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(context_ids) - 1 : -1] / temperature
    return torch.log_softmax(logits.float(), -1).gather(-1, completion_ids[:, None]).squeeze(-1)


def rows_of(batch, i):
    return batch.completion_ids[i][batch.completion_mask[i].bool()]


def hinted_text(trainer, row):
    return trainer._prompt_texts([{"prompt": f"{row['prompt']}\n\nHint: the correct answer is {row['answer']}. "
                                              "Reason step by step, as if solving it yourself."}])[0]


def test_stage_appends_posterior_traces_weighted_by_hand_computed_rho(tiny_cfg, tiny_dir):
    trainer = variational_trainer(tiny_cfg, tiny_dir, **{"variational.posterior_kl": "false"})  # q as it scored the traces
    stage = trainer.stages[0]
    seen = {}
    estimate = stage.estimate_acc

    def recording(ctx, plain, keep):  # keep what the estimator sampled, to recompute pi_hat by hand
        seen["out"] = estimate(ctx, plain, keep)
        seen["traces"] = [plain.completion_ids[i][:k] for i, k in enumerate(keep)]
        return seen["out"]

    stage.estimate_acc = recording
    batch, scores, out, m = stage_output(trainer)
    n, k, b = 2, 3, len(batch)
    assert len(out) == b + n * k  # only the posterior rows: q's forward-KL rows never enter the policy's batch
    assert torch.equal(out.adv[:b], torch.zeros(b))  # the step's own samples train nothing themselves
    assert out.num_seqs == 2.0  # normaliser: the questions
    model, q_model, tok, temp = trainer.model, stage.q.module, trainer.tokenizer, trainer.cfg.rollout.temperature
    assert q_model is not model  # full fine-tune: q holds a base of its own
    correct, answers, texts, _ = seen["out"]
    post = out.rollout.select(torch.arange(b, b + n * k))
    first = {g: int((batch.group_ids == g).nonzero()[0]) for g in range(n)}
    log_rho = []
    for i in range(n * k):
        question = post.rows[i]
        plain = batch.prompt_ids[first[i // k]][batch.prompt_mask[first[i // k]].bool()]
        assert torch.equal(post.prompt_ids[i][post.prompt_mask[i].bool()], plain)  # the plain prompt: no hint
        z = seen["traces"][i]
        assert torch.equal(rows_of(post, i)[: len(z)], z)  # the row: the trace, then the cue and pi's answer
        lp_pi = manual_logp(model, tok, trainer._prompt_texts([question])[0], z, temp)
        lp_q = manual_logp(q_model, tok, hinted_text(trainer, question), z, temp)  # q's own weights, the hinted prompt
        # 'acc': the fraction of pi's 4 answers after the trace judged correct (the judge sees what pi wrote after z)
        judged = even_length([], answers.completions[4 * i : 4 * i + 4])
        assert correct[i].float().tolist() == judged
        pi_hat = sum(judged) / 4
        log_rho.append((math.log(pi_hat) if pi_hat > 0 else -math.inf) + float((lp_pi - lp_q).mean()))
    log_rho = torch.tensor(log_rho).view(n, k)
    # rho~ = rho / sum_k rho per question (0 for a question without a correct trace)
    by_hand = torch.where(torch.isfinite(log_rho).any(-1, keepdim=True), torch.softmax(log_rho, -1), torch.zeros_like(log_rho))
    assert torch.allclose(out.adv[b : b + n * k], by_hand.view(-1).nan_to_num(0.0), atol=1e-5)
    assert m["variational/posterior_rows"] == 6.0 and m["variational/hint_in_prompt"] == 1.0
    assert m["variational/posterior_trained_frac"] == pytest.approx(float((by_hand > 0).float().mean()))


def test_gml_posterior_rows_end_with_the_reference_answer_and_its_likelihood(tiny_cfg, tiny_dir):
    trainer = variational_trainer(tiny_cfg, tiny_dir, **{"variational.estimator": "gml", "variational.num_traces": 2})
    batch, _, out, m = stage_output(trainer)
    b, tok = len(batch), trainer.tokenizer
    pi_hats = []
    for i in range(b, b + 4):
        row = out.rollout.rows[i]
        ids = rows_of(out.rollout, i)
        answer = tok(f"\nThe answer is {row['answer']}.", add_special_tokens=False).input_ids + [tok.eos_token_id]
        assert ids[-len(answer):].tolist() == answer  # the trace (EOS dropped), then the answer and EOS
        assert tok.eos_token_id not in ids[: -len(answer)].tolist()
        lp = manual_logp(trainer.model, tok, trainer._prompt_texts([row])[0], ids, trainer.cfg.rollout.temperature)
        pi_hats.append(math.exp(float(lp[-len(answer):].mean())))  # geometric-mean likelihood of y*
    assert m["variational/pi_hat_mean"] == pytest.approx(sum(pi_hats) / 4, rel=1e-4)
    assert m["variational/posterior_trained_frac"] == 1.0  # every trace has rho > 0 under gml


def test_learner_gradient_is_the_weighted_sft_over_questions_times_max_len(tiny_cfg, tiny_dir):
    from grpokit.trainer.learner import accumulate_gradients

    trainer = variational_trainer(tiny_cfg, tiny_dir, **{"variational.estimator": "gml"})
    _, _, out, _ = stage_output(trainer)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    trainer.model.zero_grad()
    accumulate_gradients(trainer.policy, trainer.learners.parts(out.rollout, 4), out, trainer.objective)
    got = [p.grad.clone() for p in params]
    trainer.model.zero_grad()
    # by hand: L = (1 / (n * L_max)) sum_rows w_row sum_t -log pi(token), n = 2 questions, L_max = 6
    tok, temp = trainer.tokenizer, trainer.cfg.rollout.temperature
    loss = 0.0
    for i in (out.adv != 0).nonzero().squeeze(-1).tolist():
        prompt = tok.decode(out.rollout.prompt_ids[i][out.rollout.prompt_mask[i].bool()])
        ids = rows_of(out.rollout, i)
        p_ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids[0]
        logits = trainer.model(input_ids=torch.cat([p_ids, ids])[None]).logits[0, len(p_ids) - 1 : -1] / temp
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, None]).squeeze(-1)
        loss = loss + float(out.adv[i]) * (-logp.sum())
    (loss / (2 * 6)).backward()
    for g, p in zip(got, params):
        assert torch.allclose(g, p.grad, atol=2e-5, rtol=1e-3)


def test_variational_preset_samples_hinted_traces_and_trains_on_them(tiny_dir, tmp_path):
    # Through APIs that predate the method: the preset, Trainer and train_step.
    sets = [f"model.name={tiny_dir}", f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.log_samples_every=0", "data.n_train=20",
            "data.n_heldout=8", "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=6",
            "train.micro_batch_size=4", "eval.before=false", "eval.after=false"]
    cfg = load_config(preset="variational", overrides=sets)
    cfg.rewards = [RewardConfig(name=REWARD)]
    trainer = Trainer(cfg)
    for _ in range(2):
        m = trainer.train_step()
        assert m["variational/posterior_rows"] == 2 * 4  # K = 4 traces for each of the 2 questions
        assert m["variational/hint_in_prompt"] == 1.0  # every posterior prompt holds the reference answer
        assert 0 < m["variational/posterior_trained_frac"] <= 1 and 1 <= m["variational/ess"] <= 4
        assert m["variational/q_rows"] == pytest.approx(8 * m["reward/mean"])  # q's update: one row per correct sample
        assert m["learn/skipped_rows"] > 0  # the step's own samples (advantage 0) were not learned from
        assert math.isfinite(m["loss"]) and math.isfinite(m["variational/iwae_bound"])


@pytest.mark.parametrize("estimator", ["acc", "gml"])
def test_variational_step_creates_no_tensor_without_a_device(tiny_cfg, tiny_dir, estimator):
    from grpokit.testing import implicit_device_recorder

    trainer = variational_trainer(tiny_cfg, tiny_dir, **{"variational.estimator": estimator, "variational.num_traces": 2})
    with implicit_device_recorder() as rec:
        m = trainer.train_step()
    assert not rec.hits, rec.report()
    assert m["variational/q_rows"] > 0 and m["variational/posterior_trained_frac"] > 0  # q trained, posterior rows built


def test_load_time_checks_name_the_field():
    from grpokit.trainer.inputs import RunContractError, check_data, check_run

    cfg = load_config(preset="variational")
    with pytest.raises(RunContractError, match="'answer'.*data.answer_column"):
        check_data(cfg, [{"prompt": "2 + 2?", "answer": "4"}, {"prompt": "why?", "answer": None}])
    with pytest.raises(RunContractError, match="algorithm.loss"):
        check_run(load_config(preset="variational", overrides=["algorithm.loss=reg_grpo"]))
    with pytest.raises(RunContractError, match="variational.hint_template"):
        check_run(load_config(preset="variational", overrides=["variational.hint_template=no placeholders"]))
    with pytest.raises(RunContractError, match="verification.enabled"):
        check_run(load_config(preset="variational", overrides=["verification.enabled=true"]))
    with pytest.raises(RunContractError, match="variational.answer_template"):
        check_run(load_config(preset="variational", overrides=["variational.answer_template=no cue"]))
    with pytest.raises(RunContractError, match="variational.q_model='no/such-model'"):
        check_run(load_config(preset="variational", overrides=["variational.q_model=no/such-model"]))
    with pytest.raises(RunContractError, match="distributed.learner=ddp"):
        check_run(load_config(preset="variational", overrides=["distributed.learner=fsdp"]))
    for bad in ("variational.q_lora_r=0", "variational.q_lr=0", "variational.num_answers=0"):
        with pytest.raises(Exception, match=bad.split("=")[0]):
            load_config(preset="variational", overrides=[bad])


def test_splice_completions_cuts_each_row_and_appends_its_suffix():
    from grpokit.rollout.types import RolloutBatch, splice_completions

    batch = RolloutBatch(
        prompt_ids=torch.tensor([[5, 6], [5, 6]]), prompt_mask=torch.ones(2, 2, dtype=torch.long),
        completion_ids=torch.tensor([[7, 8, 2], [9, 2, 0]]), completion_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]),
        group_ids=torch.tensor([0, 0]), sampling_logp=torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, 0.0]]),
        truncated=torch.tensor([False, False]), entropy=torch.ones(2, 3), prompts=["p", "p"], completions=["ab", "c"],
        rows=[{}, {}],
    )
    # row 0 keeps 2 tokens then [4]; row 1 keeps 1 token (its EOS 2 dropped) then [5, 6, 2]
    out, suffix = splice_completions(batch, [2, 1], [[4], [5, 6, 2]], ["ab!", "c?"], pad_id=0)
    assert out.completion_ids.tolist() == [[7, 8, 4, 0], [9, 5, 6, 2]]
    assert out.completion_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert suffix.tolist() == [[0, 0, 1, 0], [0, 1, 1, 1]]
    assert out.sampling_logp.tolist() == [[-1.0, -2.0, 0.0, 0.0], [-4.0, 0.0, 0.0, 0.0]]
    assert out.entropy is None and out.completions == ["ab!", "c?"] and not bool(out.truncated.any())
