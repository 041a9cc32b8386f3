"""Off-policy and sampler-mismatch corrections (placeholder; being written)."""

from __future__ import annotations

from grpokit.registry import Registry

CORRECTIONS = Registry("correction")


@CORRECTIONS.register("none")
def no_correction(old_logp, behaviour_logp, mask):
    """No correction: the batch is trained as if sampled by the proximal policy."""
    import torch

    return torch.ones_like(mask, dtype=old_logp.dtype), {}
