"""The GRPO training loop, top to bottom: rollout -> rewards -> advantages -> learn.

Departures from DeepSeekMath GRPO (arXiv 2402.03300) are all config: the advantage, loss,
aggregation and KL estimator are registry names; mu = ``algorithm.num_iterations`` optimizer
steps reuse one rollout batch (old log-probs are recomputed once before the first update when
mu > 1, and are the detached current log-probs when mu = 1, where the ratio is exactly 1).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any, Optional

import torch

from grpokit.config.loading import dump_yaml
from grpokit.config.schema import Config
from grpokit.data.offline_filter import offline_difficulty_filter
from grpokit.data.sampler import CurriculumSampler, PromptSampler
from grpokit.distributed.ddp import SilentLogger, init_learners
from grpokit.registries import get_registry
from grpokit.rollout import make_backend
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import span_mask_through
from grpokit.trainer import checkpoint as ckpt_io
from grpokit.trainer import setup
from grpokit.trainer.collect import collect_batch
from grpokit.trainer.evaluation import evaluate_accuracy
from grpokit.trainer.learner import (
    Objective, accumulate_gradients, micro_batches, objective_gradients, rows_with_gradient, score_logprobs,
)
from grpokit.trainer.memory import allocate_gradients, release_free_memory, tune_malloc
from grpokit.trainer.metrics import RunLogger, reward_metrics, sample_records
from grpokit.trainer.progress import StepProgress
from grpokit.trainer.verification import verification_step

log = logging.getLogger(__name__)


class Trainer:
    """Wires the stages of a run; holds no algorithm logic of its own."""

    def __init__(self, cfg: Config, model: Optional[torch.nn.Module] = None, tokenizer: Any = None) -> None:
        self.cfg = cfg
        if cfg.model.threads:
            torch.set_num_threads(cfg.model.threads)
        tune_malloc()
        setup.seed_everything(cfg.train.seed)
        self.run_dir = Path(cfg.logging.output_dir)
        self.splits = setup.build_splits(cfg.data)
        self.rewards = setup.build_rewards(cfg.rewards)
        judge = cfg.eval.accuracy_reward or self.rewards[0].name
        matches = [r for r in self.rewards if r.name == judge]
        if not matches:
            raise ValueError(f"eval.accuracy_reward '{judge}' is not one of the run's rewards: {[r.name for r in self.rewards]}")
        self.judge = matches[0]
        if model is None:
            model, tokenizer = setup.load_policy(cfg)
        elif cfg.model.lora.enabled and not hasattr(model, "peft_config"):
            from grpokit.model.lora import apply_lora

            model = apply_lora(model, cfg.model.lora)
        self.model, self.tokenizer = model, tokenizer
        self.learners = init_learners(cfg.distributed, self.model)  # torchrun: rank, world size; else 1 process
        algo = cfg.algorithm
        self.policy_loss = get_registry("loss").get(algo.loss)
        needs = set(getattr(self.policy_loss, "needs", ()))
        if getattr(self.policy_loss, "groupwise", False) and cfg.train.micro_batch_size % cfg.rollout.group_size:
            raise ValueError(
                f"algorithm.loss '{algo.loss}' needs whole groups per micro-batch: make train.micro_batch_size "
                f"a multiple of rollout.group_size ({cfg.rollout.group_size})"
            )
        kl_needs = getattr(get_registry("kl").get(algo.kl), "needs", ("ref_logp",))
        self.needs_ref = (algo.beta > 0 and "ref_logp" in kl_needs) or "ref_logp" in needs
        self.ref_model = setup.reference_model(self.model, cfg, self.needs_ref)
        self.teacher = setup.teacher_model(cfg, self.tokenizer) if "teacher_logp" in needs else None
        if self.learners.is_main:
            self.backend = make_backend(cfg.rollout, self.model, self.tokenizer, seed=cfg.train.seed)
        else:  # only rank 0 samples; other learners keep an idle in-process backend for its pad / EOS ids
            self.backend = HFBackend(self.model, self.tokenizer)
        if cfg.data.offline_filter_samples:  # INTELLECT-2: drop prompts the initial policy always / never solves
            self.splits.train = self.learners.on_main(
                lambda: offline_difficulty_filter(cfg, self.backend, self.splits.train, self._prompt_texts, self.judge)
            )
        self.optimizer = setup.build_optimizer(self.model, cfg.optim)
        self.scheduler = setup.build_scheduler(self.optimizer, cfg.optim, cfg.train.steps)
        self.sampler = PromptSampler(self.splits.train, cfg.data.seed)
        if cfg.data.curriculum:
            curriculum = get_registry("curriculum").get(cfg.data.curriculum)(**cfg.data.curriculum_options)
            self.sampler = CurriculumSampler(self.sampler, curriculum)
        self.combiner = get_registry("combiner").get(cfg.reward_combiner.name)
        self.advantage_fn = get_registry("advantage").get(algo.advantage)
        # Stateful parts (drpo, hypervolume, mirror_descent) expose a state factory; it is checkpointed.
        self.combiner_state = self._new_state(self.combiner)
        self.advantage_state = self._new_state(self.advantage_fn)
        self.logprob_temperature = cfg.rollout.temperature if cfg.model.temperature_in_logprobs else 1.0
        self.token_weights_fn = get_registry("token_weights").get(algo.token_weights)
        self.objective = Objective.from_config(cfg, self.policy_loss)
        self.step = 0
        self._step_start = None
        self.logger = RunLogger(self.run_dir, tensorboard=cfg.logging.tensorboard) if self.learners.is_main else SilentLogger()

    # ------------------------------------------------------------------ setup helpers
    @staticmethod
    def _new_state(fn: Any) -> Any:
        make_state = getattr(fn, "make_state", None)
        return make_state() if make_state is not None else None

    def _stateful(self) -> dict[str, Any]:
        """Algorithm parts with state that checkpoints must carry (drpo history, curricula, combiners)."""
        parts = {
            "advantage_state": self.advantage_state,
            "curriculum": getattr(self.sampler, "curriculum", None),
            "combiner_state": self.combiner_state,
        }
        return {k: v for k, v in parts.items() if v is not None}

    def _ref_context(self):
        return self.model.disable_adapter() if hasattr(self.model, "peft_config") else None

    def _prompt_texts(self, rows: list[dict]) -> list[str]:
        return setup.render_all(self.tokenizer, rows, self.cfg.data.system_prompt)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, float]:
        """Sample, score, compute advantages and update; returns the step's metrics."""
        cfg, algo = self.cfg, self.cfg.algorithm
        t0 = time.perf_counter()
        self._step_start = (self.sampler.state(), ckpt_io.rng_state())
        batch, scores, collect_metrics = self.learners.on_main(self._collect)  # rank 0 samples, all ranks learn
        t_gen = time.perf_counter() - t0

        adv, adv_metrics = self._advantages(
            scores.total, batch.group_ids, domains=batch.columns().get("domain"), state=self.advantage_state,
            mask=batch.completion_mask,
        )
        loss_mask = batch.completion_mask.clone()
        if algo.mask_truncated:
            loss_mask[batch.truncated] = 0
        weights, weight_metrics = self.token_weights_fn(
            loss_mask, completion_ids=batch.completion_ids, group_ids=batch.group_ids,
            entropy=batch.entropy, rewards=scores.total, **algo.token_weights_options,
        )

        solutions = batch  # metrics and sample logs describe the solutions
        rewards_all, verif_mask, num_seqs = scores.total, None, None
        if cfg.verification.enabled:
            batch, adv, loss_mask, weights, rewards_all, verif_mask, v_metrics = self.learners.on_main(
                lambda: self._verify(batch, scores, adv, weights)
            )
            num_seqs = float(len(scores.total))  # normalise by solutions: verifications add alpha-terms
            collect_metrics.update(v_metrics)

        plan_mask = None
        if algo.plan_delimiter:
            delim = self.tokenizer(algo.plan_delimiter, add_special_tokens=False).input_ids
            plan_mask = span_mask_through(batch.completion_ids, delim) * loss_mask

        release_free_memory()  # the decode loop's freed blocks, before the learner's peak
        t1 = time.perf_counter()
        learn = self._learn(batch, adv, loss_mask, weights, rewards_all, dict(
            plan_mask=plan_mask, verif_mask=verif_mask, num_seqs=num_seqs,
        ))
        t_learn = time.perf_counter() - t1
        release_free_memory()
        self.step += 1
        gen_tokens = float(solutions.completion_mask.sum())
        metrics = {
            **reward_metrics(scores, self._correct(scores)),
            **{k: float(v) for k, v in {**adv_metrics, **weight_metrics}.items()},
            **collect_metrics,
            **learn,
            "lr": self.scheduler.get_last_lr()[0],
            "completion_len/mean": gen_tokens / len(solutions),
            "completion_len/max": float(solutions.completion_mask.sum(-1).max()),
            "truncated_frac": float(solutions.truncated.float().mean()),
            "tokens_per_s": gen_tokens / max(t_gen, 1e-9),
            "time/generation_s": t_gen,
            "time/learn_s": t_learn,
            "time/step_s": time.perf_counter() - t0,
        }
        self._log_samples(solutions, scores, adv[: len(solutions)])
        self._step_start = None  # the step is complete: nothing to rewind
        return metrics

    def _collect(self):
        """(batch, scores, metrics) of one step: sample, score, and let a curriculum observe the groups."""
        batch, scores, metrics = collect_batch(
            self.cfg, self.backend, self.sampler, self._prompt_texts, self.rewards, self.backend.pad_id, combine=self._combine
        )
        if hasattr(self.sampler, "observe"):  # curricula learn each prompt's difficulty
            self._observe_groups(batch, scores)
            metrics.update(self.sampler.metrics())
        return batch, scores, metrics

    def _learn(self, batch, adv, loss_mask, weights, rewards, extra: dict) -> dict[str, float]:
        """mu optimizer steps on one batch: old / reference / teacher log-probs, then the objective.

        adv: [B]; loss_mask, weights: [B, T]; rewards: [B]; extra: optional per-token inputs of
        particular losses (plan_mask, verif_mask) and the batch normaliser num_seqs.
        """
        cfg, algo = self.cfg, self.cfg.algorithm
        self.model.train()
        keep = self._rows_with_gradient(adv, loss_mask, weights)
        parts = self.learners.parts(batch, cfg.train.micro_batch_size, keep)  # all of it, or this rank's whole groups
        temperature = self.logprob_temperature
        old = score_logprobs(self.model, parts, temperature) if algo.num_iterations > 1 else None
        if algo.ref_sync_every and self.step % algo.ref_sync_every == 0 and self.ref_model is not None:
            self.ref_model.load_state_dict(self.model.state_dict())  # humanline: reference <- pre-update policy
        ref = score_logprobs(self.ref_model or self.model, parts, temperature, ctx=self._ref_context()) if self.needs_ref else None
        teacher = score_logprobs(self.teacher, parts, temperature) if self.teacher is not None else None
        if old is not None or ref is not None or teacher is not None:
            release_free_memory()  # the scoring forwards' freed activations, before the learner's peak
        schedule = getattr(self.policy_loss, "option_schedule", None)
        if schedule is not None:
            self.objective.loss_options.update(schedule(self.step, **self.objective.loss_options))
        learn: dict[str, float] = {}
        for iteration in range(algo.num_iterations):
            constraint_kl = None
            if iteration > 0 and "constraint_kl" in getattr(self.policy_loss, "needs", ()):
                # DisCO: token-mean KL(old || current) over the whole batch at the current weights
                current = score_logprobs(self.model, parts, temperature)
                diff = sum(float(((o - c) * loss_mask[r, : o.shape[1]]).sum()) for (r, _), o, c in zip(parts, old, current))
                diff = self.learners.all_sum(diff)
                constraint_kl = torch.tensor(diff / float(loss_mask.sum().clamp(min=1)))
            allocate_gradients([p for p in self.model.parameters() if p.requires_grad])
            learn = accumulate_gradients(
                self.model, parts, adv, loss_mask, self.objective, temperature=temperature,
                old_logps=old, ref_logps=ref, teacher_logps=teacher, token_weights=weights, rewards=rewards,
                constraint_kl=constraint_kl, **extra,
            )
            learn = self.learners.reduce_metrics(learn, parts, loss_mask)
            learn["grad_norm"] = self._optimizer_step()
        if keep is not None:
            learn["learn/skipped_rows"] = 1.0 - float(keep.float().mean())
        return learn

    def _rows_with_gradient(self, adv: torch.Tensor, loss_mask: torch.Tensor, weights) -> Optional[torch.Tensor]:
        """``[B]`` rows to learn from when zero-advantage rows may be skipped (see learner.rows_with_gradient), else None."""
        algo = self.cfg.algorithm
        if not (self.cfg.train.skip_zero_advantage and getattr(self.policy_loss, "zero_advantage_zero_gradient", False)):
            return None  # only losses whose gradient is exactly 0 where the advantage is 0
        if self.needs_ref or algo.beta > 0 or algo.entropy_coef > 0 or algo.entropy_band_coef > 0 or self.teacher is not None:
            return None  # a KL, entropy or distillation term has a gradient on every row
        return None if self.learners.distributed else rows_with_gradient(adv, loss_mask, weights)

    def _advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor, **inputs: Any):
        """(adv [B], metrics) from the configured estimator and its options."""
        algo = self.cfg.algorithm
        return self.advantage_fn(
            rewards, group_ids, scale=algo.scale, std_mode=algo.std_mode, std_eps=algo.std_eps,
            **inputs, **algo.advantage_options,
        )

    def _correct(self, scores) -> torch.Tensor:
        """``[B]`` bool: the accuracy judge scored the completion as correct (value >= 1)."""
        return scores.per_reward[self.judge.name].nan_to_num(0.0) >= 1.0

    def _combine(self, scores, batch) -> tuple[torch.Tensor, dict[str, float]]:
        """One reward per completion from all reward columns, through the configured combiner."""
        names = list(scores.per_reward)
        weight_of = {r.name: r.weight for r in self.rewards}
        weights = torch.tensor([weight_of[n.split("/")[0]] for n in names], dtype=torch.float32)
        matrix = torch.stack([scores.per_reward[n] for n in names], dim=1)  # [B, K]
        options = dict(self.cfg.reward_combiner.options)
        extra = {}
        if "objective_grads" in getattr(self.combiner, "needs", ()):
            extra["objective_grads"] = self._objective_grads(batch, matrix.nan_to_num(0.0), options)
            extra["lr"] = self.scheduler.get_last_lr()[0]
        if "validation" in getattr(self.combiner, "needs", ()):
            extra["validation"] = matrix.nan_to_num(0.0).mean(0)  # online per-objective means [inferred]
        options = {k: v for k, v in options.items() if not k.startswith("grad_")}
        total, self.combiner_state, m = self.combiner(
            matrix, batch.group_ids, weights=weights, state=self.combiner_state, **options, **extra
        )
        return total, {k: float(v) for k, v in m.items()}

    def _objective_grads(self, batch, matrix: torch.Tensor, options: dict) -> torch.Tensor:
        """``[K, P]`` policy-loss gradients, one per objective's own advantage (see learner.objective_gradients)."""
        return objective_gradients(
            self.model, micro_batches(batch, self.cfg.train.micro_batch_size), matrix, options,
            loss_mask=batch.completion_mask, advantages=lambda rewards: self._advantages(rewards, batch.group_ids)[0], objective=self.objective,
            temperature=self.logprob_temperature, zero_grad=lambda: self.optimizer.zero_grad(set_to_none=True),
        )

    def _observe_groups(self, batch, scores) -> None:
        correct = self._correct(scores).float()
        n = int(batch.group_ids.max()) + 1
        acc = torch.zeros(n).index_add_(0, batch.group_ids, correct) / torch.bincount(batch.group_ids, minlength=n)
        first = [int((batch.group_ids == g).nonzero()[0]) for g in range(n)]
        self.sampler.observe([batch.rows[i] for i in first], acc.tolist())

    def _verify(self, batch, scores, adv, weights):
        """GRPO-Verif: append one self-verification row per solution (see trainer/verification.py)."""
        return verification_step(
            self.cfg, self.backend, batch, self._correct(scores), scores.total, adv, weights, self._prompt_texts,
            lambda rewards, group_ids: self._advantages(rewards, group_ids)[0],
        )

    def _optimizer_step(self) -> float:
        clip = self.cfg.optim.max_grad_norm
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.learners.all_reduce_gradients(params)  # data-parallel learners: sum of the ranks' gradients
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def _log_samples(self, batch, scores, adv) -> None:
        samples = sample_records(batch, scores, adv, self.cfg.logging.samples_per_table)
        self.logger.log_samples(self.step, samples)
        every = self.cfg.logging.log_samples_every
        if every and self.step % every == 0:
            self.logger.print_samples_table(self.step, samples, list(scores.per_reward))

    # ------------------------------------------------------------------ eval, checkpoints
    def evaluate(self, label: str) -> dict[str, float]:
        rows = self.splits.heldout
        if not rows or not self.learners.is_main:
            return {}
        if any(row.get("answer") is None for row in rows):
            log.info("held-out rows have no answers (label-free data): skipping the accuracy evaluation")
            return {}
        e = self.cfg.eval
        result = evaluate_accuracy(
            self.backend, rows, self._prompt_texts(rows), self.judge, batch_size=e.batch_size, max_new_tokens=e.max_new_tokens
        )
        self.logger.log_eval(self.step, label, result)
        log.info("held-out accuracy (%s, step %d): %.3f on %d", label, self.step, result["accuracy"], result["n"])
        return result

    def save(self) -> Optional[Path]:
        if not self.learners.is_main:
            return None
        return ckpt_io.save_checkpoint(
            self.run_dir / "checkpoints",
            self.step,
            model=self.model,
            tokenizer=self.tokenizer,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            state={"sampler": self.sampler.state(), "elapsed_s": self.elapsed},
            extra={k: v.state_dict() for k, v in self._stateful().items()},
            keep=self.cfg.logging.keep_checkpoints,
            merged=self.cfg.model.lora.save_merged,
        )

    def resume(self) -> bool:
        """Load the latest checkpoint of ``output_dir`` if any; True when resumed."""
        ckpt = ckpt_io.latest_checkpoint(self.run_dir / "checkpoints")
        if ckpt is None:
            return False
        ckpt_io.load_model_weights(self.model, ckpt)
        state = ckpt_io.load_training_state(ckpt, self.optimizer, self.scheduler)
        self.sampler.load_state(state["sampler"])
        if self._stateful():
            extra = torch.load(ckpt / "extra.pt", weights_only=False)
            for key, part in self._stateful().items():
                part.load_state_dict(extra[key])
        self.step = state["step"]
        self.elapsed = state.get("elapsed_s", 0.0)
        self.logger.truncate_after(self.step)
        log.info("resumed from %s (step %d)", ckpt, self.step)
        return True

    @contextlib.contextmanager
    def _checkpoint_on_interrupt(self):
        """Ctrl-C saves the last completed step before leaving, so ``--resume`` loses nothing."""
        try:
            yield
        except KeyboardInterrupt:
            if self.step > 0:
                if self._step_start is not None:  # rewind data and RNG to the unfinished step's start
                    self.sampler.load_state(self._step_start[0])
                    ckpt_io.set_rng_state(self._step_start[1])
                log.warning("interrupted: saving step %d to resume from (grpokit train ... --resume)", self.step)
                self.save()
            raise

    # ------------------------------------------------------------------ the run
    def train(self, resume: bool = False) -> dict[str, Any]:
        """Run eval-before, the training steps (with checkpoints), eval-after and the report."""
        cfg = self.cfg
        self.elapsed = 0.0
        resumed = self.resume() if resume else False
        if self.learners.is_main:
            if not resumed and (self.run_dir / "metrics.jsonl").exists():
                log.warning("%s holds an earlier run's logs: replacing them (use --resume to continue that run)", self.run_dir)
                self.logger.truncate_after(-1)
            (self.run_dir / "config.yaml").write_text(dump_yaml(cfg))
        before = self.evaluate("before") if cfg.eval.before and not resumed else None
        progress = StepProgress(cfg.train.steps, enabled=cfg.logging.progress and self.learners.is_main, start=self.step)
        budget_s = cfg.train.max_minutes * 60 if cfg.train.max_minutes else float("inf")
        with progress, self._checkpoint_on_interrupt():
            while self.step < cfg.train.steps and self.learners.agree(self.elapsed < budget_s):
                # elapsed = wall time of the training loop (steps, mid-run evals, checkpoints)
                t0 = time.perf_counter()
                metrics = self.train_step()
                metrics["time/elapsed_s"] = self.elapsed + time.perf_counter() - t0
                self.logger.log_metrics(self.step, metrics)
                progress.update(self.step, metrics)
                if cfg.eval.every and self.step % cfg.eval.every == 0 and self.step < cfg.train.steps:
                    self.evaluate("during")
                if cfg.logging.checkpoint_every and self.step % cfg.logging.checkpoint_every == 0:
                    self.save()
                self.elapsed += time.perf_counter() - t0
        if self.step < cfg.train.steps:
            log.info("train.max_minutes=%s reached after %d steps", cfg.train.max_minutes, self.step)
        if not cfg.logging.checkpoint_every or self.step % cfg.logging.checkpoint_every:
            self.save()
        after = self.evaluate("after") if cfg.eval.after else None
        self.logger.close()
        from grpokit.trainer.report import write_report

        report = write_report(self.run_dir) if self.learners.is_main else None
        return {"before": before, "after": after, "train_minutes": self.elapsed / 60, "steps": self.step, "report": str(report)}
