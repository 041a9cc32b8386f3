"""A tiny Qwen2-VL built from a config, with its own word-level tokenizer and a Qwen-style chat template.

No vision-language model ships offline, so grpokit builds one: ``Qwen2VLForConditionalGeneration``
(text: hidden 64 by default for tests, 128 for the embedded model; 2 layers, 4 heads / 2 KV heads;
vision: depth 2, embed 32 by default, 64 for the embedded model; patch 14, merge 2),
a ``tokenizers`` WordLevel vocabulary of the procedural tasks' words plus Qwen2-VL's chat and
vision special tokens, a ``Qwen2VLImageProcessorPil`` (no torchvision needed; ``grpokit.families.vision_lm.processor`` does the rest) and a chat template
that renders image and video content parts as ``<|vision_start|><|image_pad|><|vision_end|>``
(``<|video_pad|>``), as Qwen2-VL's does. :func:`save_tiny_qwen2vl` writes a folder that
``model.name`` loads like any Hugging Face VLM folder (random weights; ``grpokit.families.vision_lm.pretrain``
gives them the noisy prior).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpokit.families.vision_lm.procedural import COLOURS, COUNT_WORDS, DIRECTIONS, QUESTIONS, SHAPES

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>", "<unk>"]
EXTRA_WORDS = ["system", "user", "assistant", "tool", "you", "are", "a", "helpful", "answer", "with", "one", "word",
               "hint", "look", "at", "first", "last", "frame", "and", "compare", "where", "it", "is", "each", "shape",
               "count", "them", "the", "colour", "of", "in", "what", "which", "how", "many", "are", "there",
               "does", "square", "move", "way", "appears", "they", "image", "edges", "already", ".", ",", "?", ":", "!", "'"]
PAD_TOKEN = "<|endoftext|>"

# Qwen2-VL's template, cut down: system / user / assistant turns, image and video parts, generation prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def vocabulary() -> list[str]:
    """Special tokens first (ids 0..7), then every word the tasks, questions and hints use, sorted."""
    words = set(EXTRA_WORDS) | set(COLOURS) | set(SHAPES) | set(COUNT_WORDS) | set(DIRECTIONS)
    for question in QUESTIONS.values():
        words |= set(question.lower().replace("?", " ?").split())
    words |= {str(d) for d in range(10)}
    return SPECIALS + sorted(words - set(SPECIALS))


def build_tokenizer():
    """A ``PreTrainedTokenizerFast`` over :func:`vocabulary` (lower-cased words and punctuation; specials kept whole)."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(vocabulary())}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # joins words with spaces, tidies punctuation
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token=PAD_TOKEN, eos_token="<|im_end|>",
        additional_special_tokens=[t for t in SPECIALS if t not in ("<unk>", PAD_TOKEN, "<|im_end|>")],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_image_processor(*, min_pixels: int = 56 * 56, max_pixels: int = 112 * 112):
    """Qwen2-VL's PIL image processor: 14 px patches, 2 x 2 merge, images resized into [min, max] pixels."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(size={"shortest_edge": min_pixels, "longest_edge": max_pixels})


def tiny_config(tokenizer: Any, *, hidden: int = 64, layers: int = 2, vision_depth: int = 2, vision_embed: int = 32):
    """``Qwen2VLConfig`` sized for CPU tests and minutes-long training (about 0.3 M parameters)."""
    from transformers import Qwen2VLConfig

    ids = tokenizer.convert_tokens_to_ids
    head_dim = hidden // 4
    half = head_dim // 2  # mrope sections split the rotary half-dimension into temporal / height / width
    section = [half - 2 * (half // 3), half // 3, half // 3]
    text = dict(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
                bos_token_id=ids(PAD_TOKEN), eos_token_id=ids("<|im_end|>"), pad_token_id=ids(PAD_TOKEN))
    vision = dict(depth=vision_depth, embed_dim=vision_embed, hidden_size=hidden, num_heads=4, mlp_ratio=2,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    return Qwen2VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=False,
    )


def save_tiny_qwen2vl(path: str | Path, seed: int = 0, **sizes: int) -> str:
    """Write a randomly initialised tiny Qwen2-VL (model, tokenizer, processor) to ``path``; returns the path."""
    import torch
    from transformers import GenerationConfig, Qwen2VLForConditionalGeneration

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(tiny_config(tokenizer, **sizes))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(path)
    build_image_processor().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
