"""Co-GRPO: the image-token masked model and its inference schedule trained together under one trajectory reward.

"Co-GRPO: Co-Optimized Group Relative Policy Optimization for Masked Diffusion Model" (Zhou et
al., arXiv 2512.22288). Its method section is not public: what follows is the research note's
concrete form, every equation [inferred]. Generation is one MDP whose agent acts, at each of K
MaskGIT steps, on the schedule and on the tokens:

* schedule action A_k ~ pi_phi(. | k): per knob a Gaussian in unconstrained space, z ~ N(mu_phi[k],
  sigma^2), mapped to ``remask_ratio`` = sigmoid(z) (the fraction of the still-masked positions
  that stay masked after the step; the last step commits all), ``temperature`` = softplus(z)
  (sampling), ``remask_temperature`` = softplus(z) (Gumbel noise on the confidences, annealed by
  1 - k/K as MaskGIT / aMUSEd do) and ``cfg`` = softplus(z) (logits = u + (1 + w)(c - u), LLaDA's
  form). Knobs not in ``knobs`` stay at their initial values (cfg 0: no unconditional pass);
  the means start at the hand-designed MaskGIT schedule (cosine ratio, temperature 1,
  remask temperature 4.5, CFG scale 1 when it is learned, else off);
* token action: tokens drawn from softmax(logits / temperature) at the masked positions; the
  ``n_masked - floor(ratio n_masked)`` most confident (log p + annealed Gumbel) are committed.

Units (``[B, 2K]`` in a canvas-wide tensor): unit k < K = Mask-GRPO's candidate-2 transition
log-prob of step k under A_k (sum of log p over the committed positions); unit K + k = log
pi_phi(z_k) (the Gaussian's closed form, summed over the knobs). Each unit gets its own clipped
ratio from the generic loss and the same trajectory advantage multiplies both; no gradient flows
through the sampling chain (every step is re-scored on its recorded canvas and action). With
``std`` 0 the schedule is deterministic (its mean): the schedule units leave the unit mask and
the objective is Mask-GRPO's on the same steps. ``lr_scale`` multiplies phi's Adam step size
relative to theta's (mu = init + lr_scale * raw) [inferred: separate learning rates].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from grpokit.families.palette.images import COLOURS, SIDE, PaletteTokenizer, predictor_logits
from grpokit.families.masked_diffusion.sampler import commit_top, gumbel_argmax

KNOBS = ("remask_ratio", "temperature", "remask_temperature", "cfg")


def _inv_softplus(y: float) -> float:
    return math.log(math.expm1(y)) if y > 0 else -20.0


def cosine_keep(k: int, steps: int) -> float:
    """MaskGIT's cosine schedule as a per-step ratio: masked fraction after step k over the fraction before it."""
    before, after = math.cos(math.pi / 2 * k / steps), math.cos(math.pi / 2 * (k + 1) / steps)
    return 0.0 if k == steps - 1 else after / before


class Schedule(torch.nn.Module):
    """pi_phi: per-step Gaussian means ``mu [K, 4]`` over the knobs (see the module docstring)."""

    def __init__(self, steps: int, knobs: tuple[str, ...] = KNOBS, std: float = 0.3, lr_scale: float = 1.0) -> None:
        super().__init__()
        bad = sorted(set(knobs) - set(KNOBS))
        if bad:
            raise ValueError(f"diffusion.schedule_knobs {bad}: choose from {', '.join(KNOBS)}")
        init = torch.tensor([[math.log(max(cosine_keep(k, steps), 1e-6) / max(1 - cosine_keep(k, steps), 1e-6)),
                              _inv_softplus(1.0), _inv_softplus(4.5), _inv_softplus(1.0 if "cfg" in knobs else 0.0)]
                             for k in range(steps)], device="cpu")  # built on the CPU, moved with the module
        self.register_buffer("init", init)
        self.register_buffer("learned", torch.tensor([name in knobs for name in KNOBS], device="cpu"))
        self.raw = torch.nn.Parameter(torch.zeros(steps, len(KNOBS), device="cpu"))
        self.steps, self.std, self.lr_scale = steps, float(std), float(lr_scale)

    def mean(self) -> torch.Tensor:
        """``[K, 4]`` mu_phi; frozen knobs stay at their initial values."""
        return self.init + self.lr_scale * self.raw * self.learned

    def sample(self, b: int, generator: Optional[torch.Generator], stochastic: bool) -> torch.Tensor:
        """``[b, K, 4]`` unconstrained actions z (the mean when not stochastic or std = 0); frozen knobs never move."""
        mu = self.mean().detach()[None].expand(b, -1, -1)
        if not stochastic or self.std == 0:
            return mu.clone()
        noise = torch.randn(mu.shape, generator=generator, device=mu.device) * self.std
        return mu + noise * self.learned

    def log_prob(self, z: torch.Tensor) -> torch.Tensor:
        """``[b, K]`` log pi_phi(z_k) = sum over the learned knobs of log N(z; mu, std^2)."""
        if self.std == 0:
            return torch.zeros(z.shape[:2], device=z.device)
        mu = self.mean()[None]
        lp = -0.5 * ((z - mu) / self.std) ** 2 - math.log(self.std) - 0.5 * math.log(2 * math.pi)
        return (lp * self.learned).sum(-1)

    @staticmethod
    def values(z: torch.Tensor) -> dict[str, torch.Tensor]:
        """The knobs' values of actions ``z [..., 4]``."""
        sp = torch.nn.functional.softplus
        return {"remask_ratio": torch.sigmoid(z[..., 0]), "temperature": sp(z[..., 1]).clamp(min=1e-3),
                "remask_temperature": sp(z[..., 2]), "cfg": torch.where(z[..., 3] <= -20, torch.zeros_like(z[..., 3]), sp(z[..., 3]))}


class CoGRPOModel(torch.nn.Module):
    """theta (the mask predictor) and phi (the schedule) in one module, saved as one folder."""

    def __init__(self, predictor: torch.nn.Module, schedule: Schedule) -> None:
        super().__init__()
        self.predictor, self.schedule = predictor, schedule
        self.config = predictor.config  # the predictor's (model_type, sizes): what loaders and reports read

    def save_pretrained(self, folder: str | Path, **_: Any) -> None:
        self.predictor.save_pretrained(folder)
        torch.save({"state": self.schedule.state_dict(), "steps": self.schedule.steps, "std": self.schedule.std,
                    "lr_scale": self.schedule.lr_scale,
                    "knobs": [k for k, on in zip(KNOBS, self.schedule.learned.tolist()) if on]}, Path(folder) / "schedule.pt")


def guided_logits(model: CoGRPOModel, cond: torch.Tensor, canvas: torch.Tensor, cfg: torch.Tensor, null_id: int) -> torch.Tensor:
    """``[n, 64, V]``: conditional logits, with CFG u + (1 + w)(c - u) on the rows whose scale w > 0."""
    c = predictor_logits(model.predictor, cond, canvas)
    if not bool((cfg > 0).any()):
        return c
    u = predictor_logits(model.predictor, torch.full_like(cond, null_id), canvas)
    allowed = torch.isfinite(c)  # the colours; the other ids are -inf in both branches
    c0, u0 = c.masked_fill(~allowed, 0.0), u.masked_fill(~allowed, 0.0)
    w = cfg[:, None, None]
    return torch.where(w > 0, u0 + (1 + w) * (c0 - u0), c0).masked_fill(~allowed, float("-inf"))


@dataclass
class ImageTrajectory:
    """canvas [B, 64]; commit_step [B, 64]; actions z [B, K, 4]; token_logp [B, K]; schedule_logp [B, K]."""

    canvas: torch.Tensor
    commit_step: torch.Tensor
    actions: torch.Tensor
    token_logp: torch.Tensor
    schedule_logp: torch.Tensor


@torch.no_grad()
def sample_images(model: CoGRPOModel, cond: torch.Tensor, tok: PaletteTokenizer, generator: Optional[torch.Generator],
                  *, stochastic: bool = True, greedy: bool = False) -> ImageTrajectory:
    """K MaskGIT steps under sampled schedule actions (``greedy``: mean schedule, argmax tokens, no remask noise)."""
    b, n, steps = cond.shape[0], SIDE * SIDE, model.schedule.steps
    device = cond.device
    x = torch.full((b, n), tok.mask_id, dtype=torch.long, device=device)
    commit = torch.full((b, n), -1, dtype=torch.long, device=device)
    z = model.schedule.sample(b, generator, stochastic and not greedy)
    token_lp = torch.zeros(b, steps, device=device)
    for k in range(steps):
        v = Schedule.values(z[:, k])
        logits = guided_logits(model, cond, x, v["cfg"], tok.null_id) / v["temperature"][:, None, None]
        logp = torch.log_softmax(logits, -1)
        sampled = gumbel_argmax(logp, 0.0 if greedy else 1.0, generator)
        chosen_lp = logp.gather(-1, sampled[..., None]).squeeze(-1)
        masked = x == tok.mask_id
        conf = chosen_lp.double()
        if not greedy:
            u = torch.rand(conf.shape, dtype=torch.float64, device=device, generator=generator).clamp(min=1e-300)
            conf = conf + (v["remask_temperature"] * (1 - k / steps))[:, None].double() * -torch.log(-torch.log(u))
        conf = torch.where(masked, conf, torch.full_like(conf, float("-inf")))
        count = masked.sum(-1)
        stay = torch.zeros_like(count) if k == steps - 1 else torch.floor(v["remask_ratio"] * count).long()
        n_commit = torch.minimum((count - stay).clamp(min=1), count)
        chosen = commit_top(conf, n_commit)
        token_lp[:, k] = (chosen_lp * chosen).sum(-1)
        x = torch.where(chosen, sampled, x)
        commit[chosen] = k
    return ImageTrajectory(x, commit, z, token_lp, model.schedule.log_prob(z))


def step_unit_logp(model: CoGRPOModel, cond: torch.Tensor, canvas: torch.Tensor, commit: torch.Tensor, z: torch.Tensor,
                   tok: PaletteTokenizer, stochastic_schedule: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(``logp [b, 64]``, unit mask ``[b, 64]``): token units 0..K-1, schedule units K..2K-1 (when the schedule is stochastic)."""
    b, n = canvas.shape
    steps = z.shape[1]
    k = torch.arange(steps, device=canvas.device)
    states = torch.where(commit[:, None, :] < k[None, :, None], canvas[:, None, :], torch.full_like(canvas[:, None, :], tok.mask_id))
    v = Schedule.values(z.reshape(b * steps, -1))
    logits = guided_logits(model, cond.repeat_interleave(steps), states.reshape(b * steps, n), v["cfg"], tok.null_id)
    logp = torch.log_softmax(logits / v["temperature"][:, None, None], -1)
    lp = logp.gather(-1, canvas.repeat_interleave(steps, 0)[..., None]).squeeze(-1).view(b, steps, n)
    committed = commit[:, None, :] == k[None, :, None]
    parts = [(lp * committed).sum(-1)]  # [b, K] token units
    if stochastic_schedule:
        parts.append(model.schedule.log_prob(z))  # [b, K] schedule units
    units = torch.cat(parts, dim=1)
    out = torch.cat([units, units.new_zeros(b, n - units.shape[1])], dim=1)
    mask = torch.zeros(b, n, dtype=torch.long, device=canvas.device)
    mask[:, : units.shape[1]] = 1
    return out, mask
