"""StreamBP's layer scheme: each decoder layer checkpointed at its input, its backward streamed by sequence chunks.

"StreamBP: Memory-Efficient Exact Backpropagation for Long Sequence Training of LLMs" (Luo et al.,
arXiv 2506.03077, Sec. 3). For a layer ``Z_out = f_W(Z_in)`` whose output rows are split into
chunks ``Z_out^(1..D)`` along the sequence,

    dL/dW    = sum_j (dZ_out^(j) / dW)^T    dL/dZ_out^(j)
    dL/dZ_in = sum_j (dZ_out^(j) / dZ_in)^T dL/dZ_out^(j)

so each term can be computed, accumulated and its intermediates freed before the next. In a causal
layer the output rows ``[s, e)`` depend on the input rows ``[0, e)`` only: the queries of rows
``s:e`` and the keys/values of rows ``0:e``; norms, the residual and the MLP are position-wise.

Inside :func:`streamed_layers` every decoder layer runs as :class:`_StreamedLayer`:

* forward (no graph): every row's keys/values, then the layer chunk by chunk (so no
  ``[T, T]`` attention scores exist where attention is not fused, e.g. SDPA with a mask on CPU);
  only its input ``[B, T, d]`` is kept (the layer-boundary hidden state, as checkpointing keeps);
* backward, given ``G = dL/dZ_out`` ``[B, T, d]``: the keys/values of every row are computed once
  without a graph (the layer runs up to its cache write, then stops); then the chunks, last to
  first: rows ``s:e`` are recomputed with a graph, their queries attending to the earlier rows'
  keys/values as grad-requiring leaves, and back-propagated from
  ``<G[s:e], out> + <dK[s:e], K_chunk> + <dV[s:e], V_chunk>``, where ``dK, dV`` are what the
  later chunks (already done) sent to these rows' keys/values. The leaves' gradients are added
  to the earlier rows' ``dK, dV``. Parameter gradients accumulate in ``.grad``; the layer's input
  gradient is assembled row block by row block.

One layer's attention / MLP internals exist for ``chunk`` rows at a time, plus that layer's
keys/values and their gradient ``[B, kv_heads, T, d_head]`` (freed when the layer is done):
per layer ``O(B·chunk·d + B·T·d_kv)`` instead of checkpointing's ``O(B·T·d_ff)`` recompute. The
LM head is streamed the same way by :mod:`grpokit.model.chunked_head` (``[chunk, V]`` logits).
Exact up to float summation order (tested to 1e-5 against a plain backward). A shared prompt's
keys/values (the ``PrefixCache`` of the completion forward) are inputs of every layer's
function, so their gradients flow back to the prompt forward as before.

Supported: decoder layers that write keys/values through ``cache.update`` and take a tensor
attention mask (or none) with eager or SDPA attention; no dropout in training mode (a chunked
recompute cannot replay its masks).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch
from transformers import DynamicCache

from grpokit.model.checkpointing import decoder_layers, wrapped_forwards

FIELD = "train.streambp=layer"


class _KeysValuesWritten(Exception):
    """Raised by a capturing cache at the layer's cache write: the rest of the layer is not needed."""


class _ChunkCache(DynamicCache):
    """One layer's view: ``update`` records the new keys/values and returns ``[prefix; new]`` (or stops the layer)."""

    def __init__(self, keys: Optional[torch.Tensor], values: Optional[torch.Tensor], *, record: bool = True, stop: bool = False) -> None:
        super().__init__()
        self.prefix, self.record, self.stop, self.new = (keys, values), record, stop, None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        if self.record:
            self.new = (key_states, value_states)
        if self.stop:
            raise _KeysValuesWritten
        pk, pv = self.prefix
        if pk is None:
            return key_states, value_states
        return torch.cat([pk, key_states], dim=-2), torch.cat([pv, value_states], dim=-2)


def _cache_key(kwargs: dict) -> str:
    return "past_key_values" if "past_key_values" in kwargs else "cache"  # transformers renamed it to ``cache``


def _chunk_mask(mask: Optional[torch.Tensor], q: int, s: int, e: int, prefix: int, like: torch.Tensor, implementation: str):
    """The attention mask of query rows ``[s, e)`` of ``q`` against keys ``[0, prefix + e)``."""
    if mask is not None:
        offset = mask.shape[-1] - q  # the mask's own key offset (the prefix, or more for a padded mask)
        return mask[..., s:e, : offset + e]
    offset = prefix  # no mask: no padding, plain causal over [prefix; rows]
    allowed = torch.ones(e - s, offset + e, dtype=torch.bool, device=like.device).tril(offset + s)[None, None]
    if implementation == "eager":  # eager adds the mask to the scores
        return torch.zeros(allowed.shape, dtype=like.dtype, device=like.device).masked_fill(~allowed, torch.finfo(like.dtype).min)
    return allowed


class _Call:
    """One layer call: its forward, keyword arguments, prompt prefix and chunk length (constants of the function)."""

    def __init__(self, forward: Callable, kwargs: dict, chunk: int, implementation: str) -> None:
        self.forward, self.kwargs, self.chunk, self.implementation = forward, kwargs, chunk, implementation
        self.cache_key = _cache_key(kwargs)
        self.prompt_cache = kwargs.get(self.cache_key)

    def run(self, hidden: torch.Tensor, cache: _ChunkCache, s: int, e: int, q: int, prefix: int):
        """The layer on rows ``[s, e)`` of ``q`` (``hidden`` holds those rows), keys/values through ``cache``."""
        kw = dict(self.kwargs)
        kw[self.cache_key] = cache
        if s != 0 or e != q:
            cos, sin = kw["position_embeddings"]
            kw["position_embeddings"] = (cos[:, s:e], sin[:, s:e])
            if kw.get("position_ids") is not None:
                kw["position_ids"] = kw["position_ids"][:, s:e]
            kw["attention_mask"] = _chunk_mask(kw.get("attention_mask"), q, s, e, prefix, hidden, self.implementation)
        return self.forward(hidden, **kw)


def _keys_values(call: _Call, hidden: torch.Tensor, pk, pv) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row's keys/values ``[B, kv, q, d_head]``, no graph: the layer runs up to its cache write, then stops."""
    q, p = hidden.shape[1], 0 if pk is None else pk.shape[-2]
    capture = _ChunkCache(pk, pv, stop=True)
    with torch.no_grad():
        try:
            call.run(hidden, capture, 0, q, q, p)
        except _KeysValuesWritten:
            pass
    if capture.new is None:
        raise ValueError(f"{FIELD} needs decoder layers that write keys/values through the cache: set train.streambp=cache")
    return capture.new


def _prefix(pk, pv, keys: torch.Tensor, values: torch.Tensor, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys/values that rows ``s:`` attend to before their own: the prompt's, then rows ``0:s``."""
    if pk is None:
        return keys[:, :, :s], values[:, :, :s]
    return torch.cat([pk.detach(), keys[:, :, :s]], dim=-2), torch.cat([pv.detach(), values[:, :, :s]], dim=-2)


class _StreamedLayer(torch.autograd.Function):
    """Forward: the layer without a graph, keeping its input. Backward: recomputed and back-propagated chunk by chunk."""

    @staticmethod
    def forward(ctx, call: _Call, hidden, prompt_k, prompt_v, _grad_anchor):  # noqa: D401
        ctx.call = call
        ctx.save_for_backward(hidden, prompt_k, prompt_v)
        q = hidden.shape[1]
        if q <= call.chunk:
            return call.forward(hidden, **call.kwargs)
        p = 0 if prompt_k is None else prompt_k.shape[-2]
        keys, values = _keys_values(call, hidden, prompt_k, prompt_v)  # then the rows chunk by chunk, as in the backward:
        out = torch.empty_like(hidden)  # no [B, heads, T, T] attention scores even where attention is not fused
        for s in range(0, q, call.chunk):
            e = min(s + call.chunk, q)
            cache = _ChunkCache(*_prefix(prompt_k, prompt_v, keys, values, s), record=False)
            out[:, s:e] = call.run(hidden[:, s:e], cache, s, e, q, p)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        call = ctx.call
        hidden, pk, pv = ctx.saved_tensors
        q = hidden.shape[1]
        need_x, need_prompt = ctx.needs_input_grad[1], ctx.needs_input_grad[2] or ctx.needs_input_grad[3]
        p = 0 if pk is None else pk.shape[-2]
        keys, values = _keys_values(call, hidden, pk, pv)
        d_keys, d_values = torch.zeros_like(keys), torch.zeros_like(values)
        grad_x = torch.zeros_like(hidden) if need_x else None
        d_pk = torch.zeros_like(pk) if need_prompt else None
        d_pv = torch.zeros_like(pv) if need_prompt else None
        for s in reversed(range(0, q, call.chunk)):
            e = min(s + call.chunk, q)
            x = hidden[:, s:e].detach().requires_grad_(need_x)
            prefix_k, prefix_v = (t.detach().requires_grad_() for t in _prefix(pk, pv, keys, values, s))
            cache = _ChunkCache(prefix_k, prefix_v)
            with torch.enable_grad():
                out = call.run(x, cache, s, e, q, p)
            own_k, own_v = cache.new
            pairs = [(out, grad_out[:, s:e]), (own_k, d_keys[:, :, s:e]), (own_v, d_values[:, :, s:e])]
            pairs = [(o, g) for o, g in pairs if o.requires_grad]
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            if need_x and x.grad is not None:
                grad_x[:, s:e] = x.grad
            for leaf, d_rows, d_prompt in ((prefix_k, d_keys, d_pk), (prefix_v, d_values, d_pv)):
                if leaf.grad is None:
                    continue
                d_rows[:, :, :s] += leaf.grad[:, :, p:]
                if d_prompt is not None:
                    d_prompt += leaf.grad[:, :, :p]
            del out, own_k, own_v, cache, prefix_k, prefix_v, pairs, x
        return None, grad_x, d_pk, d_pv, None


def _refusal(layer: torch.nn.Module, kwargs: dict, implementation: str) -> Optional[str]:
    if implementation not in ("eager", "sdpa"):
        return f"{FIELD} slices attention masks for eager / SDPA attention, not '{implementation}': load the model with sdpa or set train.streambp=cache"
    mask = kwargs.get("attention_mask")
    if mask is not None and not isinstance(mask, torch.Tensor):
        return f"{FIELD} needs a tensor attention mask, this model passes {type(mask).__name__}: set train.streambp=cache"
    if "position_embeddings" not in kwargs:
        return f"{FIELD} needs decoder layers that take rotary position_embeddings ({type(layer).__name__} does not): set train.streambp=cache"
    dropout = [m.p for m in layer.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    attention_dropout = getattr(getattr(layer, "self_attn", None), "attention_dropout", 0.0) or 0.0
    if layer.training and (dropout or attention_dropout > 0):
        return f"{FIELD} recomputes layers chunk by chunk and cannot replay dropout masks: use a model without dropout or set train.streambp=cache"
    return None


@contextmanager
def streamed_layers(decoder: torch.nn.Module, chunk: int) -> Iterator[None]:
    """Within the block every decoder layer (when grad is on) runs as :class:`_StreamedLayer` with ``chunk`` rows."""
    if chunk <= 0:
        raise ValueError(f"{FIELD} streams by train.sequence_chunk rows: set train.sequence_chunk > 0")
    layers = decoder_layers(decoder)
    implementation = getattr(decoder.config, "_attn_implementation", None) or "eager"
    def wrap(index: int, layer: torch.nn.Module, forward: Callable) -> Callable:
        def run(*args: Any, **kwargs: Any):
            if not torch.is_grad_enabled():
                return forward(*args, **kwargs)
            hidden = args[0] if args else kwargs.pop("hidden_states")
            problem = _refusal(layer, kwargs, implementation)
            if problem:
                raise ValueError(problem)
            call = _Call(forward, kwargs, chunk, implementation)
            prompt = call.prompt_cache
            pk = pv = None
            if prompt is not None and len(getattr(prompt, "layers", ())) > index and prompt.layers[index].keys is not None:
                pk, pv = prompt.layers[index].keys, prompt.layers[index].values  # the shared prompt's [B, kv, P, d_head]
                call.kwargs[call.cache_key] = _ChunkCache(pk, pv, record=False)  # read-only in the forward too
            trainable = [w for w in layer.parameters() if w.requires_grad]
            anchor = trainable[0] if trainable else None  # the output needs a graph even when no input has one (LoRA)
            return _StreamedLayer.apply(call, hidden, pk, pv, anchor)

        return run

    with wrapped_forwards(layers, wrap):
        yield
