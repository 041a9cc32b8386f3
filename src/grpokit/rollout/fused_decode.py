"""A decode step for Llama-type models with fused, prepacked projections and a static KV cache.

Sampling spends almost all of its time in one-token decode steps whose matrix products are
skinny (``[B, H] x [H, N]`` with B = prompts x G rows), a shape at which the BLAS behind
``nn.Linear`` runs at a fraction of its large-GEMM rate on CPU (measured on the 2-core dev
machine: 30 GFLOP/s for the ``[32, 576] x [576, 49152]`` LM head). This module runs the same
mathematics as the transformers forward with:

* the query/key/value projections fused into one matrix and gate/up into another (4 products per
  layer instead of 7), every weight reordered once per ``generate`` call into oneDNN's blocked
  layout (``torch.ops.mkldnn._linear_pointwise``; 75-130 GFLOP/s at those shapes, the LM head
  2.4x faster), with a plain ``F.linear`` fallback where oneDNN is not available (no MKLDNN, not fp32);
* a static KV cache ``[B, kv_heads, P + T, d]`` per layer, written in place (no ``torch.cat``
  per step) and compacted only when enough rows have finished;
* the layer written out as tensor code: no mask construction, no cache objects, no hooks.

Log-probabilities recorded while sampling come from these logits; the learner recomputes its own
with the transformers forward, so they only have to agree to float rounding (tested to 1e-4 in
logits against ``model(...)``). Supported: ``model_type`` llama, mistral (without a sliding window
shorter than the sequence) and qwen2 (q/k/v biases), plain or with LoRA adapters (their delta
weights are folded into the packed copy; nothing in the model changes). Anything else returns
None from :meth:`FusedDecoder.build` and the backend keeps the transformers loop, as does every
model that is not on the CPU (on CUDA the transformers forward is the fast path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from grpokit.devices import is_cpu, module_device
from grpokit.model.packed_linear import PackedLinear

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")


def effective_linear(module: torch.nn.Module) -> Optional[tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """(weight ``[N, K]``, bias) that ``module`` applies, LoRA deltas folded in; None if unknown.

    A plain ``nn.Linear`` is itself; a peft LoRA layer is its base layer plus
    ``get_delta_weight(adapter)`` of every active, unmerged adapter (dropout is off in sampling).
    """
    if type(module) is torch.nn.Linear:
        return module.weight, module.bias
    base = getattr(module, "base_layer", None)
    if type(base) is not torch.nn.Linear or not hasattr(module, "get_delta_weight"):
        return None
    weight = base.weight
    if not getattr(module, "disable_adapters", False) and not getattr(module, "merged", False):
        for name in module.active_adapters:
            if name in getattr(module, "lora_A", {}):
                weight = weight + module.get_delta_weight(name)
            elif name in getattr(module, "lora_embedding_A", {}) or getattr(module, "use_dora", {}).get(name):
                return None
    return weight, base.bias


def _fused(modules: list[torch.nn.Module], rows_hint: int) -> Optional[PackedLinear]:
    parts = [effective_linear(m) for m in modules]
    if any(p is None for p in parts):
        return None
    biases = [b for _, b in parts]
    if any(b is not None for b in biases):
        biases = [b if b is not None else w.new_zeros(w.shape[0]) for (w, _), b in zip(parts, biases)]
        bias = torch.cat(biases)
    else:
        bias = None
    return PackedLinear(torch.cat([w for w, _ in parts]), bias, rows_hint)


@dataclass
class _Layer:
    norm1: torch.Tensor
    norm2: torch.Tensor
    qkv: PackedLinear
    o: PackedLinear
    gate_up: PackedLinear
    down: PackedLinear


def _swap_halves(x: torch.Tensor) -> torch.Tensor:
    """``[x2, x1]`` for ``x = [x1, x2]`` split on the last dim (one copy, no negation)."""
    *lead, d = x.shape
    return x.view(*lead, 2, d // 2).flip(-2).view(*lead, d)


class FusedDecoder:
    """One-token decode steps over a static KV cache; build it once per ``generate`` call.

    Shapes: B rows being decoded, H hidden, nh query heads, kv key/value heads (nh = g * kv), d head dim.
    """

    def __init__(self, model: torch.nn.Module, decoder: torch.nn.Module, layers: list[_Layer], head: PackedLinear, eps: float):
        cfg = decoder.config
        self.model, self.decoder, self.layers, self.head, self.eps = model, decoder, layers, head, eps
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.scaling = decoder.layers[0].self_attn.scaling
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.bias = torch.empty(0, device=module_device(decoder))  # [B, L_max] additive attention bias (-inf on prompt padding)
        self.length = 0  # filled cache positions

    @classmethod
    def build(cls, model: torch.nn.Module, rows_hint: int) -> Optional["FusedDecoder"]:
        """The fused decoder of ``model`` (weights packed now), or None when the model is not supported.

        CPU only: off the CPU (CUDA) the transformers forward with its own kernels is the fast path,
        and the prepacked layout this decoder exists for is oneDNN's.
        """
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        if not is_cpu(module_device(base)):
            return None
        cfg = getattr(base, "config", None)
        decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
        head_module = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
        if cfg is None or decoder is None or decoder is base or head_module is None:
            return None
        if getattr(cfg, "model_type", None) not in SUPPORTED_MODEL_TYPES or getattr(cfg, "hidden_act", None) != "silu":
            return None
        if getattr(cfg, "use_sliding_window", False) or (
            cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None) is not None
        ):
            return None
        if any(getattr(cfg, k, None) not in (None, 1.0) for k in ("final_logit_softcapping", "logit_scale", "logits_scaling")):
            return None
        if getattr(cfg, "pretraining_tp", 1) != 1:
            return None
        eps = getattr(decoder.norm, "variance_epsilon", None)
        head = effective_linear(head_module)
        if eps is None or head is None:
            return None
        layers = []
        for layer in decoder.layers:
            attn, mlp = layer.self_attn, layer.mlp
            needed = (attn, "q_proj", "k_proj", "v_proj", "o_proj"), (mlp, "gate_proj", "up_proj", "down_proj")
            if not all(hasattr(m, n) for m, *names in needed for n in names):
                return None
            if type(getattr(mlp, "act_fn", None)).__name__ not in ("SiLU", "SiLUActivation"):
                return None
            if any(getattr(n, "variance_epsilon", None) != eps for n in (layer.input_layernorm, layer.post_attention_layernorm)):
                return None
            qkv = _fused([attn.q_proj, attn.k_proj, attn.v_proj], rows_hint)
            o, gate_up, down = _fused([attn.o_proj], rows_hint), _fused([mlp.gate_proj, mlp.up_proj], rows_hint), _fused([mlp.down_proj], rows_hint)
            if None in (qkv, o, gate_up, down):
                return None
            layers.append(_Layer(layer.input_layernorm.weight.detach(), layer.post_attention_layernorm.weight.detach(), qkv, o, gate_up, down))
        return cls(model, decoder, layers, PackedLinear(head[0], head[1], rows_hint), eps)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm as transformers' LlamaRMSNorm: ``w * x / sqrt(mean(x^2) + eps)`` (one fused kernel)."""
        return F.rms_norm(x, weight.shape, weight, self.eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, V]`` from last hidden states ``[B, H]`` (before the final norm).

        The final norm runs as the model's own module on ``[B, 1, H]``, so forward hooks on it
        (TOPLOC's capture) see what they see under the transformers forward.
        """
        return self.head(self.decoder.norm(hidden.unsqueeze(1)).squeeze(1))

    def start(self, cache, prompt_mask: torch.Tensor, expand: torch.Tensor, max_new_tokens: int) -> None:
        """Copy a prefilled prompt cache (``[n, kv, P, d]`` per layer) into static buffers of B = len(expand) rows.

        prompt_mask: [n, P] 1 = real token; expand: [B] prompt index of every row.
        """
        n_prompt = prompt_mask.shape[1]
        total = n_prompt + max_new_tokens
        self.keys, self.values = [], []
        for i in range(len(self.layers)):
            k, v = _layer_kv(cache, i)
            kb = k.new_empty(len(expand), k.shape[1], total, k.shape[3])
            vb = v.new_empty(len(expand), v.shape[1], total, v.shape[3])
            kb[:, :, :n_prompt] = k[expand]
            vb[:, :, :n_prompt] = v[expand]
            self.keys.append(kb)
            self.values.append(vb)
        bias = torch.zeros(len(expand), total, dtype=self.keys[0].dtype, device=self.keys[0].device)
        bias[:, :n_prompt].masked_fill_(prompt_mask[expand].to(bias.device) == 0, float("-inf"))
        self.bias, self.length = bias, n_prompt

    def keep_rows(self, keep: torch.Tensor) -> None:
        """Drop finished rows from the cache: keep rows ``keep [B']`` (indices into the current rows)."""
        self.keys = [k[keep] for k in self.keys]
        self.values = [v[keep] for v in self.values]
        self.bias = self.bias[keep]

    def export(self):
        """(a transformers ``DynamicCache`` of the filled positions, mask ``[B, L]`` 1 on attended ones): the cache handed back."""
        from transformers import DynamicCache

        cache = DynamicCache()
        for i, (keys, values) in enumerate(zip(self.keys, self.values)):
            cache.update(keys[:, :, :0], values[:, :, :0], i)  # creates the layer; then views of the buffers, no copy
            cache.layers[i].keys, cache.layers[i].values = keys[:, :, : self.length], values[:, :, : self.length]
        return cache, (self.bias[:, : self.length] == 0).long()

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, real: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits ``[B, V]`` for the next token after ``tokens [B]`` at rotary ``positions [B]``.

        ``real [B]`` (bool): rows whose token is real; the others' are cached but never attended to
        (finished rows kept in the batch). None: all real.
        """
        b, g, d, pos = len(tokens), self.n_heads // self.n_kv, self.head_dim, self.length
        if real is not None:
            self.bias[:, pos].masked_fill_(~real, float("-inf"))
        h = self.decoder.embed_tokens(tokens)  # [B, H]
        cos, sin = self.decoder.rotary_emb(h.unsqueeze(1), positions.unsqueeze(1))  # [B, 1, d]
        # rotate_half(x) * sin = [-x2, x1] * [s1, s2] = [x2, x1] * [-s1, s2]: the sign goes into sin once per step
        sin = torch.cat((-sin[..., : d // 2], sin[..., d // 2 :]), dim=-1)
        q_width, kv_width = self.n_heads * d, self.n_kv * d
        # [B * kv, 1, L]: each row's additive mask, repeated for its kv heads (attention runs as B * kv small GEMMs)
        bias = self.bias[:, None, : pos + 1].expand(b, self.n_kv, pos + 1).reshape(b * self.n_kv, 1, pos + 1)
        n_qk = self.n_heads + self.n_kv
        for layer, keys, values in zip(self.layers, self.keys, self.values):
            qkv = layer.qkv(self._norm(h, layer.norm1))  # [B, (nh + 2 kv) d]
            qk = qkv[:, : q_width + kv_width].view(b, n_qk, d)
            qk = torch.addcmul(qk * cos, _swap_halves(qk), sin)  # rotary on queries and keys at once
            keys[:, :, pos] = qk[:, self.n_heads :]
            values[:, :, pos] = qkv[:, q_width + kv_width :].view(b, self.n_kv, d)
            q = qk[:, : self.n_heads].reshape(b * self.n_kv, g, d)  # query heads j*g..j*g+g-1 read kv head j
            k = keys[:, :, : pos + 1].reshape(b * self.n_kv, pos + 1, d)  # views: the cache is [B, kv, L_max, d]
            scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=self.scaling)  # [B * kv, g, L]
            attn = torch.bmm(torch.softmax(scores, dim=-1), values[:, :, : pos + 1].reshape(b * self.n_kv, pos + 1, d))
            h = layer.o.plus(attn.reshape(b, q_width), h)  # h + o(attn), the residual added by the GEMM kernel
            gate, up = layer.gate_up(self._norm(h, layer.norm2)).chunk(2, dim=-1)
            h = layer.down.plus(F.silu(gate).mul_(up), h)
        self.length = pos + 1
        return self.logits(h)


def _layer_kv(cache, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys, values) ``[n, kv, P, d]`` of layer ``index`` in a transformers cache (v5 layers or legacy)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return layers[index].keys, layers[index].values
    return cache.key_cache[index], cache.value_cache[index]
