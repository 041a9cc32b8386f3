"""``GRPOTrainer``: TRL 1.16's GRPOTrainer interface, driving grpokit's native :class:`~grpokit.trainer.loop.Trainer`.

The TRL GRPO quickstart (https://huggingface.co/docs/trl/grpo_trainer#quick-start) runs with only
its import line changed::

    from grpokit import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(model="smollm2", reward_funcs=reward_len, args=GRPOConfig(output_dir="out"),
                          train_dataset=dataset)
    trainer.train()

Arguments as TRL's: ``model`` (a Hub id in the local cache, a local folder, ``"smollm2"``, or a
``PreTrainedModel``), ``reward_funcs`` (a callable ``f(prompts, completions, completion_ids,
**columns)`` called with TRL's extra keywords, see :class:`TRLCall`; a reward-model folder
string, see :mod:`grpokit.api.sources`; or a list of them),
``args`` (:class:`~grpokit.api.trl_args.GRPOConfig`), ``train_dataset`` / ``eval_dataset``
(``datasets.Dataset`` or a list of dicts, standard ``{"prompt": str}`` or conversational
``{"prompt": [messages]}``; a string prompt is the model's input as written, as TRL's, see
:class:`~grpokit.data.chat.RawPrompt`), ``processing_class``, ``reward_processing_classes`` (one tokenizer per reward model), ``callbacks``
(``transformers.TrainerCallback`` classes or instances), ``peft_config`` (applied with
``peft.get_peft_model``, as TRL), ``environment_factory`` and ``tools`` (grpokit's environment
``trl``, :mod:`grpokit.envs.trl_env`; ``train_dataset`` may then be omitted, as TRL).
``optimizers``, ``quantization_config`` and ``rollout_func`` are refused when given (grpokit
builds its AdamW itself; native environments: ``args.grpokit={"environment.name": ...}``).

Methods: ``train(resume_from_checkpoint=None)`` (a ``TrainOutput``), ``evaluate()`` (TRL's
``eval_reward`` ... on ``eval_dataset``), ``save_model(dir)`` (a folder ``from_pretrained`` loads),
``state.log_history`` (TRL's metric names, :data:`TRL_NAMES`), and ``.native`` (the grpokit
Trainer: its policy, config and checkpoints). Step counts are TRL's: ``state.global_step``
counts optimizer steps, ``num_iterations`` x mini-batches (``steps_per_generation`` / accumulation) per grpokit step.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Optional

from grpokit.api.sources import SourceError, resolve_model_name, reward_from_string
from grpokit.api.trl_args import GRPOConfig, UnsupportedArgument

log = logging.getLogger(__name__)

# grpokit metric -> TRL 1.16's name for the same quantity (``_metrics[mode][...]`` in grpo_trainer.py)
TRL_NAMES = {
    "loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate", "reward/mean": "reward", "reward/std": "reward_std",
    "adv/zero_var_frac": "frac_reward_zero_std", "completion_len/mean": "completions/mean_length",
    "completion_len/max": "completions/max_length", "truncated_frac": "completions/clipped_ratio", "kl": "kl",
    "clip/low_frac": "clip_ratio/low_mean", "clip/high_frac": "clip_ratio/high_mean", "clip/frac": "clip_ratio/region_mean",
    "rollout/entropy": "entropy",  # softmax(logits / T) over every sampled token, before top-k / top-p: TRL's learner entropy
}


def trl_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """One step's metrics under TRL's names (``reward/<f>/mean`` -> ``rewards/<f>/mean``); the rest keep grpokit's."""
    out = {}
    for key, value in metrics.items():
        if key in TRL_NAMES:
            out[TRL_NAMES[key]] = value
        elif key.startswith("reward/") and key.endswith(("/mean", "/std")):
            out["rewards/" + key[len("reward/"):]] = value
        elif key not in ("entropy", "accuracy"):  # the learner's entropy covers only the rows it learned (TRL's: every
            out[key] = value  # completion); accuracy is grpokit's first-reward >= 1 judge, which a TRL run does not have
    return out


def window_mean(window: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over the logging window, NaN values left out (TRL's ``log``)."""
    keys = dict.fromkeys(k for m in window for k in m)
    out = {}
    for key in keys:
        valid = [m[key] for m in window if key in m and not math.isnan(m[key])]
        out[key] = sum(valid) / len(valid) if valid else None
    return out


class TRLCall:
    """A reward function called as TRL 1.16's ``_calculate_rewards`` calls it.

    Keywords ``prompts``, ``completions``, ``completion_ids`` and every dataset column except
    ``completion`` (TRL drops it), plus ``trainer_state`` (the trainer's ``TrainerState``),
    ``log_metric(name, value)`` (averaged over each logging window into ``log_history``) and
    ``log_extra(column, values)`` (TRL's completions-table columns; accepted, not shown here).
    """

    def __init__(self, fn: Any, trainer: "GRPOTrainer") -> None:
        self.fn, self.trainer = fn, trainer
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__module__, self.__qualname__ = getattr(fn, "__module__", None), getattr(fn, "__qualname__", self.__name__)  # config.yaml names fn

    def __call__(self, prompts: list, completions: list, completion_ids: Any = None, **columns: Any) -> Any:
        columns.pop("completion", None)
        if self.trainer._trl_environment:  # an environment_factory / tools run: TRL's columns, prompts and completions
            from grpokit.envs.trl_env import ROUTE_COLUMN, trl_view

            if ROUTE_COLUMN in columns:
                columns["environment"] = columns.pop(ROUTE_COLUMN)
            prompts, completions = map(list, zip(*map(trl_view, columns["messages"]))) if prompts else (prompts, completions)
        return self.fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns,
                       trainer_state=self.trainer.state, log_extra=lambda column, values: None, log_metric=self.trainer._log_metric)


class GRPOTrainer:
    """TRL's ``GRPOTrainer`` arguments and methods over grpokit's native Trainer (see the module docstring)."""

    def __init__(self, model: Any, reward_funcs: Any = None, args: Optional[GRPOConfig] = None, train_dataset: Any = None,
                 eval_dataset: Any = None, processing_class: Any = None, reward_processing_classes: Any = None,
                 callbacks: Optional[list] = None, optimizers: tuple = (None, None), quantization_config: Any = None,
                 peft_config: Any = None, tools: Any = None, rollout_func: Any = None, environment_factory: Any = None) -> None:
        from transformers import TrainerControl, TrainerState

        for name, value in (("optimizers", None if optimizers == (None, None) else optimizers), ("quantization_config", quantization_config),
                            ("rollout_func", rollout_func)):
            if value is not None:
                raise UnsupportedArgument(f"GRPOTrainer({name}=...): grpokit cannot honour it; remove it "
                                          "(native environments and optimizers: args.grpokit={...}, see `grpokit list`)")
        if args is None:  # TRL: "<model name>-GRPO"
            name = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", "") or "model"
            args = GRPOConfig(output_dir=f"{str(name).rstrip('/').split('/')[-1]}-GRPO")
        self.args = args
        self._trl_environment = environment_factory is not None or bool(tools)  # TRL's tool rollouts (grpokit.envs.trl_env)
        self.state, self.control = TrainerState(), TrainerControl()  # rewards read trainer_state from the first call on
        self._reward_metrics: dict[str, list] = {}  # log_metric calls of the reward functions during the step
        if isinstance(eval_dataset, dict) and not hasattr(eval_dataset, "to_list"):
            raise UnsupportedArgument("GRPOTrainer(eval_dataset={...}): give one eval dataset (grpokit evaluates one set)")
        # TRL: train_dataset may be omitted when the environment makes its own prompts (reset() returns them)
        rows = self._rows(train_dataset, "train_dataset") if train_dataset is not None or environment_factory is None else None
        eval_rows = self._rows(eval_dataset, "eval_dataset") if eval_dataset is not None else None
        if self.args.eval_strategy != "no" and eval_rows is None:
            raise UnsupportedArgument(f"GRPOConfig(eval_strategy={self.args.eval_strategy!r}) needs GRPOTrainer(eval_dataset=...)")
        cfg = self.args.to_native(len(rows) if rows is not None else None)
        owners: list[str] = []
        if environment_factory is not None or tools:
            rows, eval_rows, owners = self._environment(cfg, environment_factory, tools, reward_funcs, rows, eval_rows)
        model, tokenizer = self._policy(model, processing_class, peft_config, cfg)
        rewards = self._rewards(reward_funcs, reward_processing_classes) if reward_funcs is not None else []
        if owners:  # TRL: each environment class with get_reward() is one more reward, weight 1, under its name
            from grpokit.envs.trl_env import env_reward
            from grpokit.rewards import NamedReward

            rewards += [NamedReward(name=name, fn=env_reward(name), weight=1.0) for name in owners]
        if not rewards:
            raise UnsupportedArgument("GRPOTrainer(reward_funcs=None): give a reward function, or an environment_factory whose "
                                      "environment defines get_reward()")
        from grpokit.trainer.loop import Trainer

        self.native = Trainer(cfg, model, tokenizer, dataset=rows, eval_dataset=eval_rows, rewards=rewards)
        if self.args.disable_dropout:
            import torch

            for module in self.native.model.modules():  # nn.Dropout layers and attention's dropout probability
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
                if isinstance(getattr(module, "attention_dropout", None), float):
                    module.attention_dropout = 0.0
        self.model, self.processing_class = self.native.model, self.native.tokenizer
        self.reward_func_names = [r.name for r in self.native.rewards]
        self.state.max_steps = cfg.train.steps * cfg.algorithm.updates_per_batch
        self.state.num_train_epochs = self.args.num_train_epochs
        self.state.logging_steps, self.state.save_steps = self.args.logging_steps, self.args.save_steps
        self.callbacks = [cb() if isinstance(cb, type) else cb for cb in callbacks or []]
        self._n_rows = len(self.native.splits.train)
        self._event("on_init_end")

    # ------------------------------------------------------------------ inputs
    def _environment(self, cfg: Any, factory: Any, tools: Any, reward_funcs: Any, rows: Any, eval_rows: Any) -> tuple:
        """TRL's ``environment_factory`` / ``tools=[...]`` as grpokit's environment ``trl`` (:mod:`grpokit.envs.trl_env`):
        (train rows, eval rows) with their ``environment`` column routed, and the classes whose ``get_reward()`` is a reward."""
        from grpokit.envs import trl_env

        funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        reading = [getattr(fn, "__name__", repr(fn)) for fn in funcs if callable(fn) and trl_env.reads_instances(fn)]
        if reading:
            raise UnsupportedArgument(f"GRPOTrainer(reward_funcs=[{reading[0]}]): it takes TRL's 'environments' (the live instances), "
                                      "which grpokit does not pass: score the state in the environment's get_reward()")
        if rows is None:
            if isinstance(factory, dict):
                raise UnsupportedArgument("GRPOTrainer(environment_factory={...}) without train_dataset: a dict of environments needs "
                                          "rows with an 'environment' column to route them; give train_dataset or one factory")
            cfg.data.n_train, cfg.data.n_heldout = cfg.rollout.prompts_per_step, 0  # TRL: one generation round of placeholder rows
        rows, eval_rows = trl_env.route_rows(rows), trl_env.route_rows(eval_rows)
        problem = trl_env.routing_problem(factory, rows, "GRPOTrainer(train_dataset)") or trl_env.routing_problem(
            factory, eval_rows, "GRPOTrainer(eval_dataset)")
        if problem:
            raise UnsupportedArgument(problem)
        try:
            owners = trl_env.use_trl_environment(cfg, factory, tools, self.args.max_completion_length, self.args.max_tool_calling_iterations)
        except ValueError as exc:
            raise UnsupportedArgument(f"GRPOTrainer: {exc}") from None
        return rows, eval_rows, owners

    def _rows(self, dataset: Any, name: str) -> list[dict]:
        if dataset is None:
            raise UnsupportedArgument(f"GRPOTrainer({name}=None): give a datasets.Dataset or a list of dicts with a 'prompt' column")
        if hasattr(dataset, "to_list"):
            rows = dataset.to_list()
        elif isinstance(dataset, list):
            rows = list(dataset)
        else:
            raise UnsupportedArgument(f"GRPOTrainer({name}={type(dataset).__name__}): give a datasets.Dataset or a list of dicts "
                                      "(an IterableDataset has no length to count epochs by)")
        if self.args.remove_unused_columns:  # TRL: only the prompt reaches the rewards
            rows = [{"prompt": row.get("prompt")} for row in rows]
        from grpokit.data.chat import RawPrompt

        # TRL's standard format: a string prompt is the model's input as written (no chat template)
        return [{**row, "prompt": RawPrompt(row["prompt"])} if isinstance(row.get("prompt"), str) else row for row in rows]

    def _policy(self, model: Any, tokenizer: Any, peft_config: Any, cfg: Any) -> tuple[Any, Any]:
        """(model, tokenizer): a string is loaded by grpokit's loader, an object is taken as it is; LoRA as TRL applies it."""
        from grpokit.trainer import setup

        if isinstance(model, str):
            cfg.model.name = resolve_model_name(model)
            if peft_config is None and tokenizer is None:
                return None, None  # the native Trainer loads model.name
            model, loaded = setup.load_policy(cfg)
            tokenizer = tokenizer or loaded
        elif tokenizer is None:
            source = getattr(model, "name_or_path", "") or getattr(getattr(model, "config", None), "_name_or_path", "")
            try:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(source), local_files_only=True)
            except (OSError, ValueError, SourceError):
                raise UnsupportedArgument("GRPOTrainer(model=<PreTrainedModel>): pass processing_class=<its tokenizer> "
                                          f"(none found offline for '{source}')") from None
        if peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft_config)
        if tokenizer.pad_token is None:  # as TRL: pad with EOS, left-padded prompts
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        return model, tokenizer

    def _rewards(self, reward_funcs: Any, processing_classes: Any) -> list:
        from grpokit.config.schema import RewardConfig
        from grpokit.rewards import NamedReward

        funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        classes = processing_classes if isinstance(processing_classes, list) else [processing_classes] * len(funcs)
        weights = self.args.reward_weights or [1.0] * len(funcs)
        if len(weights) != len(funcs) or len(classes) != len(funcs):
            name = "reward_weights" if len(weights) != len(funcs) else "reward_processing_classes"
            raise UnsupportedArgument(f"GRPOTrainer: {name} has {len(weights) if name == 'reward_weights' else len(classes)} entries "
                                      f"for {len(funcs)} reward functions; give one per reward function")
        out = []
        for fn, tok, weight in zip(funcs, classes, weights):
            if isinstance(fn, str):
                fn = reward_from_string(fn, tok)
            if isinstance(fn, str):
                out.append(RewardConfig(name=fn, weight=float(weight)))
            elif isinstance(fn, RewardConfig):
                out.append(RewardConfig(name=fn.name, weight=float(weight), kwargs=fn.kwargs))
            elif hasattr(fn, "forward") and hasattr(fn, "config"):  # a PreTrainedModel object as a reward
                raise UnsupportedArgument("GRPOTrainer(reward_funcs=<model object>): pass the reward model's folder as a string")
            elif callable(fn):
                name = getattr(fn, "__name__", type(fn).__name__)
                out.append(NamedReward(name=name, fn=TRLCall(fn, self), weight=float(weight)))
            else:
                raise UnsupportedArgument(f"GRPOTrainer(reward_funcs={fn!r}): give callables or reward-model folders")
        return out

    # ------------------------------------------------------------------ callbacks and logs
    def _event(self, name: str, **kwargs: Any) -> None:
        t = self.__dict__.get("native")
        extra = dict(model=self.model, processing_class=self.processing_class, optimizer=t.optimizer, lr_scheduler=t.scheduler) if t else {}
        for cb in self.callbacks:
            result = getattr(cb, name)(self.args, self.state, self.control, **extra, **kwargs)
            if result is not None:
                self.control = result

    def _log_metric(self, name: str, value: float) -> None:
        """A reward function's ``log_metric``: joins the step's metrics under ``name``."""
        self._reward_metrics.setdefault(name, []).append(float(value))

    def log(self, logs: dict[str, Any]) -> None:
        """Append ``logs`` with the epoch and step to ``state.log_history`` and call the callbacks' ``on_log``."""
        logs = {**logs, "epoch": round(self.state.epoch or 0.0, 4), "step": self.state.global_step}
        self.state.log_history.append(logs)
        self._event("on_log", logs=logs)

    # ------------------------------------------------------------------ the run
    def train(self, resume_from_checkpoint: Any = None, **kwargs: Any) -> Any:
        """Train until ``max_steps`` / the epochs (or a callback's ``should_training_stop``); TRL's ``TrainOutput``."""
        from transformers.trainer_utils import TrainOutput

        from grpokit.trainer.progress import StepProgress

        if kwargs:
            raise TypeError(f"GRPOTrainer.train() got an unexpected keyword argument '{next(iter(kwargs))}'")
        t, a, mu = self.native, self.args, self.native.cfg.algorithm.updates_per_batch
        if resume_from_checkpoint:
            self._resume(resume_from_checkpoint)
        elif t.step == 0 and t.learners.is_main:  # a fresh run: as the native train(), it replaces an earlier run's logs
            from grpokit.config.loading import dump_yaml

            if (t.run_dir / "metrics.jsonl").exists():
                log.warning("%s holds an earlier run's logs: replacing them (train(resume_from_checkpoint=True) continues it)", t.run_dir)
                t.logger.truncate_after(-1)
            (t.run_dir / "config.yaml").write_text(dump_yaml(t.cfg))
        self.state.global_step = t.step * mu
        self._event("on_train_begin")
        window, losses, t0, steps0 = [], [], time.perf_counter(), t.step
        total = t.cfg.train.steps
        with StepProgress(total, enabled=t.cfg.logging.progress, start=t.step) as progress:
            while t.step < total and not self.control.should_training_stop:
                self._event("on_step_begin")
                metrics = t.train_step()
                t.logger.log_metrics(t.step, metrics)
                progress.update(t.step, metrics)
                self.state.global_step = t.step * mu
                self.state.epoch = t.step * t.cfg.rollout.prompts_per_step / self._n_rows
                step_logs = {**trl_metrics(metrics), **{k: sum(v) / len(v) for k, v in self._reward_metrics.items()}}
                if "learning_rate" in step_logs:  # TRL logs the rate its last update used, grpokit's lr is the next one's
                    sched = t.scheduler
                    step_logs["learning_rate"] = sched.base_lrs[0] * sched.lr_lambdas[0](sched.last_epoch - 1)
                window.append(step_logs)
                self._reward_metrics.clear()
                losses.append(metrics.get("loss", float("nan")))
                self._event("on_step_end")
                self._after_step(window, last=t.step == total)
        runtime = time.perf_counter() - t0
        done = t.step - steps0
        valid = [x for x in losses if not math.isnan(x)]
        summary = {"train_runtime": runtime, "train_samples_per_second": done * a.generation_batch() / max(runtime, 1e-9),
                   "train_steps_per_second": done * mu / max(runtime, 1e-9), "total_flos": 0.0,
                   "train_loss": sum(valid) / len(valid) if valid else 0.0}
        self.log(summary)
        t.logger.close()  # flushes the trackers (report_to); metrics.jsonl / eval.jsonl stay open to later calls
        self._event("on_train_end")
        return TrainOutput(self.state.global_step, summary["train_loss"], summary)

    def _after_step(self, window: list, last: bool) -> None:
        """TRL's DefaultFlowCallback: log every logging_steps, evaluate every eval_steps, save every save_steps and at the end."""
        a, step, mu = self.args, self.state.global_step, self.native.cfg.algorithm.updates_per_batch
        crossed = lambda every: step // int(every) > (step - mu) // int(every)  # noqa: E731 - mu optimizer steps per grpokit step
        log_now = a.logging_strategy == "steps" and (crossed(a.logging_steps) or (a.logging_first_step and step == mu))
        if log_now and window:
            self.log(window_mean(window))
            window.clear()
        if a.eval_strategy == "steps" and crossed(a.eval_steps or a.logging_steps):
            self.evaluate()
        every = self.native.cfg.logging.checkpoint_every
        if a.save_strategy == "steps" and ((every and self.native.step % every == 0) or last):
            self.native.save()
            self._event("on_save")

    def _resume(self, checkpoint: Any) -> None:
        from pathlib import Path

        from grpokit.trainer import checkpoint as ckpt_io

        latest = ckpt_io.require_checkpoint(self.native.run_dir / "checkpoints")
        if checkpoint is not True and Path(checkpoint).resolve() != Path(latest).resolve():
            raise UnsupportedArgument(f"train(resume_from_checkpoint={str(checkpoint)!r}): grpokit resumes the latest checkpoint of "
                                      f"output_dir ({latest}); pass True")
        self.native.resume()

    def evaluate(self, eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """TRL's eval metrics: G sampled completions per eval prompt, scored by every reward (``eval_reward``, ...)."""
        from grpokit.api.evaluation import sampled_rewards

        rows = self._rows(eval_dataset, "eval_dataset") if eval_dataset is not None else self.native.splits.heldout
        if eval_dataset is not None and self._trl_environment:  # the rows' environment column, routed as at init
            from grpokit.envs.trl_env import route_rows, routing_problem

            rows = route_rows(rows)
            problem = routing_problem(self.native.cfg.environment.options.get("factory"), rows, "GRPOTrainer.evaluate(eval_dataset)")
            if problem:
                raise UnsupportedArgument(problem)
        if not rows:
            raise UnsupportedArgument("GRPOTrainer.evaluate(): no eval_dataset was given (to GRPOTrainer or to evaluate)")
        metrics = {f"{metric_key_prefix}_{k}": v for k, v in sampled_rewards(self.native, rows, self.args.per_device_eval_batch_size).items()}
        self._reward_metrics.clear()  # log_metric calls of the evaluation do not join the next training window
        self.log(metrics)
        self.native.logger.log_eval(self.native.step, metric_key_prefix, metrics)
        self._event("on_evaluate", metrics=metrics)
        return metrics

    def save_model(self, output_dir: Optional[str] = None, _internal_call: bool = False) -> None:
        """``save_pretrained`` of the policy (a PEFT model: its adapter, as TRL) and the tokenizer into ``output_dir``."""
        out = output_dir or self.args.output_dir or "trainer_output"
        self.native.model.save_pretrained(out)
        self.native.tokenizer.save_pretrained(out)
