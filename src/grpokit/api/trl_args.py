"""``GRPOConfig``: TRL 1.16's GRPO arguments, mapped onto grpokit's native :class:`~grpokit.config.schema.Config`.

A script written for TRL's ``GRPOConfig`` (https://huggingface.co/docs/trl/grpo_trainer,
``trl/trainer/grpo_config.py``) runs with ``from grpokit import GRPOConfig``: every TRL argument
name is accepted (``TypeError`` for a name TRL does not have either), the ones below are honoured,
the plumbing ones of :mod:`grpokit.api.trl_fields` are accepted with no effect, and any other one
set to a value other than TRL's default is refused in one line (``UnsupportedArgument``).

=================================  ==========================================================
TRL argument (TRL 1.16 default)    grpokit field / what it does here
=================================  ==========================================================
output_dir (None: trainer_output)  logging.output_dir (metrics.jsonl, checkpoints/step-N)
num_generations (8)                rollout.group_size (G)
per_device_train_batch_size (8),   one optimizer step = per_device x accumulation completions
gradient_accumulation_steps (1),   (micro-batches of per_device)
generation_batch_size,             one generation = generation_batch_size (default per_device x
steps_per_generation               steps_per_generation, itself default accumulation) completions:
                                   rollout.prompts_per_step = that / G, train.micro_batch_size
                                   = per_device, algorithm.mini_batches = generation / (per_device
                                   x accumulation) optimizer steps per generation; grpokit's
                                   mini-batches are whole groups (TRL shuffles rows), so with
                                   more than one, per_device x accumulation must be a multiple
                                   of G; dapo then normalises each optimizer step by its own
                                   tokens (verl's token-mean), TRL by the generation's / steps
max_steps (-1), num_train_epochs   train.steps = max_steps / (num_iterations x mini-batches), or
(3.0)                              ceil(epochs x rows / prompts_per_step)
learning_rate (1e-6), weight_decay optim.lr, optim.weight_decay, optim.betas, optim.max_grad_norm
(0), adam_beta1/2 (0.9, 0.999),    (AdamW, eps 1e-8 as TRL's ``adamw_torch_fused``)
max_grad_norm (1.0)
lr_scheduler_type (linear),        optim.schedule linear / cosine / constant over the updates;
warmup_steps (0)                   warmup > 0 is refused (grpokit ramps (u+1)/(w+1), not u/w)
max_completion_length (512)        rollout.max_new_tokens and eval.max_new_tokens
temperature (1.0), top_p, top_k    rollout.temperature / top_p / top_k (the learner divides its
                                   logits by the temperature, as TRL)
beta (0.0)                         algorithm.beta with the k3 estimator (TRL's); beta > 0 needs
                                   use_bias_correction_kl=False (grpokit's KL has no IS weight)
epsilon (0.2), epsilon_high        algorithm.epsilon_low / epsilon_high (None: epsilon)
num_iterations (1)                 algorithm.num_iterations (mu)
importance_sampling_level (token)  algorithm.ratio token / sequence (GSPO, with loss_type grpo)
loss_type (dapo)                   grpo: seq_mean_token_mean; dapo: token_mean over the
                                   accumulated batch; dr_grpo: constant (B x max length); bnpo:
                                   token_mean when accumulation is 1; others are refused
scale_rewards (group)              algorithm.scale group / batch / none, std + 1e-4 (TRL's)
reward_weights (None)              each reward's weight
mask_truncated_completions         algorithm.mask_truncated
seed (42)                          train.seed and data.seed
bf16 (None = True), fp16, use_cpu  grpokit has no autocast: the model trains in model.dtype
                                   (float32; a warning says so when bf16 is on), fp16 refused;
                                   use_cpu: model.device cpu
model_init_kwargs                  only {"dtype" / "torch_dtype": ...}: model.dtype
gradient_checkpointing (True)      train.activation_checkpointing (exact gradients)
disable_dropout (False)            the policy's dropout modules get p = 0
remove_unused_columns (False)      True: rewards see only the prompt column
shuffle_dataset (True)             grpokit always shuffles (seeded): False is refused
logging_steps (10),                ``state.log_history`` / callbacks' ``on_log``: the mean of the
logging_first_step, logging_       steps' metrics every logging_steps optimizer steps (at the
strategy (steps)                   step that passes each multiple when num_iterations > 1);
                                   metrics.jsonl still holds every step
report_to (none)                   logging.report_to (tensorboard, trackio, wandb)
save_strategy (steps), save_steps  logging.checkpoint_every (steps, in optimizer steps), no: 0;
(500), save_total_limit            logging.keep_checkpoints
eval_strategy (no), eval_steps,    ``evaluate()`` every eval_steps: G samples per eval prompt,
per_device_eval_batch_size         TRL's eval_reward / eval_rewards/<f>/mean
log_completions,                   logging.log_samples_every = logging_steps,
num_completions_to_print           logging.samples_per_table
disable_tqdm                       logging.progress
resume_from_checkpoint             ``train(resume_from_checkpoint=...)``: True resumes output_dir
max_tool_calling_iterations        with environment_factory / tools: environment.max_turns = it + 1
(None)                             (None: turns until max_completion_length, as TRL's no limit)
=================================  ==========================================================

``grpokit=``: native overrides on top of the mapping, a dict of dotted or nested keys
(``{"algorithm.advantage": "rloo", "environment": {"name": "guess_number"}}``) or a whole
native ``Config`` (then only the TRL arguments given explicitly are applied on top of it).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from grpokit.api.trl_fields import ALSO_ACCEPTED, PLUMBING, REFUSED_UNLESS_DEFAULT

log = logging.getLogger(__name__)

LOSS_TYPES = {"grpo": "seq_mean_token_mean", "dapo": "token_mean", "dr_grpo": "constant", "bnpo": "token_mean"}
SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant"}
TRACKERS = ("tensorboard", "trackio", "wandb")


class UnsupportedArgument(ValueError):
    """A TRL argument grpokit cannot honour; the message names it and what to do."""


def arg(default: Any, doc: str) -> Any:
    """A GRPOConfig field with TRL 1.16's default and a one-line doc of what it does here."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: copy.copy(d), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass(init=False)
class GRPOConfig:
    """TRL's ``GRPOConfig`` arguments that grpokit honours (the module docstring maps each one)."""

    output_dir: Optional[str] = arg(None, "run folder (None: trainer_output, as TRL)")
    per_device_train_batch_size: int = arg(8, "completions per micro-batch")
    gradient_accumulation_steps: int = arg(1, "micro-batches per optimizer step")
    num_generations: int = arg(8, "G: completions per prompt")
    generation_batch_size: Optional[int] = arg(None, "completions per generation (a multiple of per_device x accumulation)")
    steps_per_generation: Optional[int] = arg(None, "micro-batches per generation (a multiple of gradient_accumulation_steps)")
    num_train_epochs: float = arg(3.0, "passes over train_dataset when max_steps <= 0")
    max_steps: int = arg(-1, "optimizer steps (> 0 overrides num_train_epochs)")
    learning_rate: float = arg(1e-6, "AdamW learning rate (TRL's default 1e-6)")
    lr_scheduler_type: str = arg("linear", "linear, cosine or constant")
    warmup_steps: float = arg(0, "only 0 (see the module docstring)")
    weight_decay: float = arg(0.0, "AdamW weight decay")
    adam_beta1: float = arg(0.9, "AdamW beta1")
    adam_beta2: float = arg(0.999, "AdamW beta2")
    max_grad_norm: float = arg(1.0, "gradient clipping norm (0: off)")
    max_completion_length: Optional[int] = arg(512, "completion length cap in tokens")
    temperature: float = arg(1.0, "sampling temperature")
    top_p: float = arg(1.0, "nucleus sampling mass")
    top_k: int = arg(0, "top-k sampling (0: off)")
    beta: float = arg(0.0, "KL coefficient (k3 estimator)")
    num_iterations: int = arg(1, "mu: optimizer steps per generation batch")
    epsilon: float = arg(0.2, "lower clip range")
    epsilon_high: Optional[float] = arg(None, "upper clip range (None: epsilon)")
    importance_sampling_level: str = arg("token", "token or sequence (GSPO) ratio")
    reward_weights: Optional[list] = arg(None, "one weight per reward function (None: 1 each)")
    scale_rewards: Union[str, bool] = arg("group", "group, batch or none (True: group, False: none)")
    loss_type: str = arg("dapo", "grpo, dapo, dr_grpo or bnpo")
    mask_truncated_completions: bool = arg(False, "drop truncated completions from the loss")
    seed: int = arg(42, "seed of sampling, initialisation and data order")
    bf16: Optional[bool] = arg(None, "TRL's autocast; grpokit trains in model.dtype (see the module docstring)")
    fp16: bool = arg(False, "refused when True")
    use_cpu: bool = arg(False, "train on the CPU")
    gradient_checkpointing: bool = arg(True, "recompute activations in the backward")
    logging_steps: float = arg(10, "steps per log_history entry / on_log call (>= 1)")
    logging_first_step: bool = arg(False, "also log after the first step")
    logging_strategy: str = arg("steps", "steps (or no: no log_history entries)")
    report_to: Union[str, list, None] = arg("none", "trackers: none, tensorboard, trackio, wandb (a string or a list)")
    save_strategy: str = arg("steps", "steps or no")
    save_steps: float = arg(500, "optimizer steps between checkpoints")
    save_total_limit: Optional[int] = arg(None, "checkpoints kept (None: all)")
    eval_strategy: str = arg("no", "no or steps")
    eval_steps: Optional[float] = arg(None, "steps between evaluations (None: logging_steps)")
    per_device_eval_batch_size: int = arg(8, "prompts per evaluation generation batch")
    log_completions: bool = arg(False, "print a table of completions every logging_steps")
    num_completions_to_print: Optional[int] = arg(None, "rows of that table")
    disable_tqdm: Optional[bool] = arg(None, "no progress bar")
    remove_unused_columns: Optional[bool] = arg(False, "rewards see only the prompt column")
    disable_dropout: bool = arg(False, "set every dropout probability of the policy to 0")
    model_init_kwargs: Optional[dict] = arg(None, "only dtype / torch_dtype")
    use_bias_correction_kl: bool = arg(True, "must be False when beta > 0")
    resume_from_checkpoint: Optional[str] = arg(None, "read by scripts; train(resume_from_checkpoint=...) resumes")
    shuffle_dataset: Optional[bool] = arg(True, "only True (grpokit's seeded shuffle)")
    max_tool_calling_iterations: Optional[int] = arg(None, "tool rounds per rollout with environment_factory / tools (None: no limit but max_completion_length)")
    grpokit: Any = arg(None, "native overrides: a dict of dotted / nested keys, or a native Config")

    def __init__(self, output_dir: Optional[str] = None, **kwargs: Any) -> None:
        names = {f.name: f for f in dataclasses.fields(self)}
        for f in names.values():
            setattr(self, f.name, f.default_factory() if f.default is dataclasses.MISSING else f.default)
        self.output_dir = output_dir
        self.given = {"output_dir"} if output_dir is not None else set()  # the arguments the script passed
        self.trl_extra: dict[str, Any] = {}  # plumbing / default-valued TRL arguments, kept for scripts that read them
        for key, value in kwargs.items():
            if key in names:
                setattr(self, key, value)
            elif key in PLUMBING or key in REFUSED_UNLESS_DEFAULT:
                self.trl_extra[key] = value
            else:
                close = difflib.get_close_matches(key, [*names, *PLUMBING, *REFUSED_UNLESS_DEFAULT], n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise TypeError(f"GRPOConfig.__init__() got an unexpected keyword argument '{key}'{hint}")
            self.given.add(key)
        self.scale_rewards = {True: "group", False: "none"}.get(self.scale_rewards, self.scale_rewards)
        if isinstance(self.report_to, str):  # as TrainingArguments: a string is a one-item list, "none" an empty one
            self.report_to = [self.report_to]
        self.report_to = [t for t in self.report_to or [] if t != "none"]
        self.check()

    def __getattr__(self, name: str) -> Any:  # a TRL argument not mapped one by one: its value or TRL's default
        if name in PLUMBING or name in REFUSED_UNLESS_DEFAULT:
            extra = self.__dict__.get("trl_extra", {})
            return extra.get(name, PLUMBING.get(name, REFUSED_UNLESS_DEFAULT.get(name)))
        raise AttributeError(f"'GRPOConfig' object has no attribute '{name}'")

    def to_dict(self) -> dict[str, Any]:
        """Every TRL argument with its value (TrainingArguments' ``to_dict``, which trackers' callbacks read)."""
        out = {**PLUMBING, **REFUSED_UNLESS_DEFAULT, **self.trl_extra}
        out.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "grpokit"})
        return out

    # ------------------------------------------------------------------ refusals
    def refuse(self, name: str, why: str) -> None:
        raise UnsupportedArgument(f"GRPOConfig({name}={getattr(self, name)!r}): {why}")

    def check(self) -> None:
        """Refuse (one line) every argument set to a value grpokit cannot honour."""
        for key, value in self.trl_extra.items():
            if key in REFUSED_UNLESS_DEFAULT and value != REFUSED_UNLESS_DEFAULT[key] and value not in ALSO_ACCEPTED.get(key, ()):
                self.refuse(key, f"grpokit cannot honour it (TRL's default is {REFUSED_UNLESS_DEFAULT[key]!r}); remove it, "
                                 "or reach the grpokit equivalent through grpokit={...} (see `grpokit list`)")
        if self.loss_type not in LOSS_TYPES:
            self.refuse("loss_type", f"grpokit maps {', '.join(LOSS_TYPES)}; for another loss use grpokit={{'algorithm.loss': ...}} (see `grpokit list`)")
        if self.loss_type == "bnpo" and self.gradient_accumulation_steps != 1:
            self.refuse("loss_type", "bnpo normalises by each micro-batch's tokens; grpokit normalises the accumulated batch: use 'dapo'")
        if self.scale_rewards not in ("group", "batch", "none"):
            self.refuse("scale_rewards", "use 'group', 'batch' or 'none'")
        if self.importance_sampling_level not in ("token", "sequence"):
            self.refuse("importance_sampling_level", "use 'token' or 'sequence'")
        if self.importance_sampling_level == "sequence" and self.loss_type != "grpo":
            self.refuse("importance_sampling_level", f"with loss_type={self.loss_type!r} each sequence's ratio would weigh by its "
                        "length; grpokit takes GSPO's sequence-level gradient only with loss_type='grpo' (TRL's GSPO recipe)")
        if self.lr_scheduler_type not in SCHEDULES:
            self.refuse("lr_scheduler_type", f"grpokit's schedules are {', '.join(SCHEDULES)}")
        if self.warmup_steps:
            self.refuse("warmup_steps", "grpokit's warmup ramps the rate as (u+1)/(w+1) from the first update, not transformers' u/w; "
                                        "set grpokit={'optim.warmup_steps': N} for grpokit's ramp")
        if self.beta > 0 and self.use_bias_correction_kl:
            self.refuse("beta", "TRL's default use_bias_correction_kl=True weights the KL by the importance ratio, grpokit's k3 term is "
                                "unweighted: pass use_bias_correction_kl=False as well")
        if self.fp16:
            self.refuse("fp16", "grpokit has no fp16 mixed precision: remove it (or grpokit={'model.dtype': 'float16'} on CUDA)")
        if self.max_completion_length is None:
            self.refuse("max_completion_length", "grpokit needs a completion length cap: give a number of tokens")
        if not self.shuffle_dataset:
            self.refuse("shuffle_dataset", "grpokit always draws prompts in a seeded shuffled order: remove it")
        if self.logging_strategy not in ("steps", "no") or self.logging_steps < 1:
            self.refuse("logging_strategy" if self.logging_strategy not in ("steps", "no") else "logging_steps",
                        "grpokit logs every N >= 1 steps (logging_strategy='steps') or not at all ('no')")
        if self.save_strategy not in ("steps", "no") or (self.save_strategy == "steps" and self.save_steps < 1):
            self.refuse("save_strategy" if self.save_strategy not in ("steps", "no") else "save_steps",
                        "grpokit saves every N >= 1 optimizer steps (save_strategy='steps') or only at the end ('no')")
        if self.eval_strategy not in ("no", "steps"):
            self.refuse("eval_strategy", "grpokit evaluates every eval_steps steps ('steps') or on request ('no')")
        bad = [t for t in self.report_to or [] if t not in ("none", *TRACKERS)]
        if bad:
            self.refuse("report_to", f"grpokit writes to {', '.join(TRACKERS)} (and always metrics.jsonl): '{bad[0]}' is not one")
        if set(self.model_init_kwargs or {}) - {"dtype", "torch_dtype"}:
            self.refuse("model_init_kwargs", "grpokit reads only 'dtype' / 'torch_dtype' from it")
        gen = self.generation_batch()
        if gen % self.num_generations:
            self.refuse("num_generations", f"the generation batch ({gen} completions) must be a multiple of it")
        per_batch = self.num_iterations * self.mini_batches()
        if self.max_steps > 0 and self.max_steps % per_batch:
            self.refuse("max_steps", f"grpokit counts training steps of num_iterations x generation / optimizer batch = {per_batch} "
                                     "optimizer steps each: give a multiple of it")

    def generation_batch(self) -> int:
        """Completions per generation: ``generation_batch_size``, else per_device x steps_per_generation (default accumulation)."""
        spg = self.steps_per_generation
        return self.generation_batch_size or self.per_device_train_batch_size * (spg or self.gradient_accumulation_steps)

    def mini_batches(self) -> int:
        """Optimizer steps per generation (``algorithm.mini_batches``): the generation over per_device x accumulation."""
        per_step = self.per_device_train_batch_size * self.gradient_accumulation_steps
        gen = self.generation_batch()
        name = "generation_batch_size" if self.generation_batch_size else "steps_per_generation"
        if gen % per_step:
            self.refuse(name, f"a generation of {gen} completions must be a whole number of optimizer batches of "
                              f"per_device_train_batch_size x gradient_accumulation_steps = {per_step}")
        if gen > per_step and per_step % self.num_generations:
            self.refuse(name, f"grpokit's mini-batches are whole groups: with several optimizer steps per generation, "
                              f"per_device_train_batch_size x gradient_accumulation_steps ({per_step}) must be a multiple of "
                              f"num_generations ({self.num_generations})")
        return gen // per_step

    # ------------------------------------------------------------------ mapping
    def trl_overrides(self, n_rows: Optional[int]) -> dict:
        """The native config keys (dotted) these TRL arguments set; only the given ones when ``grpokit`` is a Config."""
        prompts = self.generation_batch() // self.num_generations
        mu = self.num_iterations * self.mini_batches()  # optimizer steps per grpokit step
        if self.max_steps > 0:
            steps = self.max_steps // mu
        else:
            if n_rows is None:
                self.refuse("max_steps", "without max_steps, num_train_epochs needs a train_dataset to count its rows")
            steps = max(1, math.ceil(self.num_train_epochs * n_rows / prompts))
        trackers = [t for t in self.report_to or [] if t != "none"]
        dtype = (self.model_init_kwargs or {}).get("dtype") or (self.model_init_kwargs or {}).get("torch_dtype")
        by_arg = {
            "output_dir": {"logging.output_dir": self.output_dir or "trainer_output"},
            "num_generations": {"rollout.group_size": self.num_generations},
            "per_device_train_batch_size": {"rollout.prompts_per_step": prompts, "train.micro_batch_size": self.per_device_train_batch_size,
                                            "algorithm.mini_batches": self.mini_batches()},
            "max_steps": {"train.steps": steps},
            "learning_rate": {"optim.lr": self.learning_rate},
            "weight_decay": {"optim.weight_decay": self.weight_decay},
            "adam_beta1": {"optim.betas": [self.adam_beta1, self.adam_beta2]},
            "max_grad_norm": {"optim.max_grad_norm": self.max_grad_norm},
            "lr_scheduler_type": {"optim.schedule": SCHEDULES[self.lr_scheduler_type], "optim.warmup_steps": 0},
            "max_completion_length": {"rollout.max_new_tokens": self.max_completion_length, "eval.max_new_tokens": self.max_completion_length},
            "temperature": {"rollout.temperature": self.temperature},
            "top_p": {"rollout.top_p": self.top_p},
            "top_k": {"rollout.top_k": self.top_k},
            "beta": {"algorithm.beta": self.beta, "algorithm.kl": "k3"},
            "num_iterations": {"algorithm.num_iterations": self.num_iterations},
            "epsilon": {"algorithm.epsilon_low": self.epsilon, "algorithm.epsilon_high": self.epsilon_high if self.epsilon_high is not None else self.epsilon},
            "importance_sampling_level": {"algorithm.ratio": self.importance_sampling_level},
            "loss_type": {"algorithm.loss": "ppo_clip", "algorithm.aggregation": LOSS_TYPES[self.loss_type]},
            "scale_rewards": {"algorithm.advantage": "grpo", "algorithm.scale": self.scale_rewards,
                              **({"algorithm.std_mode": "unbiased", "algorithm.std_eps": 1e-4} if self.scale_rewards != "none" else {})},
            "mask_truncated_completions": {"algorithm.mask_truncated": self.mask_truncated_completions},
            "seed": {"train.seed": self.seed, "data.seed": self.seed},
            "use_cpu": {"model.device": "cpu"} if self.use_cpu else {},
            "model_init_kwargs": {"model.dtype": "float32" if dtype in (None, "auto") else str(dtype).replace("torch.", "")},
            "gradient_checkpointing": {"train.activation_checkpointing": bool(self.gradient_checkpointing)},
            "report_to": {"logging.report_to": trackers},
            "save_strategy": {"logging.checkpoint_every": max(1, int(self.save_steps) // mu) if self.save_strategy == "steps" else 0},
            "save_total_limit": {"logging.keep_checkpoints": self.save_total_limit or 10**6},
            "per_device_eval_batch_size": {"eval.batch_size": self.per_device_eval_batch_size},
            "log_completions": {"logging.log_samples_every": int(self.logging_steps) if self.log_completions else 0,
                                "logging.samples_per_table": self.num_completions_to_print or prompts},
            "disable_tqdm": {"logging.progress": not self.disable_tqdm},
        }
        also = {"gradient_accumulation_steps": "per_device_train_batch_size", "generation_batch_size": "per_device_train_batch_size",
                "steps_per_generation": "per_device_train_batch_size", "num_train_epochs": "max_steps", "adam_beta2": "adam_beta1",
                "epsilon_high": "epsilon", "save_steps": "save_strategy", "num_completions_to_print": "log_completions"}
        native = self.grpokit if _is_config(self.grpokit) else None
        out: dict = {"eval.before": False, "eval.after": False, "data.heldout_fraction": 0.0, "data.answer_column": None,
                     "data.task": None} if native is None else {}
        for name, keys in by_arg.items():
            if native is None or name in self.given or any(a in self.given and b == name for a, b in also.items()):
                out.update(keys)
        return out

    def to_native(self, n_rows: Optional[int] = None) -> Any:
        """The validated native Config: the base (defaults or ``grpokit=Config``) <- TRL mapping <- ``grpokit={...}``."""
        from grpokit.config.loading import ConfigError, from_dict, merge, to_dict
        from grpokit.config.schema import Config

        if self.bf16 is not False and "model.dtype" not in _dotted(self.grpokit):
            log.warning("GRPOConfig(bf16=%s): grpokit has no autocast mixed precision; the model trains in model.dtype "
                        "(float32 unless grpokit={'model.dtype': 'bfloat16'})", self.bf16)
        base = to_dict(self.grpokit) if _is_config(self.grpokit) else {}
        trl = self.trl_overrides(n_rows)
        if "algorithm.advantage" in _dotted(self.grpokit):  # another estimator: TRL's std convention is grpo's option
            trl = {k: v for k, v in trl.items() if k not in ("algorithm.std_mode", "algorithm.std_eps")}
        data = merge(base, _nest(trl))
        if self.grpokit is not None and not _is_config(self.grpokit):
            if not isinstance(self.grpokit, dict):
                raise UnsupportedArgument(f"GRPOConfig(grpokit={type(self.grpokit).__name__}): give a dict of native keys or a grpokit Config")
            data = merge(data, _nest(self.grpokit))
        try:
            return from_dict(Config, data, "")
        except ConfigError as exc:
            raise ConfigError(f"GRPOConfig(grpokit=...): {exc}") from None


def _is_config(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and type(value).__name__ == "Config"


def _dotted(overrides: Any) -> set:
    """The dotted keys of a ``grpokit=`` dict (nested keys joined)."""
    if not isinstance(overrides, dict):
        return set()
    return set(_flatten(_nest(overrides)))


def _flatten(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value and not key.endswith(("options", "kwargs")):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _nest(flat: dict) -> dict:
    """``{"a.b": 1, "c": {"d": 2}}`` -> ``{"a": {"b": 1}, "c": {"d": 2}}`` (dotted and nested keys may mix)."""
    from grpokit.config.loading import merge

    out: dict = {}
    for key, value in flat.items():
        nested: Any = _nest(value) if isinstance(value, dict) and not str(key).endswith(("options", "kwargs")) else value
        for part in reversed(str(key).split(".")):
            nested = {part: nested}
        out = merge(out, nested)
    return out
