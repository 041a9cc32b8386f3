"""Per-token KL estimators between the policy and a frozen reference, each ``[B, T]``.

Schulman's estimators ("Approximating KL Divergence", 2020) of KL(pi_theta || pi_ref) from
tokens sampled by the policy, with ``d = ref_logp - logp``:
k1 = -d, k2 = d^2 / 2, k3 = exp(d) - d - 1 (>= 0, unbiased). ``clamp=True`` reproduces verl's
``low_var_kl``: d clamped to [-20, 20] and k3 to [-10, 10].
"""

from __future__ import annotations

import torch

from grpokit.registry import Registry

KL_ESTIMATORS = Registry("kl", context=("clamp",))


def _log_diff(logp: torch.Tensor, ref_logp: torch.Tensor, clamp: bool) -> torch.Tensor:
    d = ref_logp - logp
    return d.clamp(-20.0, 20.0) if clamp else d


@KL_ESTIMATORS.register("k1", inputs=("ref_logp",))
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor, *, clamp: bool = False) -> torch.Tensor:
    """k1 = logp - ref_logp (unbiased, high variance, can be negative)."""
    return -_log_diff(logp, ref_logp, clamp)


@KL_ESTIMATORS.register("k2", inputs=("ref_logp",))
def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor, *, clamp: bool = False) -> torch.Tensor:
    """k2 = (logp - ref_logp)^2 / 2 (biased, low variance, >= 0)."""
    return 0.5 * _log_diff(logp, ref_logp, clamp) ** 2


@KL_ESTIMATORS.register("k3", inputs=("ref_logp",))
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, *, clamp: bool = False) -> torch.Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1 (unbiased, >= 0; GRPO's KL term)."""
    d = _log_diff(logp, ref_logp, clamp)
    k3 = torch.exp(d) - d - 1
    return k3.clamp(-10.0, 10.0) if clamp else k3


@KL_ESTIMATORS.register("none")
def kl_none(logp: torch.Tensor, ref_logp: torch.Tensor | None = None) -> torch.Tensor:
    """No KL term (zeros); no reference model is loaded for it."""
    return torch.zeros_like(logp)
