"""Flow-GRPO's ODE->SDE sampler: one reverse SDE step is a Gaussian policy, its per-element-mean log-density.

Rectified-flow notation (Liu et al.; Flow-GRPO, Liu et al., "Flow-GRPO: Training Flow Matching
Models via Online RL", arXiv 2505.05470, §4.1): ``x_σ = (1 − σ)·x0 + σ·ε``, σ = 1 is noise, σ = 0
is data, the network predicts the velocity ``v = ε − x0``. The schedule σ_0 = 1 > … > σ_K = 0 is
diffusers' ``FlowMatchEulerDiscreteScheduler`` (optionally shifted). With Δ_k = σ_k − σ_{k+1} > 0
and diffusion coefficient g(σ) = a·√(σ/(1 − σ)) (a = ``noise_level``, the paper's 0.7), the
Euler–Maruyama step of the marginal-preserving reverse SDE is Gaussian::

    μ_θ = x_k − Δ_k·[ v_θ + g²/(2σ_k)·(x_k + (1 − σ_k)·v_θ) ],   s_k = g(σ_k)·√Δ_k
    π_θ(x_{k+1} | x_k, c) = N(μ_θ, s_k² I)

At σ_k = 1 the denominator 1 − σ uses the schedule's second sigma σ_1 instead, as the authors'
``sde_step_with_logprob`` does (otherwise g is infinite). The log-prob of a step is the **mean
over the D elements** of the Gaussian log-density (the authors' code; not the sum), so the
ratio is a per-element geometric mean and Flow-GRPO's clip range 1e-4 is tuned for it. All in
float32. ``noise_level = 0`` is the deterministic ODE (Euler) step: std 0, no log-prob.
Shapes: x ``[B, *S]`` (S = C, H, W), per-row statistics ``[B]``.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def flow_sigmas(num_steps: int, shift: float = 1.0) -> torch.Tensor:
    """``[K + 1]`` σ schedule of diffusers' ``FlowMatchEulerDiscreteScheduler`` (1 → σ_min, then 0), float32 on CPU.

    The scheduler maps a linspace through the shift s·σ / (1 + (s − 1)·σ) and appends 0; its model
    timestep is 1000·σ. Steps are identified by index, never by float timestep (diffusers'
    ``index_for_timestep`` matches floats exactly).
    """
    if num_steps < 1:
        raise ValueError(f"flow: the number of denoising steps must be >= 1, got {num_steps}")
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    scheduler.set_timesteps(num_steps, device="cpu")
    return scheduler.sigmas.to(torch.float32).clone()


def diffusion_coefficient(sigma: torch.Tensor, noise_level: float, sigma_second: float) -> torch.Tensor:
    """g(σ) = a·√(σ / (1 − σ)), with σ_1 (``sigma_second``) replacing σ in 1 − σ where σ = 1 (Flow-GRPO's code)."""
    denom = 1 - torch.where(sigma >= 1.0, torch.full_like(sigma, sigma_second), sigma)
    return noise_level * torch.sqrt(sigma / denom)


def sde_step_stats(x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: float,
                   sigma_second: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean μ ``[B, *S]``, std s ``[B]``) of the SDE step x_k → x_{k+1}; sigma, sigma_next: ``[B]``.

    μ = x − Δ·[v + g²/(2σ)·(x + (1 − σ)·v)], s = g(σ)·√Δ; with ``noise_level`` 0 this is the Euler
    ODE step x − Δ·v with s = 0.
    """
    x, v = x.float(), v.float()
    shape = (-1,) + (1,) * (x.dim() - 1)
    s, s_next = sigma.float().view(shape), sigma_next.float().view(shape)
    delta = s - s_next
    g = diffusion_coefficient(s, noise_level, sigma_second)
    mean = x - delta * (v + g * g / (2 * s) * (x + (1 - s) * v))
    std = (g * torch.sqrt(delta)).view(-1)
    return mean, std


def step_logprob(x_next: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``[B]`` per-element mean of log N(x_next; mean, std² I): mean_D[−(x' − μ)²/(2s²)] − log s − ½ log 2π.

    Equal to ``Normal(mean, std).log_prob(x_next).sum() / D`` (the authors' per-element average).
    """
    x_next, mean = x_next.float(), mean.float()
    shape = (-1,) + (1,) * (mean.dim() - 1)
    s = std.float().view(shape)
    quad = -((x_next - mean) ** 2) / (2 * s * s)
    return quad.flatten(1).mean(-1) - torch.log(std.float()) - LOG_SQRT_2PI


def step_kl(mean_p: torch.Tensor, mean_q: torch.Tensor, std: torch.Tensor, *, convention: str = "exact",
            sigma_delta: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[B]`` KL(N(μ_p, s²I) ‖ N(μ_q, s²I)) of one step: equal variances, so closed form.

    ``exact``: ‖μ_p − μ_q‖² / (2 s²), summed over the D elements. ``flow_grpo``: the authors' code's
    convention, the mean over elements divided by 2 g² without the Δ factor (s² = g²·Δ), i.e. the
    exact KL scaled by Δ / D; it needs ``sigma_delta`` = Δ_k ``[B]``.
    """
    sq = ((mean_p.float() - mean_q.float()) ** 2).flatten(1)  # [B, D]
    var = std.float() ** 2
    if convention == "exact":
        return sq.sum(-1) / (2 * var)
    if convention == "flow_grpo":
        if sigma_delta is None:
            raise ValueError("step_kl(convention='flow_grpo') needs sigma_delta (Δ_k per row)")
        return sq.mean(-1) / (2 * var / sigma_delta.float())
    raise ValueError(f"step_kl: convention must be 'exact' or 'flow_grpo', got {convention!r}")


Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x [B, *S], sigma [B]) -> v [B, *S]


@torch.no_grad()
def sample_sde(velocity: Velocity, x0: torch.Tensor, sigmas: torch.Tensor, noise_level: float,
               generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the K steps from ``x0`` (noise at σ_0 = 1): (states ``[B, K + 1, *S]``, step log-probs ``[B, K]``).

    Each step draws x_{k+1} = μ + s·z, z ~ N(0, I) from ``generator`` (a float32 draw on x0's
    device), and records ℓ_k = :func:`step_logprob` of the drawn state. ``noise_level`` 0: the
    Euler ODE, log-probs 0 (undefined; such steps are never trained).
    """
    b, k = x0.shape[0], sigmas.shape[0] - 1
    states = x0.new_empty((b, k + 1) + tuple(x0.shape[1:]), dtype=torch.float32)
    logps = x0.new_zeros((b, k), dtype=torch.float32)
    sigmas = sigmas.to(x0.device)
    second = float(sigmas[1]) if k > 1 else 0.0
    x = x0.float()
    states[:, 0] = x
    for i in range(k):
        sig = sigmas[i].expand(b)
        mean, std = sde_step_stats(x, velocity(x, sig), sig, sigmas[i + 1].expand(b), noise_level, second)
        if noise_level > 0:
            z = torch.randn(x.shape, generator=generator, device=x.device, dtype=torch.float32)
            x = mean + std.view((-1,) + (1,) * (x.dim() - 1)) * z
            logps[:, i] = step_logprob(x, mean, std)
        else:
            x = mean
        states[:, i + 1] = x
    return states, logps


def trained_steps(num_steps: int, fraction: float, order: str, rows: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """``[rows, U]`` step indices to train, U = ⌊fraction·K⌋ (at least 1).

    ``first``: steps 0..U−1 in order for every row (Flow-GRPO: 9 of 10, the last step onto σ = 0
    never trained); ``random``: the first U of a fresh random permutation per row (DanceGRPO,
    Pref-GRPO: 60%). Host-side (CPU, from the CPU ``generator``, so a seed draws the same steps on
    every device); the caller moves them to the policy's device.
    """
    u = max(1, int(math.floor(fraction * num_steps + 1e-9)))
    if order == "first":
        return torch.arange(u, device="cpu").expand(rows, u).clone()
    if order == "random":
        if not rows:
            return torch.zeros(0, u, dtype=torch.long, device="cpu")
        return torch.stack([torch.randperm(num_steps, generator=generator, device="cpu")[:u] for _ in range(rows)])
    raise ValueError(f"flow.train_order must be 'first' or 'random', got {order!r}")
