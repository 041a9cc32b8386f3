"""LLaDA's sampler for a masked-diffusion LM: blocks, a per-step transfer schedule, remasking.

"Large Language Diffusion Models" (Nie et al., arXiv 2502.09992, §2.4 and Appendix B; the
authors' ``generate.py``). The canvas is the prompt followed by L [MASK] tokens (a fixed
generation length: the model learns to emit [EOS] padding). The canvas is cut into blocks of
``block_length`` generated one after the other (semi-autoregressive; ``block_length = L`` is fully
parallel); each block gets ``steps / (L / block_length)`` steps and its mask count is spread over
them (:func:`transfer_schedule`). Each step:

1. one forward of the mask predictor on the canvas, logits ``[B, S, V]``;
2. at every masked position propose x0 by Gumbel-max at temperature tau, i.e. a draw from
   softmax(logits / tau), in float64 (tau = 0: argmax);
3. confidence: ``low_confidence`` = softmax(logits) (temperature 1) probability of the proposal,
   ``random`` = a uniform number; positions past the current block get -inf;
4. commit the n_k most confident masked positions; every other position stays [MASK]
   ("remasking").

The sampler records what step-level likelihoods need (Mask-GRPO, arXiv 2510.13418; the authors'
``xingzhejun/Mask-GRPO``, ``modeling_showo.py``): the step at
which each position was committed (the canvas before step k is the final canvas with the
positions committed at steps >= k masked again, since a committed token never changes) and, per
step, the sum over the committed positions of log softmax(logits / tau) of the committed token
(their "candidate 2"; tau = 1 when sampling greedily).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from grpokit.families.masked_diffusion.model import mdm_logits

REMASKING = ("low_confidence", "random")


@dataclass
class SamplerOptions:
    """steps: total unmasking steps K (0 = the canvas length L); block_length: 0 = L;
    temperature: Gumbel temperature tau (0 = argmax); remasking: 'low_confidence' or 'random'."""

    steps: int = 0
    block_length: int = 0
    temperature: float = 1.0
    remasking: str = "low_confidence"

    def resolved(self, length: int) -> tuple[int, int]:
        """``(steps, block_length)`` for canvas length ``length``, checked (one line naming the field)."""
        steps = self.steps or length
        block = self.block_length or length
        if self.remasking not in REMASKING:
            raise ValueError(f"diffusion.remasking {self.remasking!r}: choose one of {', '.join(REMASKING)}")
        if length % block:
            raise ValueError(f"diffusion.block_length {block} must divide the canvas length {length}")
        blocks = length // block
        if steps % blocks or steps > length:
            raise ValueError(f"diffusion.steps {steps} must be a multiple of the number of blocks ({blocks}) and at most "
                             f"the canvas length {length}")
        return steps, block


@dataclass
class Trajectory:
    """One sampled batch. canvas: [B, L] final tokens; commit_step: [B, L] the step that committed each
    position (0..K-1); step_logp: [B, K] sum of log p(committed token | canvas before the step)."""

    canvas: torch.Tensor
    commit_step: torch.Tensor
    step_logp: torch.Tensor


def transfer_schedule(mask_count: torch.Tensor, steps: int) -> torch.Tensor:
    """``[B, steps]`` tokens to commit per step: mask_count // steps each, the first ``mask_count % steps`` one more.

    Sums to ``mask_count [B]`` in every row (LLaDA's ``get_num_transfer_tokens``).
    """
    base = (mask_count // steps)[:, None].expand(-1, steps)
    extra = torch.arange(steps, device=mask_count.device)[None, :] < (mask_count % steps)[:, None]
    return base + extra.long()


def gumbel_argmax(logits: torch.Tensor, temperature: float, generator: Optional[torch.Generator]) -> torch.Tensor:
    """A draw from softmax(logits / temperature) by Gumbel-max in float64 (temperature 0: argmax). ``[..., V] -> [...]``."""
    if temperature <= 0:
        return logits.argmax(-1)
    u = torch.rand(logits.shape, dtype=torch.float64, device=logits.device, generator=generator)
    gumbel = -torch.log(-torch.log(u.clamp(min=1e-300)))
    return (logits.double() / temperature + gumbel).argmax(-1)


def commit_top(confidence: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` bool: the ``k[b]`` positions of largest confidence in each row (-inf never chosen)."""
    order = confidence.argsort(dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order).scatter_(-1, order, torch.arange(confidence.shape[-1], device=confidence.device).expand_as(order))
    return (ranks < k[:, None]) & torch.isfinite(confidence)


@torch.no_grad()
def generate(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, length: int, options: SamplerOptions,
             mask_id: int, generator: Optional[torch.Generator] = None) -> Trajectory:
    """Sample ``[B, length]`` canvases after left-padded prompts ``[B, P]`` (see the module docstring)."""
    steps, block = options.resolved(length)
    b, p = prompt_ids.shape
    device = prompt_ids.device
    x = torch.cat([prompt_ids, torch.full((b, length), mask_id, dtype=prompt_ids.dtype, device=device)], dim=1)
    attention = torch.cat([prompt_mask, torch.ones(b, length, dtype=prompt_mask.dtype, device=device)], dim=1)
    commit_step = torch.full((b, length), -1, dtype=torch.long, device=device)
    step_logp = torch.zeros(b, steps, device=device)
    per_block = steps // (length // block)
    tau = options.temperature if options.temperature > 0 else 1.0
    k = 0
    for start in range(0, length, block):
        in_block = torch.zeros(length, dtype=torch.bool, device=device)
        in_block[start : start + block] = True
        masked_in_block = (x[:, p + start : p + start + block] == mask_id).sum(-1)
        schedule = transfer_schedule(masked_in_block, per_block)  # [B, per_block]
        for i in range(per_block):
            logits = mdm_logits(model, x, attention)[:, p:]  # [B, L, V]
            masked = x[:, p:] == mask_id
            x0 = gumbel_argmax(logits, options.temperature, generator)
            if options.remasking == "low_confidence":
                conf = torch.softmax(logits.double(), -1).gather(-1, x0[..., None]).squeeze(-1)
            else:
                conf = torch.rand(masked.shape, dtype=torch.float64, device=device, generator=generator)
            conf = torch.where(masked & in_block[None, :], conf, torch.full_like(conf, float("-inf")))
            chosen = commit_top(conf, schedule[:, i])
            token_logp = torch.log_softmax(logits / tau, -1).gather(-1, x0[..., None]).squeeze(-1)  # [B, L]
            step_logp[:, k] = (token_logp * chosen).sum(-1)
            x[:, p:] = torch.where(chosen, x0.to(x.dtype), x[:, p:])
            commit_step[chosen] = k
            k += 1
    return Trajectory(canvas=x[:, p:], commit_step=commit_step, step_logp=step_logp)
