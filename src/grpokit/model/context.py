"""How many positions a model reads, from what the model itself states.

One function for every context-length check (``grpokit synth``'s ``--target-tokens``, its writer):

- a GGUF (an embedded model or a ``.gguf`` file) states it in its metadata as
  ``<arch>.context_length``, ``<arch>`` being its ``general.architecture`` (``llama.context_length``
  = 8192 for the embedded SmolLM2-135M-Instruct), read with the ``gguf`` package's reader;
- a Hugging Face folder states it in ``config.json`` as ``max_position_embeddings`` (of the text
  model for a vision-language config; a field renamed by the config class, e.g. GPT-2's
  ``n_positions``, is found through transformers' ``AutoConfig``).

Never from the tokenizer: a tokenizer read from a GGUF, like any whose files leave it unset,
reports transformers' placeholder ``model_max_length`` = 1e30. Never from grpokit's dequantised
model cache either: that folder does not exist before the first model load (a fresh machine).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Optional

from grpokit.model.loading import ModelLoadError, _classify


def context_length(source: str | os.PathLike[str]) -> Optional[int]:
    """Positions the model ``source`` (embedded name, HF folder, ``.gguf`` path) reads; None when it states none.

    Raises :class:`ModelLoadError` (one line) for a source that is not a model, or a GGUF whose
    metadata cannot be read.
    """
    kind, path = _classify(source)
    if kind == "dir":
        from transformers import AutoConfig

        return config_context_length(AutoConfig.from_pretrained(path, local_files_only=True))
    stat = path.stat()
    return _gguf_context_length(str(path), stat.st_size, stat.st_mtime_ns)


def config_context_length(config: Any) -> Optional[int]:
    """``max_position_embeddings`` of a transformers config (its text model's for a multimodal one), or None."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    limit = getattr(text, "max_position_embeddings", None)
    return int(limit) if isinstance(limit, int) and limit > 0 else None


@functools.lru_cache(maxsize=16)
def _gguf_context_length(path: str, size: int, mtime_ns: int) -> Optional[int]:
    """``<general.architecture>.context_length`` of the GGUF at ``path`` (cached per path, size and mtime).

    The reader parses every field (≈ 3 s of CPU for the embedded model's 49,152-token vocabulary),
    hence the cache: a run asks once per file.
    """
    from gguf import GGUFReader

    try:
        fields = GGUFReader(path).fields
    except (ValueError, OSError) as exc:
        raise ModelLoadError(f"cannot read the GGUF metadata of '{path}' ({exc}); pass a valid .gguf file") from None
    arch = fields.get("general.architecture")
    if arch is None:
        raise ModelLoadError(f"GGUF '{path}' has no general.architecture in its metadata; pass a valid .gguf file")
    field = fields.get(f"{arch.contents()}.context_length")
    return int(field.contents()) if field is not None else None

