"""Activation checkpointing that keeps the shared prompt's KV cache (``train.activation_checkpointing``).

Checkpointing each decoder layer stores only its input (``H`` floats per token) and recomputes
the layer during the backward pass: about one extra forward (+1/3 learner FLOPs) for a
fraction of the activation memory. transformers' own switch (``gradient_checkpointing_enable``)
drops the KV cache inside checkpointed layers, because a layer that *writes* the cache would
write it a second time when it is recomputed — but the learner's shared-prompt path feeds the
completion forward exactly such a cache (the prompt's keys/values, encoded once per group).

Here the completion forward gets a :class:`PrefixCache`: its ``update`` returns
``[prefix; new]`` keys/values without storing anything, so a recomputed layer sees the same
prefix and produces the same tensors, and gradients still reach the prompt through the prefix.
Each decoder layer's ``forward`` is wrapped in non-reentrant ``torch.utils.checkpoint`` only
for the duration of :func:`checkpointed_layers`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache


class PrefixCache(DynamicCache):
    """A read-only KV prefix: ``update`` concatenates the new keys/values but never stores them."""

    @classmethod
    def of(cls, cache: DynamicCache) -> "PrefixCache":
        """The same per-layer keys/values (no copy) behind the read-only interface."""
        prefix = cls()
        prefix.layers = cache.layers
        return prefix

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        layer = self.layers[layer_idx]
        return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)


def decoder_layers(decoder: torch.nn.Module) -> torch.nn.ModuleList:
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(
            f"train.activation_checkpointing needs a decoder with a `.layers` list ({type(decoder).__name__} has none): "
            "set train.activation_checkpointing=false"
        )
    return layers


@contextmanager
def wrapped_forwards(layers: torch.nn.ModuleList, wrap: Callable[[int, torch.nn.Module, Callable], Callable]) -> Iterator[None]:
    """Within the block, layer ``i``'s forward is ``wrap(i, layer, its forward)``; afterwards each is as it was."""
    originals = [layer.forward for layer in layers]
    own = ["forward" in vars(layer) for layer in layers]  # e.g. an accelerate hook set an instance forward
    try:
        for i, (layer, forward) in enumerate(zip(layers, originals)):
            layer.forward = wrap(i, layer, forward)
        yield
    finally:
        for layer, forward, was_own in zip(layers, originals, own):
            if was_own:
                layer.forward = forward
            else:
                del layer.forward  # back to the class's forward


@contextmanager
def checkpointed_layers(decoder: torch.nn.Module) -> Iterator[None]:
    """Within the block, every decoder layer's forward runs under ``torch.utils.checkpoint`` (when grad is on)."""

    def wrap(index: int, layer: torch.nn.Module, forward: Callable) -> Callable:
        def run(*args, **kwargs):
            if not torch.is_grad_enabled():
                return forward(*args, **kwargs)
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)

        return run

    with wrapped_forwards(decoder_layers(decoder), wrap):
        yield
