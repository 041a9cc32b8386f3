"""Sampling with a Hugging Face transformers causal LM (CPU or GPU), prompt prefilled once per group.

The decode loop is our own rather than ``model.generate``: each prompt is prefilled once and its
KV cache is shared by the G completions of its group, finished rows are dropped from the batch
as soon as they emit EOS, and the log-prob of every sampled token under the sampling
distribution (temperature, top-k, top-p applied) is recorded on the way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from grpokit.devices import module_device
from grpokit.model.logprobs import cache_kwarg, output_cache
from grpokit.rollout.fused_decode import FusedDecoder
from grpokit.rollout.types import RolloutBatch, SamplingParams, group_batch


def completion_mask_from_eos(completion_ids: torch.Tensor, eos_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask ``[B, T]`` that keeps tokens up to and including the first EOS, and truncated ``[B]``.

    Rows without any EOS are truncated (they hit the length cap) and keep every token.
    """
    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device))
    seen_before = (is_eos.cumsum(-1) - is_eos.long()) > 0  # an EOS strictly earlier
    mask = (~seen_before).long()
    truncated = ~is_eos.any(-1)
    return mask, truncated


def sampling_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The logits ``[N, V]`` of the sampling distribution: / temperature, then top-k, then top-p."""
    logits = logits.float() / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop_sorted = cum - torch.softmax(sorted_logits, dim=-1) >= params.top_p  # keep the token that crosses p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_categorical(probs: torch.Tensor) -> torch.Tensor:
    """One draw per row of ``probs [N, V]`` (unnormalised is fine) by inverting the CDF: ``[N]``.

    Exact (tokens of probability 0 are never drawn) and ~15x cheaper on CPU than
    ``torch.multinomial``, whose exponential-race sampler costs ~40 ms per ``[32, 49152]`` call.
    """
    cdf = probs.cumsum(-1)
    u = torch.rand(probs.shape[0], 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)


def next_tokens(
    logits: torch.Tensor, params: SamplingParams, banned: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample (or argmax) one token per row; ``banned`` token ids ``[k]`` get probability 0.

    Returns (tokens [N], log-prob under the sampler [N], entropy [N] of the tempered
    distribution before top-k/top-p/banning, i.e. of softmax(logits / T) as the learner sees it).
    """
    scale = 1.0 if params.greedy else params.temperature
    tempered = torch.log_softmax(logits.float() / scale, dim=-1)
    probs = tempered.exp()
    entropy = -(probs * tempered).sum(-1)
    logp = tempered
    if params.greedy:
        if banned is not None:
            logp = logp.index_fill(-1, banned, float("-inf"))
        tok = logp.argmax(-1)
    elif params.top_k or params.top_p < 1.0 or banned is not None:
        if not (params.top_k or params.top_p < 1.0):  # only banning: renormalise, log p'(y) = log p(y) - log sum_allowed p
            allowed = probs.index_fill(-1, banned, 0.0)
            mass = allowed.sum(-1)
            if bool((mass > 1e-20).all()):  # else the allowed probabilities underflowed: log space below
                tok = sample_categorical(allowed)
                return tok, tempered.gather(-1, tok.unsqueeze(-1)).squeeze(-1) - mass.log(), entropy
        shaped = sampling_logits(logits, params)
        if banned is not None:
            shaped = shaped.index_fill(-1, banned, float("-inf"))
        logp = torch.log_softmax(shaped, dim=-1)
        tok = sample_categorical(logp.exp())
    else:
        tok = sample_categorical(probs)
    return tok, logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1), entropy


def special_ids(model: torch.nn.Module, tokenizer) -> tuple[list[int], int]:
    """(EOS ids: the generation config's, else the tokenizer's; the pad id, else the first EOS)."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    eos = eos if eos is not None else tokenizer.eos_token_id
    eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
    return eos_ids, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]


@dataclass
class TurnCache:
    """A batch's KV cache between two turns of its episodes (rows = episodes).

    ``cache``: a transformers cache of ``[B, kv, W, d]`` per layer; ``mask [B, W]``: 1 on real
    tokens, 0 on padding and on what a row was fed after its EOS; ``next_pos [B]``: the rotary
    position of each row's next token (its count of real tokens); ``fed``: how many of the last
    turn's sampled tokens went into the cache (the rest, at least the last one, did not).
    """

    cache: Any
    mask: torch.Tensor
    next_pos: torch.Tensor
    fed: int

    def select(self, rows: torch.Tensor) -> "TurnCache":
        """The cache of ``rows [B']`` only, without the columns no kept row attends to (in place: this cache is consumed)."""
        self.cache.reorder_cache(rows)
        mask = self.mask[rows]
        used = mask.any(dim=0)
        if not bool(used.all()):
            cols = used.nonzero().squeeze(-1)
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, cols], layer.values[:, :, cols]
            mask = mask[:, cols]
        return TurnCache(self.cache, mask, self.next_pos[rows], self.fed)


class HFBackend:
    """GenerationBackend over a transformers causal LM and its tokenizer.

    ``fused_decode`` (default): decode steps of supported models (Llama, Mistral, Qwen2, with or
    without LoRA) run through :class:`~grpokit.rollout.fused_decode.FusedDecoder` (fused,
    prepacked projections and a static KV cache); other models, or ``fused_decode=False``, run
    the transformers forward every step. The prompt prefill always uses the transformers forward.
    """

    engine = "hf"  # the learner's own module, in-process

    # Finished rows stay in the fused decoder's batch (their tokens are ignored) until this
    # fraction of it has finished; compacting copies the whole KV cache.
    COMPACT_FRACTION = 0.125

    def __init__(self, model: torch.nn.Module, tokenizer, fused_decode: bool = True) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.fused_decode = fused_decode
        self.eos_ids, self.pad_id = special_ids(model, tokenizer)

    @torch.no_grad()
    def _decode(self, input_ids: torch.Tensor, attention: torch.Tensor, group_size: int, params: SamplingParams,
                past: Optional[TurnCache] = None, keep_cache: bool = False):
        """Token ids, sampler log-probs and entropies, each ``[B, T]`` (pad / 0 after a row's EOS).

        ``past``: a cache the left-padded ``input_ids`` continue (its rows are ``input_ids``' rows);
        ``keep_cache``: no row leaves the batch when it finishes (its later inputs are masked) and the
        cache is returned as a 4th value, a :class:`TurnCache`, for the next call to continue.
        """
        model, key, device = self.model, cache_kwarg(self.model), input_ids.device
        n = input_ids.shape[0]
        b = n * group_size
        fused = FusedDecoder.build(model, rows_hint=b) if self.fused_decode else None  # None off CPU
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        past_kwargs = {}
        if past is not None:  # the chunk's positions continue each row's real tokens
            positions, attention = positions + past.next_pos[:, None], torch.cat([past.mask, attention], dim=1)
            past_kwargs = {key: past.cache}
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, logits_to_keep=1,
                    **past_kwargs)
        cache = output_cache(out)
        expand = torch.arange(n, device=device).repeat_interleave(group_size)
        logits = out.logits[expand, -1]  # [B, V]
        if fused is not None:
            fused.start(cache, attention, expand, params.max_new_tokens)
            if past is not None:  # the caller's cache object: its tensors are the fused decoder's copy now
                for layer in past.cache.layers:
                    layer.keys = layer.values = None
            cache = out = None
        elif group_size > 1:
            cache.reorder_cache(expand)
        attention, next_pos = attention[expand], positions[expand, -1] + 1
        tokens = torch.full((b, params.max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        logps = torch.zeros(b, params.max_new_tokens, device=device)
        entropies = torch.zeros(b, params.max_new_tokens, device=device)
        rows = torch.arange(b, device=device)  # the output row of every batch row, in cache order
        live = torch.ones(b, dtype=torch.bool, device=device)  # batch rows still generating
        eos = torch.tensor(self.eos_ids, device=device)
        fed = 0  # sampled tokens fed back into the cache
        for t in range(params.max_new_tokens):
            tok, lp, ent = next_tokens(logits, params, banned=eos if t < params.min_new_tokens else None)
            tokens[rows[live], t], logps[rows[live], t], entropies[rows[live], t] = tok[live], lp[live], ent[live]
            real = live  # a row's EOS is fed as a real token; what it samples after is masked out
            live = live & ~torch.isin(tok, eos)
            if t == params.max_new_tokens - 1 or not bool(live.any()):
                break
            finished = len(live) - int(live.sum())
            if not keep_cache and finished and (fused is None or finished >= self.COMPACT_FRACTION * len(live)):
                keep = live.nonzero().squeeze(-1)  # drop finished rows from the batch and the cache
                fused.keep_rows(keep) if fused is not None else cache.reorder_cache(keep)
                rows, live, tok, attention, next_pos = rows[keep], live[keep], tok[keep], attention[keep], next_pos[keep]
            if fused is not None:
                logits = fused.step(tok, next_pos, real if keep_cache else None)
            else:
                column = real.long() if keep_cache else attention.new_ones(len(tok))
                attention = torch.cat([attention, column[:, None].to(attention.dtype)], dim=1)
                out = model(input_ids=tok.unsqueeze(-1), attention_mask=attention, position_ids=next_pos.unsqueeze(-1), use_cache=True, **{key: cache})
                logits = out.logits[:, -1]
            next_pos = next_pos + (real.long() if keep_cache else 1)
            fed += 1
        if not keep_cache:
            return tokens, logps, entropies
        if fused is not None:
            cache, attention = fused.export()
        return tokens, logps, entropies, TurnCache(cache, attention, next_pos, fed)

    def decode(self, input_ids: torch.Tensor, attention: torch.Tensor, group_size: int, params: SamplingParams):
        """Sample from left-padded ``input_ids [n, L]``: ids, sampler log-probs, entropies ``[n*group_size, T]`` (pad / 0 after EOS).

        The token-level entry point for callers that build their own contexts (multi-turn
        episodes); the caller sets train / eval mode.
        """
        return self._decode(input_ids, attention, group_size, params)

    def decode_turn(self, input_ids: torch.Tensor, attention: torch.Tensor, group_size: int, params: SamplingParams,
                    past: Optional[TurnCache] = None):
        """:meth:`decode` continuing ``past`` (None: a fresh context) and returning the cache to continue next turn.

        ``input_ids [n, C]``: each row's tokens since ``past`` (left-padded, ``attention`` 1 on real
        ones); returns ids, log-probs, entropies ``[n*group_size, T]`` and a :class:`TurnCache` whose
        rows hold the context, the chunk and the first ``fed`` sampled tokens of every row (those
        after a row's EOS masked out). The caller sets train / eval mode.
        """
        return self._decode(input_ids, attention, group_size, params, past=past, keep_cache=True)

    @torch.no_grad()
    def generate(
        self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams
    ) -> RolloutBatch:
        """Sample ``group_size`` completions per prompt; rows are ordered prompt-major, on the model's device."""
        enc = self.tokenizer(prompt_texts, return_tensors="pt", padding=True, add_special_tokens=False)
        device = module_device(self.model)
        return self.generate_from_ids(enc.input_ids.to(device), enc.attention_mask.to(device), rows, group_size, params)

    @torch.no_grad()
    def generate_from_ids(
        self, input_ids: torch.Tensor, attention: torch.Tensor, rows: list[dict], group_size: int, params: SamplingParams
    ) -> RolloutBatch:
        """:meth:`generate` from left-padded prompt token ids ``[n, P]`` (a caller's own token contexts) on the model's device."""
        was_training = self.model.training
        self.model.eval()
        try:
            completion_ids, sampling_logp, entropy = self._decode(input_ids, attention, group_size, params)
        finally:
            self.model.train(was_training)
        mask, truncated = completion_mask_from_eos(completion_ids, self.eos_ids)
        width = int(mask.sum(-1).max().clamp(min=1))
        completion_ids, mask = completion_ids[:, :width], mask[:, :width]
        sampling_logp, entropy = sampling_logp[:, :width] * mask, entropy[:, :width] * mask
        return group_batch(self.tokenizer, input_ids, attention, rows, group_size,
                           completion_ids, mask, sampling_logp, truncated, entropy)
