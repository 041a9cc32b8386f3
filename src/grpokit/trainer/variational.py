"""Variational reasoning's training step: a config-listed batch stage (``variational.enabled``).

Zhou et al., "Variational Reasoning for Language Models", arXiv 2509.22637; the pure functions
are in :mod:`grpokit.algos.variational`. The variational posterior q_φ(z|x, y*) has weights of its
own (:class:`~grpokit.trainer.posterior.PosteriorModel`: a LoRA adapter beside the policy's or on
a separate base, with its own optimizer) and is prompted with the reference answer
(``variational.hint_template``; the paper's posterior prompt templates A and B, reworded here
[inferred]: their exact text ships only with the authors' datasets).

Each step, on rank 0, for the n questions of the step's batch:

(a) K traces z_k ~ q_φ(·|x, y*) per question (``num_traces``), drawn by q's own sampler at the
    rollout's temperature / top-p / top-k; the trace is q's completion without its EOS;
(b) each trace scored without gradient under π_θ (the plain prompt) and q_φ (the hinted prompt,
    q's weights), and π̂(Y|x,z_k) estimated (``estimator``), as the paper does: 'acc' — n_ans
    answers (``num_answers``) sampled from π_θ continuing x, z_k and the answer cue (the text of
    ``answer_template`` before ``{answer}``: "\\nThe answer is"), each judged by the run's accuracy judge on what π
    wrote after the trace (the cue and its answer), π̂ the fraction correct; 'gml' — the
    geometric-mean likelihood under π_θ of the reference answer written by ``answer_template``
    after the trace and followed by EOS;
(c) log ρ_k = log π̂ + per-token mean of log π_θ − log q_φ over the trace; the posterior rows —
    plain prompt, completion = the trace then an answer ('acc': the first of π's answers judged
    correct, the authors' "verified answer sampled from π_θ0"; 'gml': the reference answer) — are
    appended to the policy's batch with advantage ρ̃_k (``selection`` 'soft' or 'top1');
(d) with ``posterior_kl``, q's own update: the policy's samples the judge scored correct, under
    the hinted prompt, weighted 1[correct]/#correct per question, one AdamW step on q's adapter
    with loss ``(1/(n·L_max)) Σ_rows w_row Σ_t −log q_φ(token)`` (L_max = ``rollout.max_new_tokens``,
    the normaliser of the policy's rows [inferred]). These rows never enter the policy's batch.

The step's own samples stay first with advantage 0: they train nothing themselves (the learner
skips them where that is exact) and are the data of (d). At ratio 1 (``num_iterations`` 1: the
old log-probs are the detached current ones) the gradient of ``ppo_clip`` / ``cispo`` is
``−A ∇log π`` per token, so the appended rows are a weighted SFT. Normaliser: ``num_seqs`` = n,
the questions; with the ``constant`` aggregation the loss is
``(1/(n·L_max)) Σ_rows w_row Σ_t −log π(token)``: sequence log-likelihoods, each question's
weights summing to 1, over a constant (the authors' "constant loss normaliser").
Appended rows carry their own learner log-probs as behaviour log-probs, so an off-policy
correction leaves them at weight 1.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from grpokit.algos.variational import (
    acc_log_likelihood, forward_kl_weights, gml_log_likelihood, iwae_bound, log_importance_weights, trace_log_ratio,
    trace_weights,
)
from grpokit.config.schema import Config, VariationalConfig
from grpokit.rewards import score_completions
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import (
    RolloutBatch, SamplingParams, concat_batches, renumber_groups, splice_completions, with_prompts,
)
from grpokit.trainer.context import StepContext
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.learner import micro_batches
from grpokit.trainer.posterior import PosteriorModel

# The posterior's prompt [inferred wording]: A puts the reference answer before the question, B after it as a hint.
HINT_TEMPLATES = {
    "A": "The reference answer to the question below is {answer}. Reason step by step to it, as if solving it yourself.\n\n{question}",
    "B": "{question}\n\nHint: the correct answer is {answer}. Reason step by step, as if solving it yourself.",
}
# Losses whose gradient at ratio 1 is -A grad log pi per token (a weighted SFT with A = the row's weight).
WEIGHTED_SFT_LOSSES = ("ppo_clip", "cispo")


def hint_template(text: str) -> str:
    """The format string of ``variational.hint_template`` ('A', 'B' or the text itself)."""
    return HINT_TEMPLATES.get(text, text)


def config_problem(cfg: Config) -> Optional[str]:
    """Why a run with ``variational.enabled`` cannot run as configured (one line naming the field), or None."""
    v = cfg.variational
    template = hint_template(v.hint_template)
    if "{question}" not in template or "{answer}" not in template:
        return f"variational.hint_template must be A, B or text containing {{question}} and {{answer}}, got {v.hint_template!r}"
    if "{answer}" not in v.answer_template:
        return (f"variational.answer_template must contain {{answer}} (gml: the reference answer after the trace; acc: the "
                f"text before it is the cue the policy answers from), got {v.answer_template!r}")
    if v.q_model is not None:
        from grpokit.model.loading import model_name_problem

        problem = model_name_problem(v.q_model)
        if problem:
            return f"variational.q_model={v.q_model!r} (q's own base model): {problem}"
    if cfg.distributed.learner == "fsdp":
        return "variational.enabled samples and trains q on rank 0 only, which sharded learners cannot: set distributed.learner=ddp"
    if cfg.algorithm.loss not in WEIGHTED_SFT_LOSSES:
        return (f"variational.enabled trains a weighted SFT through the policy loss: set algorithm.loss to one of "
                f"{', '.join(WEIGHTED_SFT_LOSSES)} (gradient -A grad log pi at ratio 1), not '{cfg.algorithm.loss}'")
    if cfg.verification.enabled:
        return "variational.enabled and verification.enabled both append their own rows to the batch: enable one of them"
    return None


def answer_cue(template: str) -> str:
    """The text the policy answers from after a trace: ``answer_template`` before ``{answer}``, trailing spaces dropped
    (a BPE tokenizer writes the space together with the answer)."""
    return template.split("{answer}")[0].rstrip(" ")


def first_rows(group_ids: torch.Tensor) -> dict[int, int]:
    """``{group id: index of its first row}``, in increasing group id (the question order)."""
    first: dict[int, int] = {}
    for i, g in enumerate(group_ids.tolist()):
        first.setdefault(g, i)
    return dict(sorted(first.items()))


def score_rows(policy: Any, batch: RolloutBatch, size: int) -> torch.Tensor:
    """``[B, T]`` no-grad log-probs of the completion tokens under the current policy (0 off the mask)."""
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.device)
    for rows, mb in micro_batches(batch, size):
        logp = policy.score(mb, "current")
        out[rows, : logp.shape[1]] = logp.to(out.dtype)
    return out * batch.completion_mask


def judge_correct(ctx: StepContext, batch: RolloutBatch) -> torch.Tensor:
    """``[B]`` bool on the batch's device: the run's accuracy judge scored the completion correct (value >= 1)."""
    t = ctx.cfg.train
    scores = score_completions([ctx.judge], batch.prompts, batch.completions, batch.columns(), on_error=t.on_reward_error,
                               group_ids=batch.group_ids.tolist(), timeout_s=t.reward_timeout_s)
    return (scores.per_reward[ctx.judge.name].nan_to_num(0.0) >= 1.0).to(batch.device)


def hint_fraction(tokenizer: Any, batch: RolloutBatch) -> float:
    """Fraction of rows whose decoded prompt tokens contain the row's reference answer."""
    ids, mask = batch.prompt_ids.cpu(), batch.prompt_mask.cpu()
    texts = tokenizer.batch_decode([row[m.bool()] for row, m in zip(ids, mask)], skip_special_tokens=True)
    return sum(str(row["answer"]) in text for row, text in zip(batch.rows, texts)) / max(len(texts), 1)


def append_rows(lb: LearnBatch, parts: list[tuple[RolloutBatch, torch.Tensor, torch.Tensor]], pad_id: int,
                num_seqs: float, mask_truncated: bool) -> LearnBatch:
    """The step's LearnBatch with ``(rows, adv [b], rewards [b])`` parts appended; its own rows get advantage 0.

    Appended rows count all their completion tokens (minus truncated rows with
    ``mask_truncated``) with token weight 1; ``num_seqs`` is the batch's normaliser.
    """
    merged = concat_batches([lb.rollout] + [p[0] for p in parts], pad_id)
    n, width = len(lb), merged.completion_ids.shape[1]

    def pad(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, width - x.shape[1]))

    mask = merged.completion_mask.clone()
    mask[:n] = pad(lb.mask)  # the step's own exclusions stay
    if mask_truncated:
        mask[n:][merged.truncated[n:]] = 0
    own_weights = lb.token_weights if lb.token_weights is not None else lb.mask.to(torch.float32)
    weights = torch.cat([pad(own_weights), mask[n:].to(own_weights.dtype)])
    own_adv = torch.zeros(n, dtype=lb.rewards.dtype, device=lb.rewards.device)
    adv = torch.cat([own_adv] + [p[1].to(own_adv.dtype) for p in parts])
    rewards = torch.cat([lb.rewards] + [p[2].to(lb.rewards.dtype) for p in parts])
    return LearnBatch(rollout=merged, adv=adv, mask=mask, rewards=rewards, behaviour_logp=merged.behaviour_logp,
                      token_weights=weights, num_seqs=float(num_seqs))


class VariationalPosterior:
    """Appends the posterior rows to the step's batch and trains q on its own (see the module docstring).

    q is built at the first step (it needs the run's policy); its adapter and optimizer state go
    into the run's checkpoint (``state_dict`` / ``load_state_dict``; a resume before the first
    step keeps the state until q is built).
    """

    def __init__(self, cfg: VariationalConfig) -> None:
        self.cfg = cfg
        self.template = hint_template(cfg.hint_template)
        self.q: Optional[PosteriorModel] = None
        self._pending: Optional[dict] = None

    def posterior(self, ctx: StepContext) -> PosteriorModel:
        """q, built on first use from the run's policy (see :mod:`grpokit.trainer.posterior`)."""
        if self.q is None:
            self.q = PosteriorModel(ctx.cfg, ctx.policy, ctx.tokenizer)
            if self._pending:
                self.q.load_state_dict(self._pending)
            self._pending = None
        return self.q

    def state_dict(self) -> dict:
        return self.q.state_dict() if self.q is not None else dict(self._pending or {})

    def load_state_dict(self, state: dict) -> None:
        if self.q is not None and state:
            self.q.load_state_dict(state)
        else:
            self._pending = state

    def __call__(self, ctx: StepContext, lb: LearnBatch, scores: Any) -> tuple[LearnBatch, dict[str, float]]:
        return ctx.learners.on_main(lambda: self.rows(ctx, lb, ctx.correct(scores)))

    def rows(self, ctx: StepContext, lb: LearnBatch, correct: torch.Tensor) -> tuple[LearnBatch, dict[str, float]]:
        """(the batch with the posterior rows appended, metrics); ``correct [B]``: the judge on the step's samples."""
        q = self.posterior(ctx)
        batch = lb.rollout
        first = first_rows(batch.group_ids)
        questions = [batch.rows[i] for i in first.values()]
        hinted = [{**row, "prompt": self.template.format(question=row["prompt"], answer=row["answer"])} for row in questions]
        r = ctx.cfg.rollout
        params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k, min_new_tokens=r.min_new_tokens)
        q_batch = q.sample(ctx.prompt_texts(hinted), hinted, self.cfg.num_traces, params)  # group g = question g
        post, w, pi_hat, metrics = self.posterior_rows(ctx, batch, list(first.values()), q_batch)
        if self.cfg.posterior_kl:
            metrics.update(self.train_posterior(ctx, batch, first, q_batch, correct.to(batch.device)))
        return append_rows(lb, [(post, w, pi_hat)], ctx.policy.pad_id, len(first), ctx.cfg.algorithm.mask_truncated), metrics

    def posterior_rows(self, ctx: StepContext, batch: RolloutBatch, first: list[int], q_batch: RolloutBatch):
        """(posterior rows under the plain prompt, their weights ρ̃ [nK], π̂ [nK], metrics) — steps (b) and (c)."""
        policy, size = ctx.policy, ctx.cfg.train.micro_batch_size
        src = [first[g] for g in q_batch.group_ids.tolist()]  # the step's row holding each trace's question
        index = torch.tensor(src, dtype=torch.long, device=batch.device)
        plain = with_prompts(q_batch, batch.prompt_ids[index], batch.prompt_mask[index], [batch.prompts[i] for i in src],
                             [batch.rows[i] for i in src])
        q_logp = self.q.score(q_batch, size)  # log q_φ(z|x, y*): q's weights, the hinted prompt
        keep = (q_batch.completion_mask.sum(-1) - (~q_batch.truncated).long()).tolist()  # the trace without its EOS
        eos = ctx.backend.eos_ids[0]
        if self.cfg.estimator == "gml":
            texts = [self.cfg.answer_template.format(answer=row["answer"]) for row in plain.rows]
            suffixes = [ctx.tokenizer(t, add_special_tokens=False).input_ids + [eos] for t in texts]
        else:
            correct, answers, texts, suffixes = self.estimate_acc(ctx, plain, keep)
            log_pi_hat = acc_log_likelihood(correct)
        plain, answer_mask = splice_completions(plain, keep, suffixes, [c + t for c, t in zip(plain.completions, texts)],
                                                policy.pad_id)
        pi_logp = score_rows(policy, plain, size)  # log π_θ(z|x) and of the answer after it: the plain prompt
        trace_mask = plain.completion_mask * (1 - answer_mask)
        if self.cfg.estimator == "gml":
            log_pi_hat = gml_log_likelihood(pi_logp, answer_mask)
        log_ratio = trace_log_ratio(pi_logp, trace_mask, q_logp, q_batch.completion_mask)
        log_rho = log_importance_weights(log_pi_hat, log_ratio)
        w, w_metrics = trace_weights(log_rho, plain.group_ids, self.cfg.selection)
        plain.sampling_logp = pi_logp  # the learner's own log-probs: any off-policy correction weighs these rows 1
        bound = iwae_bound(log_rho, plain.group_ids)
        metrics = {
            "variational/posterior_rows": float(len(plain)),
            "variational/posterior_trained_frac": float((w > 0).float().mean()),
            "variational/ess": float(w_metrics["ess"]),
            "variational/valid_questions_frac": float(w_metrics["valid_frac"]),
            "variational/weight_max": float(w.max()) if len(w) else 0.0,
            "variational/log_ratio_mean": float(log_ratio.mean()),
            "variational/pi_hat_mean": float(log_pi_hat.exp().mean()),
            "variational/hint_in_prompt": hint_fraction(ctx.tokenizer, q_batch),
        }
        if bool(torch.isfinite(bound).any()):
            metrics["variational/iwae_bound"] = float(bound[torch.isfinite(bound)].mean())
        return plain, w, log_pi_hat.exp(), metrics

    def estimate_acc(self, ctx: StepContext, plain: RolloutBatch, keep: list[int]):
        """π̂_Acc: n_ans answers sampled from π_θ after (x, z_k, cue), judged; the paper's Acc estimator.

        Returns ``(correct [nK, n_ans] bool, the answers as a RolloutBatch (group k = trace k, its
        prompt = x + z_k + cue), the text each posterior row gets after its trace, its token ids)``:
        the cue and the first correct answer (else the first answer), ending with its EOS if it had one.
        """
        tok, cue = ctx.tokenizer, answer_cue(self.cfg.answer_template)
        cue_ids = tok(cue, add_special_tokens=False).input_ids
        contexts = [p[m.bool()].tolist() + c[:k].tolist() + cue_ids
                    for p, m, c, k in zip(plain.prompt_ids, plain.prompt_mask, plain.completion_ids, keep)]
        answers = sample_after(policy_sampler(ctx), contexts, plain.rows, self.cfg.num_answers, self.answer_params(ctx))
        answers.completions = [cue + text for text in answers.completions]  # what π wrote after the trace
        n = self.cfg.num_answers
        correct = judge_correct(ctx, answers).view(len(plain), n)  # [nK, n_ans]
        pick = torch.where(correct.any(-1), correct.float().argmax(-1), torch.zeros_like(correct[:, 0], dtype=torch.long))
        rows = (torch.arange(len(plain), device=correct.device) * n + pick).tolist()
        ids, mask = answers.completion_ids.cpu(), answers.completion_mask.cpu().bool()
        suffixes = [cue_ids + ids[i][mask[i]].tolist() for i in rows]
        return correct, answers, [answers.completions[i] for i in rows], suffixes

    def answer_params(self, ctx: StepContext) -> SamplingParams:
        r = ctx.cfg.rollout
        return SamplingParams(self.cfg.answer_max_tokens, r.temperature, r.top_p, r.top_k)

    def train_posterior(self, ctx: StepContext, batch: RolloutBatch, first: dict[int, int], q_batch: RolloutBatch,
                        correct: torch.Tensor) -> dict[str, float]:
        """Step (d): q's own forward-KL update on the step's correct samples under the hinted prompt; its metrics."""
        rows = forward_kl_rows(batch, first, q_batch, correct)
        if rows is None:
            return {"variational/q_rows": 0.0}
        sub, w = rows
        if ctx.cfg.algorithm.mask_truncated:
            w = torch.where(sub.truncated.to(w.device), torch.zeros_like(w), w)
        q_logp = self.q.score(sub, ctx.cfg.train.micro_batch_size)  # log q_φ(z|x, y*) before the update
        tokens = sub.completion_mask.sum().clamp(min=1)
        metrics = {"variational/q_rows": float(len(sub)), "variational/q_nll": float(-(q_logp.sum()) / tokens)}
        normaliser = float(len(first) * ctx.cfg.rollout.max_new_tokens)
        return {**metrics, **self.q.update(sub, w, normaliser, ctx.cfg.train.micro_batch_size)}


def forward_kl_rows(batch: RolloutBatch, first: dict[int, int], q_batch: RolloutBatch, correct: torch.Tensor):
    """(the step's correct samples under their question's hinted prompt, weights 1[correct]/#correct [b]), or None."""
    w_all = forward_kl_weights(correct.float(), batch.group_ids)  # [B]
    idx = correct.nonzero().squeeze(-1)
    if idx.numel() == 0:
        return None
    question = {g: q for q, g in enumerate(first)}  # group id -> question index (q_batch's group)
    q_first = list(first_rows(q_batch.group_ids).values())
    sub = batch.select(idx)
    src = [q_first[question[g]] for g in sub.group_ids.tolist()]
    index = torch.tensor(src, dtype=torch.long, device=batch.device)
    sub = with_prompts(sub, q_batch.prompt_ids[index], q_batch.prompt_mask[index], [q_batch.prompts[i] for i in src],
                       [q_batch.rows[i] for i in src])
    sub.group_ids = renumber_groups(sub.group_ids)
    return sub, w_all[idx]


def policy_sampler(ctx: StepContext) -> HFBackend:
    """An in-process sampler of the policy's own module (the run's may be an engine that cannot take token contexts)."""
    backend = ctx.backend
    return backend if isinstance(backend, HFBackend) else HFBackend(ctx.policy.module, ctx.tokenizer, fused_decode=ctx.cfg.rollout.fused_decode)


def sample_after(backend: HFBackend, contexts: list[list[int]], rows: list[dict], n: int, params: SamplingParams) -> RolloutBatch:
    """``n`` completions sampled after each token context (left-padded), as a RolloutBatch whose prompts are the contexts."""
    device = next(backend.model.parameters()).device
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), backend.pad_id, dtype=torch.long, device=device)
    attention = torch.zeros((len(contexts), width), dtype=torch.long, device=device)
    for i, c in enumerate(contexts):
        ids[i, width - len(c):] = torch.tensor(c, dtype=torch.long, device=device)
        attention[i, width - len(c):] = 1
    return backend.generate_from_ids(ids, attention, rows, n, params)
