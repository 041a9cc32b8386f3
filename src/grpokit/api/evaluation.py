"""TRL's evaluation of a GRPO run: rewards of sampled completions on the eval prompts.

TRL's ``GRPOTrainer.evaluate`` (https://huggingface.co/docs/trl/grpo_trainer) generates
``num_generations`` completions per eval prompt with the training sampler settings and logs the
reward statistics under ``eval_`` names; it takes no optimizer step. grpokit's native
``Trainer.evaluate`` measures greedy accuracy instead; this module gives the TRL door TRL's numbers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch


def sampled_rewards(trainer: Any, rows: list[dict], batch_size: int) -> dict[str, float]:
    """``reward``, ``reward_std``, ``rewards/<f>/mean`` and ``completions/mean_length`` over G samples of every row.

    ``trainer``: a native :class:`~grpokit.trainer.loop.Trainer`; prompts are sampled
    ``batch_size`` at a time (``per_device_eval_batch_size``), G = ``rollout.group_size`` each.
    """
    from grpokit.data.sampler import PromptSampler
    from grpokit.trainer.collect import collect_batch

    cfg = trainer.cfg
    totals, per_reward, lengths = [], {}, []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        chunk_cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, prompts_per_step=len(chunk)),
                                        algorithm=dataclasses.replace(cfg.algorithm, dynamic_sampling=False))
        with torch.no_grad():
            batch, scores, _ = collect_batch(chunk_cfg, trainer.policy, PromptSampler(chunk, cfg.data.seed), trainer._prompt_texts,
                                             trainer.rewards, trainer.policy.pad_id, outcome=trainer.judge.name)
        totals.append(scores.total)
        for name, values in scores.per_reward.items():
            per_reward.setdefault(name, []).append(values)
        lengths.append(batch.unit_mask.sum(-1).float().cpu())
    total = torch.cat(totals)
    out = {"reward": float(total.mean()), "reward_std": float(total.std()) if len(total) > 1 else 0.0,
           "completions/mean_length": float(torch.cat(lengths).mean())}
    for name, parts in per_reward.items():
        values = torch.cat(parts)
        valid = values[~values.isnan()]
        out[f"rewards/{name}/mean"] = float(valid.mean()) if len(valid) else math.nan
    return out
