"""Token log-probs and entropies straight from hidden states, the ``[N, V]`` logits never stored.

The LM head of a 135M model over a 49k vocabulary is the largest activation of the learner:
``[B, T, V]`` logits, their log-softmax and their gradient are each ``B·T·V`` floats (201 MB
at B = 16, T = 64). :func:`head_logprobs` runs the head over row chunks inside one autograd
function that keeps only the hidden states and three numbers per token (log-prob, log-sum-exp,
entropy); the backward pass recomputes each chunk's logits and applies the closed-form
gradients (StreamBP's treatment of the LM head, arXiv 2506.03077 §3)::

    z = h W^T / tau,  p = softmax(z),  logp_y = z_y - lse(z),  H = lse(z) - sum_v p_v z_v
    d logp_y / dz = onehot(y) - p
    d H / dz      = -p * (log p + H)
    dL/dh = (dL/dz / tau) W,   dL/dW = (dL/dz / tau)^T h

Only the rows passed in are computed, so callers pass the real (unpadded) completion tokens:
padding never reaches the head (padding-free packing for the head). Both passes walk the
vocabulary in slices of :data:`VOCAB_SLICE` rows, each copied once into oneDNN's packed layout
(:mod:`grpokit.model.packed_linear`), so the largest temporaries are a 27 MB packed slice and
``[chunk, slice]`` logit blocks; the forward combines the slices with an online log-sum-exp.

Devices: the same code runs on any device. Packing is oneDNN's and happens only for fp32 weights
on the CPU; elsewhere (CUDA, bf16) a slice is a view of the weight and the products are plain
``F.linear``, so on a GPU this is hidden states + the head in vocabulary slices with stock torch
ops, keeping the memory saving. Logits and the running statistics are float32 whatever the
model's dtype (as the transformers logits path's ``.float()``; float64 stays float64), and the
loops never synchronise with the host: the target's logit is a gather masked by whether the target
falls in the slice (the values are bit-identical to indexing the hit rows).
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.model.grad_sinks import head_grad_in_place
from grpokit.model.packed_linear import PackedLinear


VOCAB_SLICE = 12288  # rows of the head packed at a time: 27 MB at H = 576 instead of a 108 MB copy


def _slices(vocab: int, size: int) -> list[tuple[int, int]]:
    return [(v, min(v + size, vocab)) for v in range(0, vocab, size)]


def _accumulation_dtype(hidden: torch.Tensor) -> torch.dtype:
    """float32 for fp32 / bf16 / fp16 models (float64 stays float64): the dtype of logits and statistics."""
    return torch.promote_types(hidden.dtype, torch.float32)


def _in_slice(targets: torch.Tensor, v0: int, v1: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(whether each target is in vocabulary rows [v0, v1) ``[N]``, its column there, clamped into range ``[N]``)."""
    return (targets >= v0) & (targets < v1), (targets - v0).clamp(0, v1 - v0 - 1)


class _HeadLogprob(torch.autograd.Function):
    """Both passes loop over vocabulary slices (outer; each packed once) and row chunks (inner).

    Forward: an online log-sum-exp over the slices, per row: running max m, s = sum e^(z-m),
    t = sum e^(z-m) z; then lse = m + log s and H = lse - t / s (FlashAttention's rescaling).
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_temp: float, chunk: int, want_entropy: bool):  # noqa: D401
        n, acc = hidden.shape[0], _accumulation_dtype(hidden)
        run_max = hidden.new_full((n,), float("-inf"), dtype=acc)
        run_sum = run_max.new_zeros(n)
        run_dot = run_max.new_zeros(n)
        target_logit = run_max.new_zeros(n)
        for v0, v1 in _slices(weight.shape[0], VOCAB_SLICE):
            head = PackedLinear(weight[v0:v1], None, chunk)  # oneDNN's layout: ~2x MKL's rate for [c, H] x [H, V] on CPU
            inside, local = _in_slice(targets, v0, v1)
            for s in range(0, n, chunk):
                e = min(s + chunk, n)
                z = head(hidden[s:e]).to(acc).mul_(inv_temp)  # [c, v1 - v0]; .to is a no-op in fp32
                picked = z.gather(1, local[s:e, None]).squeeze(1)
                target_logit[s:e] = torch.where(inside[s:e], picked, target_logit[s:e])
                new_max = torch.maximum(run_max[s:e], z.amax(-1))
                rescale = (run_max[s:e] - new_max).exp_()
                p = (z - new_max[:, None]).exp_()
                run_sum[s:e] = run_sum[s:e] * rescale + p.sum(-1)
                if want_entropy:
                    run_dot[s:e] = run_dot[s:e] * rescale + (p * z).sum(-1)
                run_max[s:e] = new_max
        lse = run_max + run_sum.log()
        logp = target_logit - lse
        ent = (lse - run_dot / run_sum) if want_entropy else run_sum.new_zeros(n)
        ctx.save_for_backward(hidden, weight, targets, lse, ent)
        ctx.inv_temp, ctx.chunk = inv_temp, chunk
        ctx.set_materialize_grads(False)  # an unused output (the entropy metric) gets None, not zeros
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        hidden, weight, targets, lse, ent = ctx.saved_tensors
        inv_temp, chunk = ctx.inv_temp, ctx.chunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.zeros_like(hidden) if need_h else None
        in_place = need_w and head_grad_in_place(weight)  # add into weight.grad, return None (grad_sinks)
        grad_w = (weight.grad if in_place else torch.zeros_like(weight)) if need_w else None
        n, acc = hidden.shape[0], _accumulation_dtype(hidden)
        g_all = g_logp[:, None] if g_logp is not None else lse.new_zeros(n, 1)
        for v0, v1 in _slices(weight.shape[0], VOCAB_SLICE):
            w_slice = weight[v0:v1]
            head = PackedLinear(w_slice, None, chunk)  # packed again rather than kept from the forward
            inside, local = _in_slice(targets, v0, v1)
            for s in range(0, n, chunk):
                e = min(s + chunk, n)
                h = hidden[s:e]
                z = head(h).to(acc).mul_(inv_temp)  # [c, v1 - v0]; at most two such blocks live below
                g = g_all[s:e]
                scale = None
                if g_ent is not None:  # dH/dz = -p (log p + H): fold into one factor with the logp term
                    scale = (z - lse[s:e, None]).add_(ent[s:e, None]).mul_(g_ent[s:e, None]).add_(g)
                gz = z.sub_(lse[s:e, None]).exp_()  # p, in place
                gz.mul_(scale if scale is not None else g).neg_()  # -p * (g_logp [+ (log p + H) g_ent])
                del scale
                gz.scatter_add_(1, local[s:e, None], g * inside[s:e, None])  # + onehot(y) g_logp, y in this slice
                gz = gz.mul_(inv_temp).to(weight.dtype)  # no-op in fp32
                if need_h:
                    grad_h[s:e].addmm_(gz, w_slice)
                if need_w:
                    grad_w[v0:v1].addmm_(gz.t(), h)
        return grad_h, (None if in_place else grad_w), None, None, None, None


def head_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    chunk: int = 128,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log softmax(h W^T / tau)[target] ``[N]`` and (optionally) the entropy ``[N]``.

    hidden: [N, H] final hidden states (after the model's last norm); weight: [V, H] the LM head;
    targets: [N] token ids. The entropy carries gradient only with ``entropy_grad`` (an entropy
    bonus); otherwise it is a detached metric. Peak extra memory: a few ``[chunk, V]`` blocks.
    """
    logp, ent = _HeadLogprob.apply(hidden, weight, targets, 1.0 / temperature, chunk, with_entropy or entropy_grad)
    if not (with_entropy or entropy_grad):
        return logp, None
    return logp, (ent if entropy_grad else ent.detach())
