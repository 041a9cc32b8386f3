"""Build a run's parts from its Config: data, rewards, model, optimizer, schedule."""

from __future__ import annotations

import copy
import functools
import inspect
import math
import random
from typing import Any

import torch

from grpokit.config.schema import Config, DataConfig, OptimConfig, RewardConfig
from grpokit.data.chat import render_prompt
from grpokit.data.files import load_rows, split_rows
from grpokit.data.tasks import TASKS, TaskSplits
from grpokit.rewards import NamedReward, resolve_reward


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def build_splits(cfg: DataConfig) -> TaskSplits:
    """Train and held-out rows from a built-in task or from user files."""
    if cfg.path:
        rows = load_rows(cfg.path, cfg.prompt_column, cfg.answer_column, cfg.split)
        if cfg.heldout_path:
            heldout = load_rows(cfg.heldout_path, cfg.prompt_column, cfg.answer_column, cfg.split)
            return TaskSplits(train=rows, heldout=heldout)
        return split_rows(rows, cfg.heldout_fraction, cfg.seed)
    if not cfg.task:
        raise ValueError("data: set either data.task (a built-in task) or data.path (a dataset file)")
    task = TASKS.get(cfg.task)
    kwargs = dict(seed=cfg.seed, n_train=cfg.n_train, n_heldout=cfg.n_heldout, **cfg.task_options)
    try:  # check the options only, so a TypeError inside the task is not blamed on them
        inspect.signature(task).bind(**kwargs)
    except TypeError as exc:
        raise ValueError(f"data.task_options do not fit task '{cfg.task}': {exc}") from None
    return task(**kwargs)


def render_all(tokenizer: Any, rows: list[dict], system_prompt: str | None) -> list[str]:
    return [render_prompt(tokenizer, row["prompt"], system_prompt) for row in rows]


def build_rewards(cfgs: list[RewardConfig]) -> list[NamedReward]:
    """Resolve each reward spec and bind its kwargs; names are unique within a run."""
    if not cfgs:
        raise ValueError("rewards: give at least one reward function")
    out: list[NamedReward] = []
    seen: dict[str, int] = {}
    for rc in cfgs:
        fn = resolve_reward(rc.name)
        base = rc.name.split(":")[-1] if ":" in rc.name else rc.name
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}_{seen[base]}"
        bound = functools.partial(fn, **rc.kwargs) if rc.kwargs else fn
        out.append(NamedReward(name=name, fn=bound, weight=rc.weight))
    return out


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    kwargs = dict(lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)
    # The fused kernel (CPU and CUDA) updates in one pass without foreach temporaries: on the
    # 135M demo model a step takes 0.1 s instead of 1.9 s, and no parameter-sized scratch.
    fusable = all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(params, fused=fusable, **kwargs)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup for ``warmup_steps``, then constant, cosine or linear decay to 0."""

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / (cfg.warmup_steps + 1)
        if cfg.schedule == "constant":
            return 1.0
        progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
        progress = min(max(progress, 0.0), 1.0)
        if cfg.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0 - progress

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def load_policy(cfg: Config) -> tuple[torch.nn.Module, Any]:
    """The policy model (with LoRA if enabled) and its tokenizer."""
    from grpokit.model.loading import load_model
    from grpokit.model.lora import apply_lora

    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype)
    if cfg.model.lora.enabled:
        model = apply_lora(model, cfg.model.lora)
    return model, tokenizer


def reference_model(model: torch.nn.Module, cfg: Config, needed: bool) -> torch.nn.Module | None:
    """Frozen copy of the initial policy when ``needed`` (LoRA: None, the adapter is disabled instead)."""
    if hasattr(model, "peft_config"):
        if cfg.algorithm.ref_sync_every:
            raise ValueError("algorithm.ref_sync_every needs a full fine-tune: set model.lora.enabled=false")
        return None
    if not needed:
        return None
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def teacher_model(cfg: Config, tokenizer: Any) -> torch.nn.Module:
    """The frozen teacher of distillation losses; it must share the policy's vocabulary."""
    if not cfg.model.teacher:
        raise ValueError(f"algorithm.loss '{cfg.algorithm.loss}' needs a teacher: set model.teacher")
    from grpokit.model.loading import load_model

    teacher, tok = load_model(cfg.model.teacher, dtype=cfg.model.dtype)
    if tok.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"model.teacher '{cfg.model.teacher}' has a different tokenizer from the policy")
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher.eval()
