"""One run of the efficacy study (``benchmarks/efficacy.py``), in its own process: grpokit or TRL.

Both sides train on the same config until ``budget_s`` seconds of training wall time have passed
(the step running then finishes) or the step cap is reached, and measure held-out greedy accuracy
with the same code: grpokit's ``evaluate_accuracy`` through an ``HFBackend`` on the policy, the
config's accuracy judge (``answer_match`` on the arithmetic tasks), the same held-out rows and
the same token cap, before training, every ``every`` steps and after the last step. Evaluation
time is excluded from the wall clock on both sides: a point is (step, training minutes so far,
accuracy).

grpokit: ``Trainer.train_step()`` and ``Trainer.evaluate()`` driven here rather than
``Trainer.train()``, whose ``train.max_minutes`` clock also counts mid-run evaluations (a run
evaluated more often would get fewer training minutes). TRL: ``GRPOTrainer.train()`` with a
``TrainerCallback`` that evaluates in ``on_step_end`` and stops training when the budget is spent.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("efficacy")


class Clock:
    """Training wall time: elapsed time minus the evaluations' time."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.start = time.perf_counter()
        self.excluded = 0.0

    def train_s(self) -> float:
        return time.perf_counter() - self.start - self.excluded

    def spent(self) -> bool:
        return self.train_s() >= self.budget_s

    def excluding(self, fn, *args: Any) -> Any:
        """``fn(*args)`` with its time excluded from the training time."""
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.excluded += time.perf_counter() - t


def eval_point(step: int, minutes: float, result: dict) -> dict:
    return {"step": step, "minutes": minutes, "accuracy": result["accuracy"], "n": result["n"],
            "completion_len": result["completion_len"]}


def _get(m: dict, key: str) -> float | None:
    value = m.get(key)
    return None if value is None else float(value)


def evaluates_at(step: int, every: int, first: int) -> bool:
    """Whether the study evaluates after ``step``: every ``every`` steps, and after each of the first ``first``."""
    return step % every == 0 or step <= first


def run_grpokit(cfg, budget_s: float, every: int, save: bool, first: int = 0) -> dict:
    """Train ``cfg`` with grpokit's Trainer for ``budget_s`` training seconds; the study's record of the run."""
    from grpokit.trainer.loop import Trainer

    t0 = time.perf_counter()
    trainer = Trainer(cfg)
    setup_s = time.perf_counter() - t0
    judge = trainer.judge.name
    evals = [eval_point(0, 0.0, trainer.evaluate("before"))]
    steps: list[dict] = []
    clock = Clock(budget_s)
    while True:
        lr = trainer.scheduler.get_last_lr()[0]  # the rate this step uses (the step's metrics hold the next one)
        m = trainer.train_step()
        train_s = clock.train_s()
        trainer.logger.log_metrics(trainer.step, {**m, "time/elapsed_s": train_s})
        steps.append({
            "step": trainer.step, "minutes": train_s / 60, "reward": _get(m, "reward/mean"),
            "train_accuracy": _get(m, "accuracy"), "completion_len": _get(m, "completion_len/mean"),
            "zero_var_frac": _get(m, "adv/zero_var_frac"), "skipped_rows": _get(m, "learn/skipped_rows") or 0.0,
            "lr": lr, "grad_norm": _get(m, "grad_norm"), "judge": judge,
            # optimizer updates applied this step (mini-batches, or 0 on an all-tied batch) and the clipped token fraction
            "updates": _get(m, "learn/updates"), "clip_frac": _get(m, "clip/frac"),
        })
        last = clock.spent() or trainer.step >= cfg.train.steps
        if last or evaluates_at(trainer.step, every, first):
            result = clock.excluding(trainer.evaluate, "after" if last else "during")
            evals.append(eval_point(trainer.step, train_s / 60, result))
            log.info("grpokit step %d, %.2f training min: held-out accuracy %.3f", trainer.step, train_s / 60, result["accuracy"])
        if last:
            break
    if save:
        trainer.elapsed = steps[-1]["minutes"] * 60  # what Trainer.train() would have counted; the checkpoint records it
        trainer.save()  # the run folder is then a KDRL teacher (its newest complete checkpoint)
    trainer.logger.close()
    return {"side": "grpokit", "setup_s": setup_s, "eval_s": clock.excluded, "evals": evals, "steps": steps,
            "train_minutes": steps[-1]["minutes"], "n_steps": trainer.step}


def heldout_evaluator(cfg, model, tokenizer, rows: list[dict], judge):
    """``evaluate() -> result``: grpokit's greedy held-out evaluation of ``model`` (TRL's weights) with ``judge``."""
    from grpokit.rollout.hf import HFBackend
    from grpokit.trainer import setup
    from grpokit.trainer.evaluation import evaluate_accuracy

    backend = HFBackend(model, tokenizer, fused_decode=cfg.rollout.fused_decode)
    texts = setup.render_all(tokenizer, rows, cfg.data.system_prompt)

    def evaluate() -> dict:
        side = tokenizer.padding_side
        tokenizer.padding_side = "left"  # grpokit's backend pads prompts on the left; TRL may have changed it
        try:
            return evaluate_accuracy(backend, rows, texts, judge, batch_size=cfg.eval.batch_size,
                                     max_new_tokens=cfg.eval.max_new_tokens)
        finally:
            tokenizer.padding_side = side

    return evaluate


def study_callback(evaluate, budget_s: float, every: int, max_steps: int, judge: str, first: int = 0):
    """A TRL ``TrainerCallback`` that evaluates, records each step and stops at the budget (its lists: .evals, .steps)."""
    from transformers import TrainerCallback

    metric_keys = {"reward": "reward", "train_accuracy": f"rewards/{judge}/mean", "completion_len": "completions/mean_length",
                   "zero_var_frac": "frac_reward_zero_std", "lr": "learning_rate", "grad_norm": "grad_norm",
                   "clip_frac": "clip_ratio/region_mean"}

    class Study(TrainerCallback):
        def __init__(self) -> None:
            self.evals: list[dict] = []
            self.steps: list[dict] = []
            self.clock: Clock | None = None

        def on_train_begin(self, args, state, control, **kw):
            self.evals.append(eval_point(0, 0.0, evaluate()))
            self.clock = Clock(budget_s)  # starts after the before-evaluation

        def on_step_end(self, args, state, control, **kw):
            train_s, step = self.clock.train_s(), state.global_step
            self.steps.append({"step": step, "minutes": train_s / 60, "skipped_rows": 0.0, "judge": judge})
            last = self.clock.spent() or step >= max_steps
            if last or evaluates_at(step, every, first):
                result = self.clock.excluding(evaluate)
                self.evals.append(eval_point(step, train_s / 60, result))
                log.info("TRL step %d, %.2f training min: held-out accuracy %.3f", step, train_s / 60, result["accuracy"])
            if last:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kw):
            if self.steps and logs and "reward" in logs:  # this step's metrics (TRL logs every step here)
                self.steps[-1].update({k: None if logs.get(v) is None else float(logs[v]) for k, v in metric_keys.items()})

    return Study()


def use_grpokit_schedule(trainer, optim_cfg) -> None:
    """Make TRL's ``trainer`` build grpokit's learning-rate schedule (``build_scheduler``) on its own optimizer.

    HF's warm-up schedules start at lr 0 (``constant_with_warmup`` with 2 warm-up steps: x 0, 1/2, 1), so TRL's
    first optimizer step would not move the weights while its minutes count; grpokit's warm-up is x (k + 1) /
    (warmup + 1) (1/3, 2/3, 1). From 2026-12-06 both sides step with the same rates (before, TRL's first step
    was lost: about 0.4 training minutes a run on the demo task).
    """
    from grpokit.trainer.setup import build_scheduler

    def create_scheduler(num_training_steps: int, optimizer=None):
        if trainer.lr_scheduler is None:
            trainer.lr_scheduler = build_scheduler(optimizer or trainer.optimizer, optim_cfg, num_training_steps)
        return trainer.lr_scheduler

    trainer.create_scheduler = create_scheduler


def run_trl(cfg, budget_s: float, every: int, use_cpu: bool, first: int = 0) -> dict:
    """Train TRL's GRPOTrainer on ``cfg`` 's task and settings for ``budget_s`` training seconds."""
    import dataclasses
    import tempfile
    import warnings

    from trl import GRPOConfig, GRPOTrainer

    from _trl_side import grpo_config_kwargs, trl_dataset, trl_reward_funcs
    from grpokit.model.loading import load_model
    from grpokit.trainer import setup

    warnings.filterwarnings("ignore", category=FutureWarning)  # TRL's own deprecated transformers calls
    t0 = time.perf_counter()
    splits = setup.build_splits(cfg.data)
    rewards = setup.build_rewards(cfg.rewards)
    judge = setup.accuracy_judge(cfg, rewards)
    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype)
    n_seq, micro = cfg.rollout.prompts_per_step * cfg.rollout.group_size, cfg.train.micro_batch_size
    if n_seq % micro:
        raise ValueError(f"train.micro_batch_size={micro} must divide prompts x G = {n_seq} for TRL's accumulation")
    callback = study_callback(heldout_evaluator(cfg, model, tokenizer, splits.heldout, judge), budget_s, every,
                              cfg.train.steps, judge.name, first)
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}  # transformers 5 renamed gradient_checkpointing
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    funcs, weights = trl_reward_funcs(rewards, [k for k in splits.train[0] if k != "prompt"])
    with tempfile.TemporaryDirectory(prefix="efficacy-trl-") as tmp:
        args = GRPOConfig(
            output_dir=tmp, use_cpu=use_cpu, bf16=False, fp16=False, report_to="none", save_strategy="no",
            logging_steps=1, disable_tqdm=True, max_steps=cfg.train.steps,
            # one optimizer step = prompts x G sequences in micro-batches of train.micro_batch_size, as grpokit
            per_device_train_batch_size=micro, gradient_accumulation_steps=n_seq // micro,
            steps_per_generation=n_seq // micro,
            **{checkpointing: cfg.train.activation_checkpointing},  # grpokit's setting (off in the study)
            reward_weights=weights, **grpo_config_kwargs(cfg),
        )
        trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, processing_class=tokenizer, callbacks=[callback],
                              train_dataset=trl_dataset(splits.train, cfg.data.system_prompt))
        use_grpokit_schedule(trainer, cfg.optim)
        setup_s = time.perf_counter() - t0
        trainer.train()
    steps = callback.steps
    return {"side": "trl", "setup_s": setup_s, "eval_s": callback.clock.excluded, "evals": callback.evals, "steps": steps,
            "train_minutes": steps[-1]["minutes"], "n_steps": steps[-1]["step"]}


def probe_task(model, tokenizer, cfg) -> dict:
    """Held-out greedy accuracy of the untrained ``model`` on ``cfg`` 's task (the study's judge and token cap)."""
    from grpokit.trainer import setup

    judge = setup.accuracy_judge(cfg, setup.build_rewards(cfg.rewards))
    return heldout_evaluator(cfg, model, tokenizer, setup.build_splits(cfg.data).heldout, judge)()
