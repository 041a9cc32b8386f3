"""Log-likelihoods of a masked-diffusion LM's samples for RL, registered by name, each ``[b, U]``.

A masked-diffusion LM has no token factorisation, so the per-unit log-prob is a design choice;
each choice below is one registered estimator with its unit kind. All read a
:class:`CanvasInputs` (left-padded prompts, the fixed-length sampled canvas, the sampler's record
and one estimator seed per row) and a ``logits_fn(ids, attention) -> [n, S, V]``. Random masks
come from a per-row generator seeded by the row's stored seed, drawn over the row's *real* prompt
tokens and its canvas only, so the same seed gives the same mask under the current, old and
reference weights and in any micro-batch (common random numbers: the ratio is exactly 1 on policy).

* ``stand_in`` -- d1 / diffu-GRPO ("d1: Scaling Reasoning in Diffusion Large Language Models via
  Reinforcement Learning", arXiv 2504.12216, §3.2; authors' ``diffu_grpo_trainer.py``): one forward
  with every prompt token masked with probability ``prompt_mask_prob`` and the *whole* completion
  masked; unit j = log p(y_j | that input). Units: the canvas up to and including the first [EOS].
* ``espo_elbo`` -- ESPO ("Principled RL for Diffusion LLMs Emerges from a Sequence-Level
  Perspective", arXiv 2512.03759; authors' ``espo_trainer.py``): the coupled Monte-Carlo ELBO of the
  canvas. Mask n in {0..L} positions (n stratified over a row's ``num_mc`` draws), t = n / (L + 1);
  ELBO = sum_{k masked} log p(y_k | y_t) / t; with ``coupled`` the complementary mask (t' = (L - n) /
  (L + 1)) is averaged in. The ELBO is returned split over the L positions (unit k = position k's
  terms; every position is a unit), so sum_k = ELBO and GSPO's length-normalised sequence ratio over
  the units is ESPO's exp((ELBO - ELBO_old) / L). Unit kind 'sequence'.
* ``mask_grpo_step`` -- Mask-GRPO (arXiv 2510.13418; authors' ``modeling_showo.py``): unit k = the
  sum over the positions committed at step k of log p(token | canvas before step k) ("candidate 2"),
  one forward per step. The exact transition log-prob of the sampler given the committed set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from grpokit.registry import Registry

LIKELIHOODS = Registry(
    "likelihood",
    # unit_kind: what a unit is; surrogate: an estimator rather than the sampling probability;
    # units_share_one_forward: one forward gives every unit of a row (else one forward per unit)
    properties={"unit_kind": "token", "surrogate": True, "units_share_one_forward": True},
    context=("mask_id", "eos_id", "temperature"),
)

LogitsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class CanvasInputs:
    """prompt_ids / prompt_mask: [b, P] left-padded; canvas: [b, L]; commit_step: [b, L] (-1 = unknown);
    seeds: [b] int64 estimator seeds; steps: K unmasking steps of the sampler."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    canvas: torch.Tensor
    commit_step: torch.Tensor
    seeds: torch.Tensor
    steps: int


def row_generator(seed: int, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
    return gen


def token_logp(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """``[n, L]`` log softmax(logits / temperature) of ``targets [n, L]`` (logits ``[n, L, V]``)."""
    return torch.log_softmax(logits / temperature, -1).gather(-1, targets[..., None]).squeeze(-1)


def through_first_eos(canvas: torch.Tensor, eos_id: int) -> torch.Tensor:
    """``[b, L]`` 1 up to and including the first [EOS] (all 1 without one): d1's completion mask."""
    is_eos = (canvas == eos_id).long()
    before = is_eos.cumsum(-1) - is_eos  # EOS seen strictly before position
    return (before == 0).long()


def _forward(logits_fn: LogitsFn, prompt_ids, prompt_mask, canvas_in) -> torch.Tensor:
    ids = torch.cat([prompt_ids, canvas_in], dim=1)
    attention = torch.cat([prompt_mask, torch.ones_like(canvas_in)], dim=1)
    return logits_fn(ids, attention)[:, prompt_ids.shape[1]:]  # [n, L, V]


def masked_prompts(inp: CanvasInputs, prob: float, mask_id: int) -> torch.Tensor:
    """``[b, P]`` prompts with each real token replaced by [MASK] with probability ``prob`` (per-row seeded)."""
    out = inp.prompt_ids.clone()
    for i, seed in enumerate(inp.seeds.tolist()):
        real = inp.prompt_mask[i].bool()
        n = int(real.sum())
        u = torch.rand(n, generator=row_generator(seed, out.device), device=out.device)
        row = out[i, real]
        out[i, real] = torch.where(u < prob, torch.full_like(row, mask_id), row)
    return out


@LIKELIHOODS.register("stand_in", unit_kind="token", surrogate=True, units_share_one_forward=True)
def stand_in_logp(logits_fn: LogitsFn, inp: CanvasInputs, *, mask_id: int, eos_id: int, temperature: float = 1.0,
                  prompt_mask_prob: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """d1's one-step stand-in: log p(y_j | prompt masked at random, canvas fully masked) per token, through the first EOS.

    Returns (``logp [b, L]``, unit mask ``[b, L]``).
    """
    prompts = masked_prompts(inp, prompt_mask_prob, mask_id) if prompt_mask_prob > 0 else inp.prompt_ids
    logits = _forward(logits_fn, prompts, inp.prompt_mask, torch.full_like(inp.canvas, mask_id))
    mask = through_first_eos(inp.canvas, eos_id)
    return token_logp(logits, inp.canvas, temperature) * mask, mask


def elbo_masks(seed: int, length: int, num_mc: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(masked [num_mc, L] bool, n [num_mc])``: n_m = floor(u (L+1) + m (L+1) / num_mc) mod (L+1), n_m random positions."""
    gen = row_generator(seed, device)
    u = float(torch.rand(1, generator=gen, device=device))
    masks, counts = [], []
    for m in range(num_mc):
        n = int(u * (length + 1) + m * (length + 1) / num_mc) % (length + 1)
        perm = torch.randperm(length, generator=gen, device=device)
        masked = torch.zeros(length, dtype=torch.bool, device=device)
        masked[perm[:n]] = True
        masks.append(masked)
        counts.append(n)
    return torch.stack(masks), torch.tensor(counts, device=device)


def coupled_elbo_terms(logp_masked: torch.Tensor, logp_complement: Optional[torch.Tensor], masked: torch.Tensor) -> torch.Tensor:
    """Per-position ELBO terms ``[n, L]`` of one mask each: 1{k in M} l_k / t (+ the complement's, averaged).

    logp_masked: [n, L] log p(y_k | y with M masked); logp_complement: [n, L] with the complement
    masked, or None (uncoupled); masked: [n, L] bool. t = |M| / (L + 1); a mask of size 0 adds 0.
    """
    length = masked.shape[-1]
    n = masked.sum(-1, keepdim=True).to(logp_masked.dtype)
    t = n / (length + 1)
    terms = torch.where(masked, logp_masked / t.clamp(min=1e-12), torch.zeros_like(logp_masked))
    if logp_complement is None:
        return terms
    t_c = (length - n) / (length + 1)
    comp = torch.where(~masked, logp_complement / t_c.clamp(min=1e-12), torch.zeros_like(logp_complement))
    return 0.5 * (terms + comp)


@LIKELIHOODS.register("espo_elbo", unit_kind="sequence", surrogate=True, units_share_one_forward=True)
def espo_elbo_logp(logits_fn: LogitsFn, inp: CanvasInputs, *, mask_id: int, eos_id: int, temperature: float = 1.0,
                   num_mc: int = 1, coupled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """ESPO's coupled Monte-Carlo ELBO of the canvas, split over its L positions (a row's sum is the ELBO).

    Returns (``logp [b, L]``, unit mask ``[b, L]`` all 1).
    """
    b, length = inp.canvas.shape
    masks = torch.stack([elbo_masks(s, length, num_mc, inp.canvas.device)[0] for s in inp.seeds.tolist()])  # [b, M, L]
    masks = masks.reshape(b * num_mc, length)
    target = inp.canvas.repeat_interleave(num_mc, 0)
    prompts = inp.prompt_ids.repeat_interleave(num_mc, 0)
    pmask = inp.prompt_mask.repeat_interleave(num_mc, 0)
    variants = [masks, ~masks] if coupled else [masks]
    ids = torch.cat([torch.where(m, torch.full_like(target, mask_id), target) for m in variants])
    logits = _forward(logits_fn, prompts.repeat(len(variants), 1), pmask.repeat(len(variants), 1), ids)
    lp = token_logp(logits, target.repeat(len(variants), 1), temperature).view(len(variants), b * num_mc, length)
    terms = coupled_elbo_terms(lp[0], lp[1] if coupled else None, masks)  # [b*M, L]
    return terms.view(b, num_mc, length).mean(1), torch.ones_like(inp.canvas)


def step_canvases(canvas: torch.Tensor, commit_step: torch.Tensor, steps: int, mask_id: int) -> torch.Tensor:
    """``[b, K, L]``: the canvas before step k = tokens committed at steps < k, [MASK] elsewhere."""
    k = torch.arange(steps, device=canvas.device)[None, :, None]
    revealed = commit_step[:, None, :] < k
    return torch.where(revealed, canvas[:, None, :], torch.full_like(canvas[:, None, :], mask_id))


@LIKELIHOODS.register("mask_grpo_step", unit_kind="unmask_step", surrogate=False, units_share_one_forward=False)
def mask_grpo_step_logp(logits_fn: LogitsFn, inp: CanvasInputs, *, mask_id: int, eos_id: int,
                        temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask-GRPO candidate 2: per unmasking step, the sum of log p over the positions that step committed.

    Returns (``logp [b, L]``: column k < K is step k; unit mask ``[b, L]`` 1 on the K step columns).
    """
    b, length = inp.canvas.shape
    if inp.steps > length:
        raise ValueError(f"mask_grpo_step: {inp.steps} steps do not fit the canvas of {length} units")
    if bool((inp.commit_step < 0).any()):
        raise ValueError("mask_grpo_step needs the sampler's record of the step that committed each position")
    states = step_canvases(inp.canvas, inp.commit_step, inp.steps, mask_id).reshape(b * inp.steps, length)
    logits = _forward(logits_fn, inp.prompt_ids.repeat_interleave(inp.steps, 0),
                      inp.prompt_mask.repeat_interleave(inp.steps, 0), states)
    lp = token_logp(logits, inp.canvas.repeat_interleave(inp.steps, 0), temperature).view(b, inp.steps, length)
    committed = inp.commit_step[:, None, :] == torch.arange(inp.steps, device=lp.device)[None, :, None]
    per_step = (lp * committed).sum(-1)  # [b, K]
    logp = torch.zeros(b, length, dtype=per_step.dtype, device=per_step.device)
    logp[:, : inp.steps] = per_step
    mask = torch.zeros_like(inp.canvas)
    mask[:, : inp.steps] = 1
    return logp, mask


def llada_sft_loss(logits_fn: LogitsFn, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, answer: torch.Tensor,
                   mask_id: int, generator: Optional[torch.Generator] = None, eps: float = 1e-3) -> torch.Tensor:
    """LLaDA's SFT loss (arXiv 2502.09992, eq. 5): mean_b (1/L) sum_{k masked} -log p(y_k | x, y_t) / t.

    answer: [b, L] the target canvas (answer + [EOS] padding; the prompt is never masked). Per row
    t ~ U(0, 1), p_mask = (1 - eps) t + eps, each answer token masked with probability p_mask.
    """
    b, length = answer.shape
    t = torch.rand(b, 1, device=answer.device, generator=generator)
    p_mask = (1 - eps) * t + eps
    masked = torch.rand(b, length, device=answer.device, generator=generator) < p_mask
    noisy = torch.where(masked, torch.full_like(answer, mask_id), answer)
    logits = _forward(logits_fn, prompt_ids, prompt_mask, noisy)
    nll = -token_logp(logits, answer, 1.0)
    return ((nll * masked / p_mask).sum(-1) / length).mean()
