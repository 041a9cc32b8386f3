"""Tiny, fully offline models and tokenizers for tests.

``tiny_model_and_tokenizer`` builds a randomly initialised ``LlamaForCausalLM`` (tied embeddings,
like SmolLM2) and a character-level tokenizer over printable ASCII, constructed in code with the
``tokenizers`` library, so tests never touch the network or a cache. The tokenizer speaks ChatML
(``<|im_start|>role\\n…<|im_end|>\\n``) like SmolLM2-Instruct, pads on the left, and ends
sequences with ``<|im_end|>``.
"""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<|im_start|>", "<|im_end|>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # ids 0, 1, 2, 3
CHARS = string.printable  # 100 characters, including "\n" and " "

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level ChatML tokenizer: 4 special tokens + 100 printable ASCII characters.

    Ids: ``<pad>`` 0, ``<|im_start|>`` 1 (bos), ``<|im_end|>`` 2 (eos), ``<unk>`` 3 (any
    non-ASCII character), then ``string.printable`` in order. Decoding concatenates characters.
    """
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + tuple(CHARS))}
    # BPE with no merges splits every word into single characters; no pre-tokenizer, so spaces
    # and newlines are ordinary characters and decoding is a plain concatenation.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        model_max_length=1024,
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_model_and_tokenizer(
    seed: int = 0, hidden: int = 32, layers: int = 2
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A tiny random Llama (tied embeddings, fp32) and ``tiny_tokenizer()``, fixed by ``seed``.

    ``hidden`` must be a multiple of 4 (4 attention heads, 2 key/value heads). The global torch
    RNG is left untouched.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden <= 0 or hidden % 4:
        raise ValueError(f"hidden={hidden} must be a positive multiple of 4 (4 attention heads)")
    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def save_tiny_model(directory: str | os.PathLike[str], seed: int = 0, **kwargs: int) -> str:
    """Save ``tiny_model_and_tokenizer(seed, **kwargs)`` with save_pretrained; returns the dir."""
    model, tokenizer = tiny_model_and_tokenizer(seed=seed, **kwargs)
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def save_tiny_encoder(directory: "str | os.PathLike", seed: int = 0) -> str:
    """Write a tiny random BERT encoder + word-level tokenizer to ``directory`` (reward-model tests)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "please", "weapon", "install", "answer",
             "the", "user's", "request", "."] + "a report weather blue table river music garden".split()
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    BertTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(folder)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    torch.random.set_rng_state(state)
    return str(folder)


def implicit_device_recorder():
    """A TorchFunctionMode recording each tensor factory grpokit calls without ``device=``.

    ``with implicit_device_recorder() as rec: ...`` then ``rec.hits`` holds ``(file, line, factory)``
    for every ``torch.zeros`` / ``torch.tensor`` / ``torch.arange`` / ... called from a file of
    grpokit without an explicit device: the calls that would put a tensor on the CPU (or the
    default device) whatever device the data lives on. Precise where a meta default device is
    silent (``torch.isin(cpu, meta)`` runs and returns garbage).
    """
    import sys

    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    import grpokit

    root, torch_root = str(Path(grpokit.__file__).parent), str(Path(torch.__file__).parent)
    factories = _device_constructors()

    class Recorder(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.hits: set[tuple[str, int, str]] = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in factories and kwargs.get("device") is None:
                frame = sys._getframe(1)
                while frame is not None and frame.f_code.co_filename.startswith(torch_root):
                    frame = frame.f_back  # torch's own wrappers
                if frame is not None and frame.f_code.co_filename.startswith(root) and not frame.f_code.co_filename.endswith("testing.py"):
                    self.hits.add((frame.f_code.co_filename, frame.f_lineno, func.__name__))
            return func(*args, **kwargs)

        def report(self) -> str:
            return ", ".join(f"{Path(f).relative_to(root)}:{line} torch.{name}" for f, line, name in sorted(self.hits))

    return Recorder()


def binary_search_guesser(self, input_ids, attention, group_size, params, past=None, keep_cache=False):
    """A scripted ``HFBackend._decode`` for the ``guess_number`` environment: halve the range stated in the first
    observation by every "Higher." / "Lower." reply in the context (SmolLM2's chat template) and guess its middle.

    Patch it in with ``monkeypatch.setattr(HFBackend, "_decode", binary_search_guesser)`` and
    ``environment.kv_cache=false`` (each turn must see its whole context).
    """
    import re

    import torch

    assert past is None and not keep_cache  # environment.kv_cache=false: each turn sees its whole context
    turns = []
    for ids, att in zip(input_ids.cpu(), attention.cpu()):
        text = self.tokenizer.decode(ids[att.bool()].tolist())
        lo, hi = map(int, re.search(r"from (-?\d+) to (-?\d+)", text).groups())
        for guess, reply in re.findall(r"assistant\n(-?\d+)<\|im_end\|>\n<\|im_start\|>user\n(Higher|Lower)\.", text):
            lo, hi = (int(guess) + 1, hi) if reply == "Higher" else (lo, int(guess) - 1)
        turns += [self.tokenizer(str((lo + hi) // 2), add_special_tokens=False).input_ids + [self.eos_ids[0]]] * group_size
    tokens = torch.full((len(turns), max(map(len, turns))), self.pad_id, dtype=torch.long, device=input_ids.device)
    for r, t in enumerate(turns):
        tokens[r, : len(t)] = torch.tensor(t, dtype=torch.long, device=input_ids.device)
    return tokens, torch.full(tokens.shape, -0.5, device=input_ids.device), torch.ones(tokens.shape, device=input_ids.device)
