"""The training loop, top to bottom: rollout -> rewards -> advantages -> learn.

Departures from DeepSeekMath GRPO (arXiv 2402.03300) are all config: the advantage, loss,
aggregation, KL estimator and off-policy correction are registry names; how one rollout batch
becomes optimizer updates (mu passes, mini-batches, updates of size 0) is :mod:`grpokit.trainer.updates`.
The loop names no method: what a method reads is declared in its registration and produced by
``trainer/producers.py``; stages that reshape a step's batch are listed by ``setup.batch_stages``
from the config, hooks that run right before every optimizer update by ``setup.update_hooks``.
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path
from typing import Any, Optional

import torch

from grpokit.config.loading import dump_yaml
from grpokit.config.schema import Config
from grpokit.data.sampler import CurriculumSampler, PromptSampler
from grpokit.distributed.ddp import SilentLogger, init_learners
from grpokit.distributed.fsdp import sharding_problem
from grpokit.envs.checks import rows_problem
from grpokit.envs.episodes import episode_metrics
from grpokit.registries import get_registry
from grpokit.registry import call_with
from grpokit.trainer import checkpoint as ckpt_io
from grpokit.trainer import run_state, setup
from grpokit.trainer.collect import collect_batch
from grpokit.trainer.combine import RewardCombination
from grpokit.trainer.context import StepContext
from grpokit.trainer.evaluation import evaluate_accuracy
from grpokit.trainer.hint_traces import answer_conditioned_sampler
from grpokit.trainer.inputs import RunContractError, check_data, check_run, check_tokenizer, needed_inputs, run_family
from grpokit.trainer.learn_batch import LearnBatch
from grpokit.trainer.learner import Objective
from grpokit.trainer.memory import configure_cpu_memory, release_free_memory, tune_malloc
from grpokit.trainer.metrics import RunLogger, reward_metrics, rollout_entropy, sample_records
from grpokit.trainer.progress import StepProgress
from grpokit.trainer.updates import UpdateSteps

log = logging.getLogger(__name__)


class Trainer(UpdateSteps):
    """Wires the stages of a run; holds no algorithm logic of its own.

    The native Python API (``grpokit.Trainer``; TRL's argument names: ``grpokit.GRPOTrainer``)::

        trainer = Trainer(config, model=None, tokenizer=None, dataset=None, eval_dataset=None,
                          rewards=None, environment=None)
        trainer.train(resume=False)   # the whole run: evals, steps, checkpoints, report
        trainer.train_step()          # or one step at a time: metrics of the step
        trainer.save()                # a checkpoint of the current step under output_dir/checkpoints
        trainer.evaluate("after")     # held-out accuracy (rows with an answer)
        trainer.resume()              # load the latest checkpoint of output_dir

    ``config``: a :class:`~grpokit.config.schema.Config` (``grpokit.load_config``). ``model`` /
    ``tokenizer``: a loaded ``PreTrainedModel`` and its tokenizer (None: ``model.name`` is loaded).
    ``dataset`` / ``eval_dataset``: a ``datasets.Dataset`` or list of dicts, TRL's standard or
    conversational prompt format (None: ``data.task`` / ``data.path``). ``rewards``: a list of
    reward names, :class:`~grpokit.config.schema.RewardConfig` or callables with TRL's reward
    signature ``f(prompts, completions, completion_ids, **columns)`` (None: ``config.rewards``).
    ``environment``: a registered environment name, ``"module:Class"``, or an importable class
    (None: ``environment.name``).
    """

    def __init__(self, cfg: Config, model: Optional[torch.nn.Module] = None, tokenizer: Any = None, *, dataset: Any = None,
                 eval_dataset: Any = None, rewards: Optional[list] = None, environment: Any = None) -> None:
        cfg = copy.deepcopy(cfg)  # the run's own copy: what it fills in (rewards=, environment=, the family found) stays out of the caller's
        if environment is not None:
            cfg.environment.name = setup.environment_name(environment)
        if rewards is not None:
            cfg.rewards = setup.reward_configs(rewards)  # names and options stay in the config; callables are held apart
        if cfg.stage != "grpo":
            raise ValueError(f"stage '{cfg.stage}' trains offline: use grpokit.trainer.offline.OfflineTrainer (grpokit train picks it)")
        self.family = run_family(cfg, model, tokenizer)  # the policy family: model.family, else the one that claims the model
        check_run(cfg)  # a method without its inputs, or an unknown option key: one line, before anything loads
        if sharding_problem(cfg):  # distributed.learner=fsdp without torchrun or with an option it cannot honour
            raise RunContractError(sharding_problem(cfg))
        device = setup.check_device(cfg)  # model.device / model.dtype this machine lacks: one line
        tune_malloc(device=device)
        configure_cpu_memory(cfg.train.cpu_memory, device=device)  # keep or hand back freed pages between steps
        self.cfg = cfg
        if cfg.model.threads:
            torch.set_num_threads(cfg.model.threads)
        setup.seed_everything(cfg.train.seed)
        self.run_dir = Path(cfg.logging.output_dir)
        self.splits = setup.build_splits(cfg.data, dataset, eval_dataset)
        check_data(cfg, self.splits.train)  # a method's input from a data column the rows lack: one line
        problem = rows_problem(cfg, {"train": self.splits.train, "heldout": self.splits.heldout})
        if problem:  # rows the environment cannot start an episode from: one line, before the model loads
            raise RunContractError(problem)
        self.rewards = setup.build_rewards(cfg.rewards if rewards is None else rewards)
        self.judge = setup.accuracy_judge(cfg, self.rewards)
        if model is None:
            model, tokenizer = setup.load_policy(cfg)
        elif cfg.model.lora.enabled and not hasattr(model, "peft_config"):
            from grpokit.model.lora import apply_lora

            model = apply_lora(model, cfg.model.lora)
        model = setup.place_policy(model, cfg)
        self.model, self.tokenizer = model, tokenizer
        check_tokenizer(cfg, tokenizer)  # a plan delimiter the tokenizer cannot write: one line, before training
        self.learners = init_learners(cfg.distributed, self.model)  # torchrun: rank, world size; else 1 process
        algo = cfg.algorithm
        self.needs = needed_inputs(cfg)
        self.loss_spec = get_registry("loss").spec(algo.loss)
        self.needs_ref = "ref_logp" in self.needs
        self.policy = setup.build_policy(cfg, self.family, model, tokenizer, self.learners, self.needs_ref, "teacher_logp" in self.needs)
        self.backend = self.policy.backend
        self.splits.train = setup.filter_train_rows(cfg, self)  # data stages that need the initial policy
        self.learners.prepare(self.policy)  # fsdp: shard the policy now, so the optimizer holds the shards
        self.optimizer = setup.build_optimizer(self.model, cfg.optim)
        # the scheduler steps once per optimizer update: mu x mini_batches of them per training step
        self.scheduler = setup.build_scheduler(self.optimizer, cfg.optim, cfg.train.steps * cfg.algorithm.updates_per_batch)
        self.sampler = PromptSampler(self.splits.train, cfg.data.seed if cfg.data.order_seed is None else cfg.data.order_seed)
        if cfg.data.curriculum:
            curriculum = get_registry("curriculum").get(cfg.data.curriculum)(**cfg.data.curriculum_options)
            if hasattr(curriculum, "bind_policy"):  # hints cut from the policy's own answer-conditioned traces
                curriculum.bind_policy(answer_conditioned_sampler(cfg, self.policy, self._prompt_texts, self.rewards))
            self.sampler = CurriculumSampler(self.sampler, curriculum)
        self.combiner = RewardCombination(cfg, self.rewards)
        self.advantage_spec = get_registry("advantage").spec(algo.advantage)
        self.advantage_state = setup.new_state(self.advantage_spec)  # checkpointed with the run
        self.token_weights_fn = get_registry("token_weights").get(algo.token_weights)
        self.objective = Objective.from_config(cfg, self.loss_spec.fn)
        self.stages = setup.batch_stages(cfg)
        self.update_hooks = setup.update_hooks(cfg)  # run right before every optimizer update
        self.context = StepContext(  # all that stages, hooks and the reward combination may read of the run
            cfg=cfg, policy=self.policy, tokenizer=tokenizer, learners=self.learners, judge=self.judge, rewards=self.rewards,
            heldout=self.splits.heldout, prompt_texts=self._prompt_texts, advantages=self.advantages, correct=self.correct,
            objective=self.objective, zero_grad=lambda: self.optimizer.zero_grad(set_to_none=True),
            lr=lambda: self.scheduler.get_last_lr()[0],
        )
        self.step = 0
        self.elapsed = 0.0  # wall time of the training loop so far; train() and resume() set it, save() records it
        self._step_start = None
        self.logger = RunLogger.for_run(self.run_dir, cfg) if self.learners.is_main else SilentLogger()

    # ------------------------------------------------------------------ setup helpers
    @property
    def ref_model(self) -> Optional[torch.nn.Module]:
        """The frozen reference copy (None: no reference, or LoRA's adapter-disabled policy)."""
        return self.policy.reference

    @property
    def combiner_state(self) -> Any:
        return self.combiner.state

    def _prompt_texts(self, rows: list[dict]) -> list[str]:
        render = getattr(self.policy, "render", None)  # a vision-language policy adds the image / video parts
        if render is not None:
            return render(rows, self.cfg.data.system_prompt)
        return setup.render_all(self.tokenizer, rows, self.cfg.data.system_prompt)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, float]:
        """Sample, score, compute advantages and update; returns the step's metrics."""
        t0 = time.perf_counter()
        self._step_start = (self.sampler.state(), ckpt_io.rng_state())
        self.context.step = self.step
        self.policy.begin_step(self.step)
        batch, scores, metrics = self.learners.on_main(self._collect)  # rank 0 samples, all ranks learn
        t_gen = time.perf_counter() - t0
        lb, adv_metrics = self._learn_batch(batch, scores)
        for stage in self.stages:  # config-listed stages that reshape or annotate the batch
            lb, stage_metrics = stage(self.context, lb, scores)
            metrics.update(stage_metrics)
        release_free_memory(self.policy.device)  # the decode loop's freed blocks, before the learner's peak
        t1 = time.perf_counter()
        learn = self._learn(lb)
        t_learn = time.perf_counter() - t1
        release_free_memory(self.policy.device)
        self.step += 1
        gen_tokens = float(batch.unit_mask.sum())  # sampled tokens (an episode's observations were not)
        metrics = {
            **reward_metrics(scores, self.correct(scores)),
            **adv_metrics,
            **metrics,
            **self.policy.sampler_metrics(),
            **rollout_entropy(batch),
            **episode_metrics(batch),  # env/*: multi-turn batches only, in-process or from rollout workers
            **learn,
            "lr": self.scheduler.get_last_lr()[0],
            "completion_len/mean": gen_tokens / len(batch),
            "completion_len/max": float(batch.unit_mask.sum(-1).max()),
            "truncated_frac": float(batch.truncated.float().mean()),
            "tokens_per_s": gen_tokens / max(t_gen, 1e-9),
            "time/generation_s": t_gen,
            "time/learn_s": t_learn,
            "time/step_s": time.perf_counter() - t0,
        }
        self._log_samples(batch, scores, lb.row_adv()[: len(batch)])
        self._step_start = None  # the step is complete: nothing to rewind
        return metrics

    def _collect(self):
        """(batch, scores, metrics) of one step: sample, score, and let a curriculum observe the groups."""
        batch, scores, metrics = collect_batch(
            self.cfg, self.policy, self.sampler, self._prompt_texts, self.rewards, self.policy.pad_id,
            combine=lambda s, b: self.combiner(s, b, self.context), outcome=self.judge.name,
        )
        if hasattr(self.sampler, "observe"):  # curricula learn each prompt's difficulty
            self._observe_groups(batch, scores)
            metrics.update(self.sampler.metrics())
        return batch, scores, metrics

    def _learn_batch(self, batch, scores) -> tuple[LearnBatch, dict[str, float]]:
        """The step's LearnBatch: advantages, loss mask (minus excluded rows), token weights."""
        device = batch.device
        rewards = scores.total.to(device)
        adv, adv_metrics = self.advantages(rewards, batch.group_ids, domains=batch.columns().get("domain"), mask=batch.unit_mask)
        loss_mask = batch.unit_mask.clone()
        if self.cfg.algorithm.mask_truncated:
            loss_mask[batch.truncated] = 0
        weights, weight_metrics = call_with(
            self.token_weights_fn, loss_mask, options=self.cfg.algorithm.token_weights_options,
            context=dict(completion_ids=batch.completion_ids, group_ids=batch.group_ids, entropy=batch.entropy, rewards=rewards),
        )
        lb = LearnBatch(rollout=batch, adv=adv, mask=loss_mask, rewards=rewards, behaviour_logp=batch.behaviour_logp, token_weights=weights)
        return lb, {k: float(v) for k, v in {**adv_metrics, **weight_metrics}.items()}

    def advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor, **inputs: Any):
        """(adv [B], metrics) from the configured estimator and its options."""
        algo = self.cfg.algorithm
        context = dict(scale=algo.scale, std_mode=algo.std_mode, std_eps=algo.std_eps, state=self.advantage_state, **inputs)
        return call_with(self.advantage_spec.fn, rewards, group_ids, options=algo.advantage_options, context=context)

    def correct(self, scores) -> torch.Tensor:
        """``[B]`` bool: the accuracy judge scored the completion as correct (value >= 1)."""
        return scores.per_reward[self.judge.name].nan_to_num(0.0) >= 1.0

    def _observe_groups(self, batch, scores) -> None:
        correct = self.correct(scores).float()
        n = int(batch.group_ids.max()) + 1
        gids = batch.group_ids.to(correct.device)
        acc = torch.zeros(n, device=correct.device).index_add_(0, gids, correct) / torch.bincount(gids, minlength=n)
        first = [int((gids == g).nonzero()[0]) for g in range(n)]
        self.sampler.observe([batch.rows[i] for i in first], acc.tolist())

    def _log_samples(self, batch, scores, adv) -> None:
        samples = sample_records(batch, scores, adv, self.cfg.logging.samples_per_table)
        self.logger.log_samples(self.step, samples)
        every = self.cfg.logging.log_samples_every
        if every and self.step % every == 0:
            self.logger.print_samples_table(self.step, samples, list(scores.per_reward))

    # ------------------------------------------------------------------ eval, checkpoints
    def evaluate(self, label: str = "eval") -> dict[str, float]:
        """Greedy held-out accuracy of the accuracy judge (``eval.*``), logged under ``label``; {} without held-out answers."""
        rows = self.splits.heldout
        if not rows:
            return {}
        # an environment run's held-out rows are episodes judged by their reward (env_return, env_info), answer or not
        if not self.cfg.environment.name and any(row.get("answer") is None for row in rows):
            log.info("held-out rows have no answers (label-free data): skipping the accuracy evaluation")
            return {}
        e = self.cfg.eval
        result = self.learners.on_main(lambda: evaluate_accuracy(  # sharded learners gather the weights for rank 0
            self.backend, rows, self._prompt_texts(rows), self.judge, batch_size=e.batch_size, max_new_tokens=e.max_new_tokens
        ))
        if not self.learners.is_main:
            return {}
        self.logger.log_eval(self.step, label, result)
        episodes = f", episode return {result['env/return']:.3f}" if "env/return" in result else ""
        log.info("held-out accuracy (%s, step %d): %.3f on %d (judge %s)%s", label, self.step, result["accuracy"], result["n"],
                 self.judge.name, episodes)
        return result

    def save(self) -> Optional[Path]:
        """A checkpoint of the current step under ``output_dir/checkpoints`` (:mod:`grpokit.trainer.run_state`)."""
        return run_state.save_run(self)

    def resume(self) -> bool:
        """Load the latest complete checkpoint of ``output_dir`` (none is a one-line error); True when resumed."""
        return run_state.resume_run(self)

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
        if resumed and cfg.eval.before and self.learners.is_main:  # measured by the run this one continues
            before = self.logger.logged_eval("before")
        budget_s = cfg.train.max_minutes * 60 if cfg.train.max_minutes else float("inf")
        progress = StepProgress(cfg.train.steps, enabled=cfg.logging.progress and self.learners.is_main, start=self.step,
                                budget_s=budget_s, elapsed_s=self.elapsed)
        with progress, run_state.checkpoint_on_interrupt(self):
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
