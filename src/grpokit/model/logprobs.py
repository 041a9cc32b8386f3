"""Per-token log-probs and entropies of completions under a causal LM.

Two paths with identical results (tested to 1e-5, values and gradients):

* ``completion_logprobs(..., share_prompt=False)``: one forward over ``[prompt; completion]`` per row.
* ``share_prompt=True`` (default): each distinct prompt of the micro-batch is encoded once, its
  KV cache is expanded to the G completions of its group (a differentiable index, so gradients
  from every completion flow back into the shared prompt), and only completion tokens are run.
  With G completions per prompt this removes (G - 1) / G of the prompt compute. Where the model
  allows it and it is cheaper, the G completions then run as one padding-free row per group
  (``pack=True``, :mod:`grpokit.model.packed_completions`; tested equal to 1e-5 too).

Only real (unpadded) completion positions reach the LM head, and the head itself runs through
:func:`grpokit.model.chunked_head.head_logprobs`: logits exist one ``[chunk, V]`` block at a time
in the forward and are recomputed block by block in the backward, so the learner never holds
``[B, T, V]`` logits or their gradient. Models whose head is not a plain bias-free linear map
(LoRA on the head, logit soft-capping or scaling) take the logits path, whose log-softmax is
chunked over the sequence.
"""

from __future__ import annotations

import inspect
from contextlib import nullcontext
from typing import Optional

import torch

from grpokit.model.checkpointing import PrefixCache, checkpointed_layers
from grpokit.model.chunked_head import head_logprobs
from grpokit.model.packed_completions import can_pack, completions_contiguous, packed_completion_hidden, packing_pays
from grpokit.model.streambp_layers import streamed_layers


def token_logprobs_from_logits(
    logits: torch.Tensor, targets: torch.Tensor, chunk: int = 64, with_entropy: bool = False, entropy_grad: bool = False
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log softmax(logits)[target] and (optionally) entropy, each ``[B, T]``.

    The entropy carries gradient only with ``entropy_grad`` (entropy bonus); otherwise it is a metric.

    logits: [B, T, V]; targets: [B, T]. Computed chunk by chunk over T:
    logp = logit[target] - logsumexp(logit); H = logsumexp - sum softmax * logit.
    """
    logps, ents = [], []
    for s in range(0, logits.shape[1], chunk):
        lg = logits[:, s : s + chunk].float()
        lse = torch.logsumexp(lg, dim=-1)  # [B, c]
        logps.append(lg.gather(-1, targets[:, s : s + chunk].unsqueeze(-1)).squeeze(-1) - lse)
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                p = torch.softmax(lg, dim=-1)
                ents.append(lse - (p * lg).sum(-1))
    logp = torch.cat(logps, dim=1)
    return logp, (torch.cat(ents, dim=1) if with_entropy else None)


def cache_kwarg(model: torch.nn.Module) -> str:
    """Name of the KV-cache argument of ``model.forward`` (transformers renamed it to ``cache``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft wraps forward
    params = inspect.signature(base.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out):
    """The KV cache a transformers forward returned (``cache`` in v5, ``past_key_values`` before)."""
    return getattr(out, "cache", None) or out.past_key_values


def decoder_and_head(model: torch.nn.Module) -> Optional[tuple[torch.nn.Module, torch.Tensor]]:
    """(transformer body returning final hidden states, LM head weight ``[V, H]``), or None.

    None when logits are not ``h W^T``: a head with a bias or an adapter (LoRA on lm_head), logit
    soft-capping or scaling (Gemma 2, Cohere, Granite). Those models use the logits path.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    cfg = getattr(base, "config", None)
    if type(head) is not torch.nn.Linear or head.bias is not None or cfg is None:
        return None
    if any(getattr(cfg, k, None) not in (None, 1.0) for k in ("final_logit_softcapping", "logit_scale", "logits_scaling")):
        return None
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    if decoder is None or decoder is base:
        return None
    return decoder, head.weight


def first_row_of_each_group(group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row index of each distinct group's first row ``[n]``, group position of every row ``[B]``)."""
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    first = torch.full((len(uniq),), len(group_ids), dtype=torch.long, device=group_ids.device)
    first = first.scatter_reduce(0, inverse, torch.arange(len(group_ids), device=group_ids.device), reduce="amin")
    return first, inverse


def _rng_state():
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)


def _set_rng_state(state) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


class PromptStage:
    """The shared prompt's forward, run without a graph and back-propagated after the completions'.

    A weight used by both the prompt forward and the completion forward has one gradient buffer in
    autograd's engine, flushed into ``.grad`` only after its last use in backward order -- the
    prompt, the earliest op. So during a single backward a second full set of weight gradients
    (0.4 GiB at 135M parameters) stays alive next to ``.grad``. Here the prompt forward runs under
    ``no_grad`` (:meth:`run`); its outputs (last hidden state, every layer's keys and values)
    become leaves of the completions' graph, so the completions' backward accumulates into
    ``.grad`` layer by layer; :meth:`backward` then recomputes the prompt forward with a graph
    (one prompt per group: a few percent of the micro-batch's tokens) and back-propagates it from
    the leaves' gradients. Same gradient (chain rule at the cut); measured peak RSS -0.55 GiB at
    16 x 64 tokens, and the prompt's activations no longer live through the completions' pass.
    """

    def __init__(self) -> None:
        self.leaves: list[torch.Tensor] = []
        self.forward = None

    @staticmethod
    def _outputs(hidden: torch.Tensor, cache) -> list[torch.Tensor]:
        return [hidden] + [t for layer in cache.layers for t in (layer.keys, layer.values)]

    def run(self, forward):
        """``forward() -> (last hidden [n, 1, H], KV cache)`` without a graph; the same with leaves in it."""
        self.rng = _rng_state()  # the recompute replays the same dropout masks
        with torch.no_grad():
            hidden, cache = forward()
        self.forward = forward
        self.leaves = [t.detach().requires_grad_() for t in self._outputs(hidden, cache)]
        for i, layer in enumerate(cache.layers):
            layer.keys, layer.values = self.leaves[1 + 2 * i], self.leaves[2 + 2 * i]
        return self.leaves[0], cache

    def backward(self) -> None:
        """Recompute the prompt forward with a graph and back-propagate the leaves' gradients into it."""
        grads = [leaf.grad for leaf in self.leaves]
        forward, self.leaves, self.forward = self.forward, [], None
        if forward is None or all(g is None for g in grads):
            return
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            _set_rng_state(self.rng)
            outputs = self._outputs(*forward())
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])


def _completion_logits_shared(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    group_ids: torch.Tensor,
) -> torch.Tensor:
    """Logits ``[B, T, V]`` predicting each completion token, encoding each prompt once."""
    first, inverse = first_row_of_each_group(group_ids)
    p_ids, p_mask = prompt_ids[first], prompt_mask[first]  # [n, P]
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)
    key = cache_kwarg(model)
    out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True, logits_to_keep=1)
    cache = output_cache(out)
    first_logits = out.logits[inverse, -1:]  # [B, 1, V]: predicts completion token 0
    if completion_ids.shape[1] == 1:
        return first_logits
    cache.reorder_cache(inverse)  # expand [n, ...] -> [B, ...]; differentiable index_select
    attention = torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, prompt_ids.shape[1] :]
    rest = model(
        input_ids=completion_ids[:, :-1],
        attention_mask=attention,
        position_ids=positions,
        use_cache=True,
        **{key: cache},
    ).logits  # [B, T-1, V]
    return torch.cat([first_logits, rest], dim=1)


def _layer_mode(decoder: torch.nn.Module, checkpoint: bool, stream_chunk: int):
    """StreamBP's chunked layer backward (``stream_chunk`` > 0, checkpointing included), plain checkpointing, or neither."""
    if stream_chunk:
        return streamed_layers(decoder, stream_chunk)
    return checkpointed_layers(decoder) if checkpoint else nullcontext()


def _completion_hidden_shared(
    decoder: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    group_ids: torch.Tensor,
    checkpoint: bool = False,
    prompt_stage: Optional[PromptStage] = None,
    stream_chunk: int = 0,
    pack: bool = True,
) -> torch.Tensor:
    """Final hidden states ``[B, T, H]`` that predict each completion token, each prompt encoded once.

    ``pack``: run each group's completions as one padding-free row after its prompt where the
    model allows it and it costs fewer FLOPs (:mod:`grpokit.model.packed_completions`; the same
    hidden states); otherwise the prompt cache is expanded to the B padded rows.

    ``checkpoint``: the completion forward (not the small prompt forward, which writes the cache)
    runs with per-layer activation checkpointing over a read-only :class:`PrefixCache`.
    ``prompt_stage``: cut the graph after the prompt forward; the caller runs
    ``prompt_stage.backward()`` after its own backward (:class:`PromptStage`). ``stream_chunk``:
    the completion layers checkpointed with StreamBP's chunked backward instead (:func:`_layer_mode`).
    """
    first, inverse = first_row_of_each_group(group_ids)
    p_ids, p_mask = prompt_ids[first], prompt_mask[first]  # [n, P]
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)

    def prompt_forward():
        out = decoder(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True)
        return out.last_hidden_state[:, -1:], output_cache(out)

    if prompt_stage is not None and torch.is_grad_enabled():
        last, cache = prompt_stage.run(prompt_forward)  # no graph; back-propagated by prompt_stage.backward()
    else:
        last, cache = prompt_forward()
    first_hidden = last[inverse]  # [B, 1, H]: predicts completion token 0
    if completion_ids.shape[1] == 1:
        return first_hidden
    if pack and _packs(decoder, p_mask, completion_mask, inverse, stream_chunk):  # the group's completions in one row
        rest = packed_completion_hidden(
            decoder, PrefixCache.of(cache) if checkpoint else cache, cache_kwarg(decoder), completion_ids, completion_mask,
            inverse, p_mask, checkpointed_layers(decoder) if checkpoint else None,
        )
        return torch.cat([first_hidden, rest], dim=1)
    cache.reorder_cache(inverse)  # differentiable expansion [n, ...] -> [B, ...]
    attention = torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, prompt_ids.shape[1] :]
    if checkpoint or stream_chunk:
        cache = PrefixCache.of(cache)
    with _layer_mode(decoder, checkpoint, stream_chunk):
        rest = decoder(
            input_ids=completion_ids[:, :-1], attention_mask=attention, position_ids=positions,
            use_cache=True, **{cache_kwarg(decoder): cache},
        ).last_hidden_state  # [B, T-1, H]
    return torch.cat([first_hidden, rest], dim=1)


def _packs(decoder, p_mask: torch.Tensor, completion_mask: torch.Tensor, inverse: torch.Tensor, stream_chunk: int) -> bool:
    """Whether the packed-row layout computes these completions' hidden states (exactly) for less.

    Not under StreamBP's layer mode (its chunks cut the sequence, not packed rows).
    """
    if stream_chunk or not can_pack(decoder, p_mask.shape[1] + completion_mask.shape[1]):
        return False
    return completions_contiguous(completion_mask) and packing_pays(decoder, completion_mask, inverse, len(p_mask), p_mask.shape[1])


def _completion_hidden_full(
    decoder: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    checkpoint: bool = False,
    stream_chunk: int = 0,
) -> torch.Tensor:
    """Final hidden states ``[B, T, H]`` from one forward over ``[prompt; completion]`` per row."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    with _layer_mode(decoder, checkpoint, stream_chunk):
        out = decoder(input_ids=input_ids, attention_mask=attention, position_ids=position_ids, use_cache=False)
    p, t = prompt_ids.shape[1], completion_ids.shape[1]
    return out.last_hidden_state[:, p - 1 : p + t - 1]


def masked_head_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Log-probs (and entropies) ``[B, T]`` of the real completion tokens, 0 on padding.

    hidden: [B, T, H]; only positions with ``completion_mask`` reach the head (packed to ``[N, H]``).
    """
    rows, cols = completion_mask.nonzero(as_tuple=True)
    logp_flat, ent_flat = head_logprobs(
        hidden[rows, cols], weight, completion_ids[rows, cols], temperature=temperature,
        with_entropy=with_entropy, entropy_grad=entropy_grad,
    )
    zeros = logp_flat.new_zeros(completion_ids.shape)  # float32, whatever the model's dtype
    logp = zeros.index_put((rows, cols), logp_flat)
    return logp, (zeros.index_put((rows, cols), ent_flat) if ent_flat is not None else None)


def _completion_logits_full(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor:
    """Logits ``[B, T, V]`` from one forward over ``[prompt; completion]`` per row."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    t = completion_ids.shape[1]
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids, logits_to_keep=t + 1, use_cache=False)
    return out.logits[:, :-1]  # position P-1+t predicts completion token t


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    group_ids: Optional[torch.Tensor] = None,
    share_prompt: bool = True,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    fused_head: bool = True,
    checkpoint: bool = False,
    prompt_stage: Optional[PromptStage] = None,
    stream_chunk: int = 0,
    pack: bool = True,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log pi(o_t | q, o_<t) for every completion token, ``[B, T]`` (and entropy ``[B, T]``).

    prompt_ids/prompt_mask: [B, P] left-padded; completion_ids/completion_mask: [B, T]
    right-padded; group_ids: [B] rows with equal ids share the same prompt. Position ids follow
    the attention mask, as in generation, so the learner scores exactly what the sampler
    produced. Logits are divided by ``temperature``. ``fused_head=False`` forces the logits path
    (full ``[B, T, V]`` logits; the memory benchmark's baseline). ``checkpoint`` recomputes each
    decoder layer in the backward pass instead of storing its activations
    (:mod:`grpokit.model.checkpointing`; needs the hidden-state path). ``prompt_stage``
    (shared-prompt hidden-state path): two-stage backward, see :class:`PromptStage`; the caller
    must call its ``backward()`` after back-propagating the loss. ``stream_chunk`` > 0: each decoder
    layer checkpointed at its input and its backward recomputed and back-propagated in chunks of
    that many rows along the sequence (StreamBP, arXiv 2506.03077; :mod:`grpokit.model.streambp_layers`).
    ``pack`` (shared-prompt hidden-state path): each group's completions as one padding-free row
    where that is exact and cheaper (:mod:`grpokit.model.packed_completions`); False keeps ``[B, T]``.
    """
    parts = decoder_and_head(model) if fused_head else None
    if parts is not None:
        decoder, weight = parts
        if share_prompt and group_ids is not None:
            hidden = _completion_hidden_shared(
                decoder, prompt_ids, prompt_mask, completion_ids, completion_mask, group_ids, checkpoint, prompt_stage, stream_chunk,
                pack,
            )
        else:
            hidden = _completion_hidden_full(decoder, prompt_ids, prompt_mask, completion_ids, completion_mask, checkpoint, stream_chunk)
        return masked_head_logprobs(
            hidden, weight, completion_ids, completion_mask, temperature=temperature,
            with_entropy=with_entropy, entropy_grad=entropy_grad,
        )
    if stream_chunk:
        raise ValueError("train.streambp=layer needs a model whose LM head is a plain linear map (no LoRA on lm_head, no logit soft-capping): set train.streambp=cache or train.sequence_chunk=0")
    if checkpoint:
        raise ValueError("train.activation_checkpointing needs a model whose LM head is a plain linear map: set it to false")
    if share_prompt and group_ids is not None:
        logits = _completion_logits_shared(model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_ids)
    else:
        logits = _completion_logits_full(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    if temperature != 1.0:
        logits = logits / temperature
    logp, entropy = token_logprobs_from_logits(
        logits, completion_ids, with_entropy=with_entropy or entropy_grad, entropy_grad=entropy_grad
    )
    return logp * completion_mask, (entropy * completion_mask if entropy is not None else None)
