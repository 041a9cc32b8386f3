"""A group's completions as one padding-free row after its shared prompt (the learner's forward).

The shared-prompt path (:func:`grpokit.model.logprobs.completion_logprobs`) encodes each prompt
once, but still runs the completions as ``[B, T]`` padded to the micro-batch's longest one: with
completions of 5-32 tokens under a 32-token cap, about half the completion positions the body
runs are padding. Here the completions of each group are concatenated into one row,

    row g = [o_1[:-1]; o_2[:-1]; ...; o_G[:-1]]   (real tokens only)

and attend, through a 4-D boolean mask, to the group's prompt keys/values and causally within
their own completion only. Each token keeps its position id (prompt length + its index in its
completion), so the hidden state of every real token is the one the padded path computes (the
same sums in another order: equal to ~1e-6 in float32, tested to 1e-5 with gradients), and the
body runs ``sum(L_b - 1)`` tokens instead of ``B (T - 1)``. This is Prefix Grouper's shared-prefix
forward (arXiv 2506.05433, Sec. 3) with padding-free packing of the suffixes (as TRL's
``padding_free``), for decoder-only text models whose attention takes a custom 4-D mask.

Measured on the dev machine (Intel Xeon, 2 threads, fp32, SmolLM2-135M, the efficacy study's
demo step: 32 rows of 5-32 tokens after a 47-token prompt): see ``docs/performance.md``.
"""

from __future__ import annotations

import torch

# decoder families whose attention takes a custom 4-D mask and 1-D rotary positions (tested: llama)
PACKABLE_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral", "mixtral", "phi3", "olmo", "olmo2", "granite"})


def can_pack(decoder: torch.nn.Module, total_len: int) -> bool:
    """Whether ``decoder`` computes the same hidden states from packed rows as from padded ones.

    Needs an attention that reads a custom 4-D mask (``sdpa`` or ``eager``; FlashAttention's
    varlen kernels take no mask), rotary positions from 1-D ``position_ids`` (not a VLM's
    multimodal rope) and no sliding window shorter than a whole sequence ``total_len`` =
    prompt + completion (the custom mask replaces the model's own window).
    """
    cfg = getattr(decoder, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in PACKABLE_MODEL_TYPES:
        return False
    if getattr(cfg, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    window = getattr(cfg, "sliding_window", None)
    sliding = window is not None and getattr(cfg, "use_sliding_window", True)
    return not (sliding and total_len > int(window))


def packed_width(completion_mask: torch.Tensor, inverse: torch.Tensor, n_groups: int) -> int:
    """S: the longest group's inputs, ``sum(L_b - 1)`` over its rows (at least 1); completion_mask: [B, T], inverse: [B]."""
    lengths = (completion_mask.sum(-1) - 1).clamp(min=0)  # [B] inputs per row
    totals = torch.zeros(n_groups, dtype=lengths.dtype, device=lengths.device).index_add_(0, inverse, lengths)
    return max(int(totals.max()) if n_groups else 0, 1)


def packed_layout(completion_mask: torch.Tensor, inverse: torch.Tensor, n_groups: int):
    """Where each completion's inputs go in its group's packed row.

    completion_mask: [B, T] right-padded (1 = real token); inverse: [B] group position of each row.
    A row of length L contributes its first L - 1 tokens as inputs (token t's input predicts
    token t + 1; token 0 is predicted by the prompt's last position).
    Returns (start [B] offset of the row's inputs in its packed row, width S of the packed rows,
    lengths [B] = max(L - 1, 0)).
    """
    lengths = (completion_mask.sum(-1) - 1).clamp(min=0)  # [B] inputs per row
    start = torch.zeros_like(lengths)
    for g in range(n_groups):  # n_groups is a handful per micro-batch
        rows = (inverse == g).nonzero(as_tuple=True)[0]
        if len(rows):
            start[rows] = torch.cumsum(lengths[rows], 0) - lengths[rows]
    return start, packed_width(completion_mask, inverse, n_groups), lengths


def pack_inputs(
    completion_ids: torch.Tensor, completion_mask: torch.Tensor, inverse: torch.Tensor, n_groups: int, prompt_len: torch.Tensor,
    prompt_mask: torch.Tensor, dtype: torch.dtype = torch.float32,
):
    """The packed rows' inputs: ``(input_ids [n, S], position_ids [n, S], mask [n, 1, S, P + S], flat [B, T-1])``.

    prompt_len: [n] real prompt tokens per group; prompt_mask: [n, P] (left-padded). ``flat`` maps
    row b's input t (predicting completion token t + 1) to its index in the flattened ``[n * S]``
    packed hidden states (0 where row b has no such input: padding, never read by the head).
    A padding query position attends to itself only, so no softmax row is empty.
    """
    b, t = completion_ids.shape
    start, width, lengths = packed_layout(completion_mask, inverse, n_groups)
    device = completion_ids.device
    cols = torch.arange(max(t - 1, 0), device=device)
    real = cols[None, :] < lengths[:, None]  # [B, T-1]
    rows, src = real.nonzero(as_tuple=True)
    dest = start[rows] + src  # column in the packed row
    input_ids = completion_ids.new_zeros(n_groups, width)
    input_ids[inverse[rows], dest] = completion_ids[rows, src]
    position_ids = torch.zeros(n_groups, width, dtype=torch.long, device=device)
    position_ids[inverse[rows], dest] = prompt_len[inverse[rows]] + src
    segment = torch.full((n_groups, width), -1, dtype=torch.long, device=device)  # which row's completion (-1: padding)
    segment[inverse[rows], dest] = rows
    offset = torch.zeros(n_groups, width, dtype=torch.long, device=device)
    offset[inverse[rows], dest] = src
    same = segment[:, :, None] == segment[:, None, :]  # [n, S, S]
    causal = offset[:, None, :] <= offset[:, :, None]
    own = same & causal & (segment[:, :, None] >= 0)
    own |= torch.eye(width, dtype=torch.bool, device=device)[None]  # padding queries see themselves
    to_prompt = prompt_mask.bool()[:, None, :].expand(n_groups, width, prompt_mask.shape[1]) & (segment >= 0)[:, :, None]
    allowed = torch.cat([to_prompt, own], dim=-1)[:, None]  # [n, 1, S, P + S]
    # additive float mask (0 = attend), read alike by SDPA and eager attention (eager adds a bool mask as 1.0)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)
    flat = torch.zeros(b, max(t - 1, 0), dtype=torch.long, device=device)
    flat[rows, src] = inverse[rows] * width + dest
    return input_ids, position_ids, mask, flat


def packed_completion_hidden(
    decoder: torch.nn.Module,
    cache,
    cache_kwarg: str,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    inverse: torch.Tensor,
    prompt_mask: torch.Tensor,
    layer_mode=None,
) -> torch.Tensor:
    """Hidden states ``[B, T-1, H]`` of each row's completion inputs, run as packed rows after ``cache``.

    cache: the groups' prompt KV cache, ``[n, heads, P, d]`` per layer (not expanded to B rows);
    prompt_mask: [n, P] the groups' prompt masks; inverse: [B] group of each row. Positions of a
    row past its length hold another token's state (never read: the head takes real tokens only).
    ``layer_mode``: a context manager for the body (activation checkpointing), or None.
    """
    from contextlib import nullcontext

    n = prompt_mask.shape[0]
    prompt_len = prompt_mask.sum(-1)
    dtype = decoder.get_input_embeddings().weight.dtype
    input_ids, position_ids, mask, flat = pack_inputs(completion_ids, completion_mask, inverse, n, prompt_len, prompt_mask, dtype)
    with layer_mode if layer_mode is not None else nullcontext():
        hidden = decoder(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=True, **{cache_kwarg: cache}
        ).last_hidden_state  # [n, S, H]
    return hidden.reshape(-1, hidden.shape[-1])[flat]  # [B, T-1, H]


def completions_contiguous(completion_mask: torch.Tensor) -> bool:
    """True when every row's mask is 1s then 0s (right padding), the layout packing assumes."""
    lengths = completion_mask.sum(-1, keepdim=True)
    cols = torch.arange(completion_mask.shape[1], device=completion_mask.device)
    return bool(((cols[None, :] < lengths) == completion_mask.bool()).all())


def packing_pays(decoder: torch.nn.Module, completion_mask: torch.Tensor, inverse: torch.Tensor, n_groups: int, prompt_width: int) -> bool:
    """Whether packed rows cost the body fewer FLOPs than padded rows (a per-layer estimate).

    A query position costs ``2 p`` for the layer's ``p`` weights plus ``4 H k`` for attention over
    ``k`` keys (scores and weighted sum). Padded: ``B (T - 1)`` queries over ``P + T`` keys; packed:
    ``n S`` queries over ``P + S`` keys (an attention with a custom mask computes every pair). So
    short completions in large groups pack (the demo step: ~2x fewer FLOPs), while a few long
    ones do not (8 x 1024 tokens in one row: attention over 8k keys would dominate).
    """
    b, t = completion_mask.shape
    width = packed_width(completion_mask, inverse, n_groups)  # the width only: the layout itself is built once, if packed
    cfg = decoder.config
    hidden = int(cfg.hidden_size)
    layers = getattr(decoder, "layers", None)
    per_layer = sum(p.numel() for p in layers[0].parameters()) if layers is not None and len(layers) else 12 * hidden * hidden
    cost = lambda queries, keys: queries * (2 * per_layer + 4 * hidden * keys)  # noqa: E731
    return cost(n_groups * width, prompt_width + width) < cost(b * max(t - 1, 0), prompt_width + t)
