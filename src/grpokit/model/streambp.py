"""Sequence-chunked exact backpropagation of the learner objective (StreamBP idea).

StreamBP (arXiv 2506.03077) observes that the gradient of a causal LM's loss decomposes over
sequence chunks: chunk ``j`` influences the loss only through its own tokens' log-probs and
through the keys/values that later chunks attend to. Here the learner runs in two phases:

1. **Forward, no grad** (:func:`streamed_forward`): the prompt, then the completion in chunks of
   ``chunk`` tokens with a growing KV cache. Returns log-probs / entropies ``[B, T]`` and the
   cache (keys and values of every layer, ``[B, kv_heads, P + T - 1, d]``), nothing else.
2. The objective is evaluated on those log-probs as leaves; its gradient ``g = dL/dlogp``
   ``[B, T]`` (and ``dL/dH`` for entropy terms) is taken, so any loss (token- or
   sequence-level: GSPO, DisCO, …) works unchanged.
3. **Backward by chunks, last to first** (:func:`streamed_backward`): chunk ``j`` is recomputed
   with grad, its past keys/values as leaves, and backpropagated from
   ``sum g·logp_j + <dK_j, K_j> + <dV_j, V_j>``, where ``dK_j, dV_j`` are the gradients that the
   later chunks (already done) sent to chunk ``j``'s keys/values. The gradients reaching the
   past leaves are added to the earlier chunks' ``dK, dV``. The prompt goes last, encoded once
   per group, its ``dK, dV`` summed over the group's rows.

Parameter gradients accumulate in ``.grad`` exactly as one full backward would (tested to
1e-5). Activation memory is one chunk's instead of the whole completion's; the price is the
KV cache and its gradient (``4 · layers · kv_heads · d`` floats per token, 46 KB for
SmolLM2-135M) and one extra no-grad forward (~+33% learner FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from grpokit.model.logprobs import (
    first_row_of_each_group,
    cache_kwarg,
    decoder_and_head,
    masked_head_logprobs,
    output_cache,
)


@dataclass
class StreamState:
    """What phase 1 keeps for phase 2: per-layer keys/values ``[B, kv, P + T - 1, d]`` and the layout."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    first: torch.Tensor  # [n] first row of each group
    inverse: torch.Tensor  # [B] group position of each row
    attention: torch.Tensor  # [B, P + T - 1]
    positions: torch.Tensor  # [B, T - 1] position ids of the completion inputs
    chunk: int


def _parts(model):
    parts = decoder_and_head(model)
    if parts is None:
        raise ValueError(
            "train.sequence_chunk needs a model whose LM head is a plain linear map (no LoRA on lm_head, "
            "no logit soft-capping): set train.sequence_chunk=0"
        )
    return parts


def _group_ids(group_ids: Optional[torch.Tensor], completion_ids: torch.Tensor) -> torch.Tensor:
    return group_ids if group_ids is not None else torch.arange(completion_ids.shape[0], device=completion_ids.device)


def _prompt_forward(decoder, prompt_ids, prompt_mask, first):
    p_ids, p_mask = prompt_ids[first], prompt_mask[first]
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)
    return decoder(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True)


def _head(hidden, weight, completion_ids, completion_mask, temperature, with_entropy, entropy_grad):
    return masked_head_logprobs(
        hidden, weight, completion_ids, completion_mask, temperature=temperature,
        with_entropy=with_entropy, entropy_grad=entropy_grad,
    )


@torch.no_grad()
def streamed_forward(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    group_ids: Optional[torch.Tensor] = None,
    chunk: int = 256,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor], StreamState]:
    """Phase 1: log-probs ``[B, T]`` (entropies ``[B, T]``) chunk by chunk, and the KV cache."""
    decoder, weight = _parts(model)
    t = completion_ids.shape[1]
    first, inverse = first_row_of_each_group(_group_ids(group_ids, completion_ids))
    out = _prompt_forward(decoder, prompt_ids, prompt_mask, first)
    first_hidden = out.last_hidden_state[inverse, -1:]  # [B, 1, H]
    logps, ents = [], []
    lp, ent = _head(first_hidden, weight, completion_ids[:, :1], completion_mask[:, :1], temperature, with_entropy, False)
    logps.append(lp)
    ents.append(ent)
    cache = output_cache(out)
    cache.reorder_cache(inverse)
    attention = torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, prompt_ids.shape[1] :]
    p, key = prompt_ids.shape[1], cache_kwarg(decoder)
    for s in range(0, t - 1, chunk):
        e = min(s + chunk, t - 1)
        hidden = decoder(
            input_ids=completion_ids[:, s:e], attention_mask=attention[:, : p + e], position_ids=positions[:, s:e],
            use_cache=True, **{key: cache},
        ).last_hidden_state
        lp, ent = _head(hidden, weight, completion_ids[:, s + 1 : e + 1], completion_mask[:, s + 1 : e + 1], temperature, with_entropy, False)
        logps.append(lp)
        ents.append(ent)
    state = StreamState(
        keys=[layer.keys for layer in cache.layers], values=[layer.values for layer in cache.layers],
        first=first, inverse=inverse, attention=attention, positions=positions, chunk=chunk,
    )
    entropy = torch.cat(ents, dim=1) if with_entropy else None
    return torch.cat(logps, dim=1), entropy, state


def _leaf_cache(decoder, keys, values, upto: int):
    """A fresh cache whose per-layer past keys/values ``[..., :upto, :]`` are grad-requiring leaves."""
    from transformers import DynamicCache

    cache = DynamicCache(config=decoder.config)
    leaves = []
    for layer, (k, v) in enumerate(zip(keys, values)):
        pk = k[:, :, :upto].detach().requires_grad_()
        pv = v[:, :, :upto].detach().requires_grad_()
        cache.update(pk, pv, layer)
        leaves.append((pk, pv))
    return cache, leaves


def streamed_backward(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    grad_logp: torch.Tensor,
    state: StreamState,
    *,
    grad_entropy: Optional[torch.Tensor] = None,
    temperature: float = 1.0,
) -> None:
    """Phase 3: accumulate ``d(sum grad_logp·logp + sum grad_entropy·H)/dθ`` into ``.grad``, chunk by chunk.

    grad_logp, grad_entropy: [B, T] gradients of the objective w.r.t. phase 1's outputs.
    """
    decoder, weight = _parts(model)
    b, t = completion_ids.shape
    p, key, chunk = prompt_ids.shape[1], cache_kwarg(decoder), state.chunk
    d_keys = [torch.zeros_like(k) for k in state.keys]  # [B, kv, P + T - 1, d]: grads sent by later chunks
    d_values = [torch.zeros_like(v) for v in state.values]
    want_ent = grad_entropy is not None
    for s in reversed(range(0, t - 1, chunk)):
        e = min(s + chunk, t - 1)
        cache, leaves = _leaf_cache(decoder, state.keys, state.values, p + s)
        hidden = decoder(
            input_ids=completion_ids[:, s:e], attention_mask=state.attention[:, : p + e],
            position_ids=state.positions[:, s:e], use_cache=True, **{key: cache},
        ).last_hidden_state
        tgt, msk = completion_ids[:, s + 1 : e + 1], completion_mask[:, s + 1 : e + 1]
        lp, ent = _head(hidden, weight, tgt, msk, temperature, want_ent, want_ent)
        outputs, grads = [lp], [grad_logp[:, s + 1 : e + 1]]
        if want_ent:
            outputs.append(ent)
            grads.append(grad_entropy[:, s + 1 : e + 1])
        for layer, dk, dv in zip(cache.layers, d_keys, d_values):  # this chunk's own keys/values
            outputs += [layer.keys[:, :, p + s : p + e], layer.values[:, :, p + s : p + e]]
            grads += [dk[:, :, p + s : p + e], dv[:, :, p + s : p + e]]
        torch.autograd.backward(outputs, grads)
        for (pk, pv), dk, dv in zip(leaves, d_keys, d_values):
            dk[:, :, : p + s] += pk.grad
            dv[:, :, : p + s] += pv.grad
        del cache, leaves, hidden, outputs
    # the prompt, once per group: its keys/values collect the gradients of all the group's rows
    out = _prompt_forward(decoder, prompt_ids, prompt_mask, state.first)
    n = len(state.first)
    lp, ent = _head(out.last_hidden_state[state.inverse, -1:], weight, completion_ids[:, :1], completion_mask[:, :1], temperature, want_ent, want_ent)
    outputs, grads = [lp], [grad_logp[:, :1]]
    if want_ent:
        outputs.append(ent)
        grads.append(grad_entropy[:, :1])
    cache = output_cache(out)
    for layer, dk, dv in zip(cache.layers, d_keys, d_values):
        outputs += [layer.keys, layer.values]
        grads += [
            dk.new_zeros((n,) + dk.shape[1:2] + (p,) + dk.shape[3:]).index_add_(0, state.inverse, dk[:, :, :p]),
            dv.new_zeros((n,) + dv.shape[1:2] + (p,) + dv.shape[3:]).index_add_(0, state.inverse, dv[:, :, :p]),
        ]
    torch.autograd.backward(outputs, grads)
