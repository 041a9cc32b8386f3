"""The masked-diffusion LM: a bidirectional mask predictor over grpokit's own small vocabulary.

LLaDA ("Large Language Diffusion Models", arXiv 2502.09992, §2.1) predicts every masked token of
a partially masked sequence at once with a Transformer *encoder* (no causal mask) and no timestep
input; one reserved id is [MASK]. Here that predictor is ``BertForMaskedLM`` (or
``ModernBertForMaskedLM``) built from a config, over :class:`MDMTokenizer`'s character vocabulary
(digits, arithmetic, lower-case letters, [PAD] [MASK] [EOS]); no tokenizer files and nothing from
the hub.

A model folder is ``save_pretrained``'s ``config.json`` + weights plus ``mdm_vocab.json`` (the
vocabulary, which is also what marks the folder as a masked-diffusion LM for ``model.name``).
Positions are always passed explicitly, counted from the first real token, so left padding of the
prompt (and its trimming in micro-batches) never moves a token's position.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

import torch

VOCAB_FILE = "mdm_vocab.json"
SPECIALS = ("[PAD]", "[MASK]", "[EOS]")
NEVER_PREDICTED = (0, 1)  # [PAD], [MASK]
CHARS = "0123456789+-*/()=,:<> abcdefghijklmnopqrstuvwxyz"


class MDMTokenizer:
    """Character-level tokenizer of the masked-diffusion LM: ``pad_id`` 0, ``mask_id`` 1, ``eos_id`` 2, then ``CHARS``."""

    def __init__(self, tokens: Optional[list[str]] = None) -> None:
        self.tokens = list(tokens) if tokens is not None else list(SPECIALS) + list(CHARS)
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.pad_id, self.mask_id, self.eos_id = (self.index[s] for s in SPECIALS)
        self.pad_token_id, self.eos_token_id = self.pad_id, self.eos_id
        self.chat_template = None

    def __len__(self) -> int:
        return len(self.tokens)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.index)

    def encode(self, text: str, where: str = "text") -> list[int]:
        """Ids of ``text``, one per character; a character outside the vocabulary is a one-line error."""
        bad = sorted({c for c in text if c not in self.index or c in SPECIALS})
        if bad:
            raise ValueError(f"{where} {text!r} has characters {bad} outside the masked-diffusion vocabulary {CHARS!r}")
        return [self.index[c] for c in text]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text up to the first [EOS]; [PAD] and [MASK] are skipped."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.mask_id):
                continue
            out.append(self.tokens[i])
        return "".join(out)

    def batch_decode(self, rows: Iterable[Iterable[int]], skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(r) for r in rows]

    def save_pretrained(self, folder: str | Path) -> None:
        Path(folder, VOCAB_FILE).write_text(json.dumps({"tokens": self.tokens}))

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "MDMTokenizer":
        return cls(json.loads(Path(folder, VOCAB_FILE).read_text())["tokens"])


def build_mdm(vocab_size: int, *, hidden: int = 128, layers: int = 4, heads: int = 4, max_positions: int = 64,
              arch: str = "bert", seed: int = 0) -> torch.nn.Module:
    """A randomly initialised bidirectional mask predictor (``arch`` 'bert' or 'modernbert'), seeded."""
    torch.manual_seed(seed)
    if arch == "bert":
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=4 * hidden, max_position_embeddings=max_positions, type_vocab_size=1,
                            pad_token_id=0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return BertForMaskedLM(config)
    if arch == "modernbert":
        from transformers import ModernBertConfig, ModernBertForMaskedLM

        config = ModernBertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                  intermediate_size=2 * hidden, max_position_embeddings=max_positions, pad_token_id=0,
                                  bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=0, global_attn_every_n_layers=1,
                                  attention_dropout=0.0, embedding_dropout=0.0, mlp_dropout=0.0)
        return ModernBertForMaskedLM(config)
    raise ValueError(f"masked-diffusion arch {arch!r}: choose 'bert' or 'modernbert'")


def mdm_logits(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """``[b, S, V]`` logits of the mask predictor on ``ids [b, S]`` (``attention [b, S]`` 1 = real token).

    Positions count from each row's first real token (left padding never shifts them). [PAD] and
    [MASK] are never a prediction (their logits are -inf): a committed [MASK] would leave its
    position masked, and sampler and likelihoods must see one distribution.
    """
    positions = (attention.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention.long(), position_ids=positions).logits.float()
    banned = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    banned[list(NEVER_PREDICTED)] = True
    return logits.masked_fill(banned, float("-inf"))


def is_mdm_folder(path: str | Path) -> bool:
    p = Path(path).expanduser()
    return (p / VOCAB_FILE).is_file() and (p / "config.json").is_file()


def save_mdm(model: torch.nn.Module, tokenizer: MDMTokenizer, folder: str | Path, extra: Optional[dict[str, Any]] = None) -> Path:
    """Write ``folder`` atomically (a temporary sibling folder renamed into place)."""
    from grpokit.model.loading import atomic_folder

    folder = Path(folder)
    with atomic_folder(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if extra is not None:
            (tmp / "mdm_build.json").write_text(json.dumps(extra, indent=1))
    return folder


def load_mdm(folder: str | Path, device: Any = None) -> tuple[torch.nn.Module, MDMTokenizer]:
    """``(model, tokenizer)`` of a masked-diffusion folder (``config.json`` + weights + ``mdm_vocab.json``)."""
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(folder, local_files_only=True)
    if device is not None:
        model.to(device)
    return model, MDMTokenizer.from_pretrained(folder)
