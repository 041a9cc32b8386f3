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
padding never reaches the head (padding-free packing for the head).
"""

from __future__ import annotations

from typing import Optional

import torch

from grpokit.model.grad_sinks import head_grad_in_place
from grpokit.model.packed_linear import PackedLinear


class _HeadLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_temp: float, chunk: int, want_entropy: bool):  # noqa: D401
        n = hidden.shape[0]
        logp = hidden.new_empty(n)
        lse = hidden.new_empty(n)
        ent = hidden.new_zeros(n)
        head = PackedLinear(weight, None, chunk)  # oneDNN's layout: ~2x MKL's rate for [c, H] x [H, V] on CPU
        for s in range(0, n, chunk):
            z = head(hidden[s : s + chunk]).mul_(inv_temp)  # [c, V]
            l = torch.logsumexp(z, dim=-1)
            lse[s : s + chunk] = l
            logp[s : s + chunk] = z.gather(-1, targets[s : s + chunk, None]).squeeze(-1) - l
            if want_entropy:
                ent[s : s + chunk] = l - (torch.softmax(z, dim=-1) * z).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse, ent)
        ctx.inv_temp, ctx.chunk = inv_temp, chunk
        ctx.set_materialize_grads(False)  # an unused output (the entropy metric) gets None, not zeros
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        hidden, weight, targets, lse, ent = ctx.saved_tensors
        inv_temp, chunk = ctx.inv_temp, ctx.chunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        in_place = need_w and head_grad_in_place(weight)  # add into weight.grad, return None (grad_sinks)
        grad_w = (weight.grad if in_place else torch.zeros_like(weight)) if need_w else None
        head = PackedLinear(weight, None, chunk)  # packed again rather than kept: 113 MB for a 49k x 576 head
        for s in range(0, hidden.shape[0], chunk):
            h, e = hidden[s : s + chunk], min(s + chunk, hidden.shape[0])
            z = head(h).mul_(inv_temp)  # [c, V]; at most two such blocks live below
            g = g_logp[s:e, None] if g_logp is not None else torch.zeros_like(lse[s:e, None])
            scale = None
            if g_ent is not None:  # dH/dz = -p (log p + H): fold into one factor with the logp term
                scale = (z - lse[s:e, None]).add_(ent[s:e, None]).mul_(g_ent[s:e, None]).add_(g)
            gz = z.sub_(lse[s:e, None]).exp_()  # p, in place
            gz.mul_(scale if scale is not None else g).neg_()  # -p * (g_logp [+ (log p + H) g_ent])
            del scale
            gz.scatter_add_(-1, targets[s:e, None], g)  # + onehot(y) * g_logp
            gz.mul_(inv_temp)
            if need_h:
                grad_h[s:e] = gz @ weight
            if need_w:
                grad_w.addmm_(gz.t(), h)
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
