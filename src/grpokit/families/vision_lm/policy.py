"""The vision-language family (Qwen2-VL): text tokens are the units, conditioned on images and video.

Data follow TRL's VLM convention: a row's ``images`` column holds PIL images or file paths, one
per image placeholder; a ``video`` column holds one clip as a list of frames. A string prompt
becomes one user message whose content is the images, the video, then the text (as TRL puts the
images before the text). The tokens trained are the tokens sampled: rollout and learning see the
same expanded ids (image pads included), and rewards get the row's ``images`` / ``video`` columns
as any other column.

* **Rollout** (:class:`VisionBackend`): each prompt (image tokens included) is prefilled once and
  its KV cache is shared by the G completions of its group; the multimodal RoPE positions come
  from the model's own ``get_rope_index`` and grow by one per decoded token.
* **Scoring and learning**: one forward over prompt + completion with the rows' pixel rows (a
  micro-batch re-encodes exactly its own rows' images, so any slicing gives the same log-probs),
  the completion positions through the chunked LM head.
* **Transformed condition** (``score(mb, condition="masked")``): PAPO's masked image, built the
  authors' way -- patches of the *image itself* blackened (:func:`~grpokit.families.vision_lm.procedural.blacken_patches`,
  aligned to the processor's patch grid), then the processor run again; the ids and grids must
  be unchanged (checked). One mask per group and step, seeded by (seed, step, group) [inferred:
  the authors draw one per sample]. Rows without images score their original log-probs
  (PAPO's perception KL is then exactly 0 for them).
"""

from __future__ import annotations

import copy
import random
from collections import OrderedDict
from typing import Any, Optional

import torch

from grpokit.model.logprobs import cache_kwarg, masked_head_logprobs, output_cache
from grpokit.families.policy import Capabilities, ModulePolicy, UnitForward
from grpokit.rollout.hf import completion_mask_from_eos, next_tokens, special_ids
from grpokit.rollout.types import RolloutBatch, SamplingParams, group_batch
from grpokit.families.vision_lm.procedural import blacken_patches
from grpokit.families.vision_lm.processor import Encoded, VisionInputError, VisionProcessor, collate, stack_pixels

# Never sampled: a sampled image / video pad would be read as a placeholder by the next forward. The
# sampler renormalises over the other tokens (its recorded log-probs are exact); the learner's
# softmax keeps them, which only an off-policy correction would notice [inferred].
VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def vision_messages(row: dict[str, Any], system_prompt: Optional[str]) -> list[dict[str, Any]]:
    """The row's conversation with image / video content parts first in the (last) user message."""
    images = row.get("images") or []
    parts = [{"type": "image"} for _ in images] + ([{"type": "video"}] if row.get("video") is not None else [])
    prompt = row["prompt"]
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": parts + [{"type": "text", "text": prompt}]}]
    else:  # conversational: the parts go into the first user message that has none
        messages = copy.deepcopy(prompt)
        has_parts = any(isinstance(m["content"], list) for m in messages)
        if not has_parts:
            first = next(i for i, m in enumerate(messages) if m["role"] == "user")
            messages[first]["content"] = parts + [{"type": "text", "text": messages[first]["content"]}]
    if system_prompt is not None and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": system_prompt}] + messages
    return messages


def base_model(module: torch.nn.Module) -> torch.nn.Module:
    return module.get_base_model() if hasattr(module, "get_base_model") else module


class VisionBackend:
    """Sampling from a Qwen2-VL module: prompts prefilled once per group, G completions decoded from the shared cache."""

    engine = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Any, encoder: "ConditionEncoder") -> None:
        self.model, self.tokenizer, self.encoder = model, tokenizer, encoder
        self.eos_ids, self.pad_id = special_ids(model, tokenizer)
        self.visual_tokens = {"image": 0.0, "video": 0.0}  # per prompt, last batch sampled
        ids = tokenizer.convert_tokens_to_ids
        self.never_sampled = sorted({ids(t) for t in VISION_TOKENS if ids(t) is not None and ids(t) != tokenizer.unk_token_id})

    @torch.no_grad()
    def generate(self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams) -> RolloutBatch:
        device = next(self.model.parameters()).device
        samples = [self.encoder.encode(text, row, f"row {i}") for i, (text, row) in enumerate(zip(prompt_texts, rows))]
        inputs = collate(samples, self.pad_id, device)
        types = inputs["mm_token_type_ids"]
        self.visual_tokens = {kind: float((types == code).sum()) / max(len(samples), 1) for kind, code in (("image", 1), ("video", 2))}
        was_training = self.model.training
        self.model.eval()
        try:
            ids, logps, ents = self._decode(inputs, group_size, params)
        finally:
            self.model.train(was_training)
        mask, truncated = completion_mask_from_eos(ids, self.eos_ids)
        width = int(mask.sum(-1).max().clamp(min=1))
        ids, mask = ids[:, :width], mask[:, :width]
        return group_batch(self.tokenizer, inputs["input_ids"], inputs["attention_mask"], rows, group_size,
                           ids, mask, logps[:, :width] * mask, truncated, ents[:, :width] * mask)

    def _decode(self, inputs: dict[str, torch.Tensor], group_size: int, params: SamplingParams):
        model = self.model
        base = base_model(model)
        positions, _ = base.model.get_rope_index(
            inputs["input_ids"], inputs["mm_token_type_ids"], inputs.get("image_grid_thw"), inputs.get("video_grid_thw"),
            inputs["attention_mask"],
        )  # [3, n, L]
        out = model(**inputs, position_ids=positions, use_cache=True, logits_to_keep=1)
        cache, key = output_cache(out), cache_kwarg(model)
        n, device = inputs["input_ids"].shape[0], inputs["input_ids"].device
        expand = torch.arange(n, device=device).repeat_interleave(group_size)
        if group_size > 1:
            cache.reorder_cache(expand)
        logits = out.logits[expand, -1]
        attention = inputs["attention_mask"][expand]
        next_pos = positions[:, expand, -1] + 1  # [3, B]: text after the prompt advances all three axes together
        b = n * group_size
        tokens = torch.full((b, params.max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        logps = torch.zeros(b, params.max_new_tokens, device=device)
        ents = torch.zeros(b, params.max_new_tokens, device=device)
        live = torch.ones(b, dtype=torch.bool, device=device)
        eos = torch.tensor(self.eos_ids, device=device)
        never = torch.tensor(self.never_sampled, device=device)  # placeholders: sampled, they would break the pixel layout
        for t in range(params.max_new_tokens):
            tok, lp, ent = next_tokens(logits, params, banned=torch.cat([never, eos]) if t < params.min_new_tokens else never)
            tok = torch.where(live, tok, torch.full_like(tok, self.pad_id))
            tokens[:, t], logps[:, t], ents[:, t] = tok, lp * live, ent * live
            live = live & ~torch.isin(tok, eos)
            if t == params.max_new_tokens - 1 or not bool(live.any()):
                break
            attention = torch.cat([attention, attention.new_ones(b, 1)], dim=1)
            out = model(input_ids=tok.unsqueeze(-1), attention_mask=attention, position_ids=next_pos.unsqueeze(-1),
                        use_cache=True, **{key: cache})
            cache, logits, next_pos = output_cache(out), out.logits[:, -1], next_pos + 1
        return tokens, logps, ents


class ConditionEncoder:
    """Rows' images / video -> :class:`Encoded` samples, plain or transformed (PAPO's masked image)."""

    CACHE_ROWS = 1024  # processed pixels kept per data row (LRU): each image is processed once, not every step

    def __init__(self, processor: VisionProcessor, *, min_frames: int = 0) -> None:
        self.processor, self.min_frames = processor, min_frames
        self._cache: "OrderedDict[int, tuple[dict, Encoded]]" = OrderedDict()  # id(row) -> (row kept alive, pixels)

    def _items(self, row: dict[str, Any], where: str, transform) -> tuple[list, Any]:
        images, video = list(row.get("images") or []), row.get("video")
        if transform is not None:
            from grpokit.families.vision_lm.processor import load_image

            images = [transform(load_image(v, f"{where}, column 'images'")) for v in images]
            video = [transform(load_image(v, f"{where}, column 'video'")) for v in video] if video is not None else None
        return images, video

    def encode(self, text: str, row: dict[str, Any], where: str) -> Encoded:
        """Ids, token types and pixel fields of a rendered prompt and its row."""
        images, video = self._items(row, where, None)
        return self.processor.encode(text, images, video, where=where, min_frames=self.min_frames)

    def pixels(self, row: dict[str, Any], where: str, transform=None) -> Encoded:
        """The row's pixel fields alone, its images (and frames) first passed through ``transform`` (then not cached)."""
        if transform is None:
            hit = self._cache.get(id(row))
            if hit is not None and hit[0] is row:
                self._cache.move_to_end(id(row))
                return hit[1]
        images, video = self._items(row, where, transform)
        out = self.processor.pixels(images, video, where=where, min_frames=self.min_frames)
        if transform is None:
            self._cache[id(row)] = (row, out)
            if len(self._cache) > self.CACHE_ROWS:
                self._cache.popitem(last=False)
        return out


class VisionLMPolicy(ModulePolicy):
    """A Qwen2-VL module (optionally LoRA), its tokenizer and processor, a frozen reference when needed.

    The reference is the frozen copy, or for LoRA the module with its adapter disabled (as the
    causal-LM family: :meth:`~grpokit.families.policy.ModulePolicy.role_module`).

    mask_probability / patch: PAPO's patch blackening (authors: 0.6, 14 px = the processor's patch).
    """

    def __init__(self, module: torch.nn.Module, tokenizer: Any, processor: VisionProcessor, *,
                 reference: Optional[torch.nn.Module] = None, temperature: float = 1.0, use_reference: bool = False,
                 mask_probability: float = 0.6, seed: int = 0, min_frames: int = 0) -> None:
        self.module, self.tokenizer, self.processor = module, tokenizer, processor
        self.reference, self.teacher, self.use_reference = reference, None, use_reference
        self.temperature, self.mask_probability, self.seed = temperature, mask_probability, seed
        self.encoder = ConditionEncoder(processor, min_frames=min_frames)
        self.backend = VisionBackend(module, tokenizer, self.encoder)
        self.capabilities = self.capabilities_for()
        self.step = 0

    @staticmethod
    def capabilities_for(engine: str = "hf") -> Capabilities:
        return Capabilities(unit_kind="token", entropy=True, behaviour_logprobs_exact=True, prompt_kv_sharing=True,
                            condition_override=True, visual_input=True, engine="hf")

    def begin_step(self, step: int) -> None:
        self.step = step

    def sampler_metrics(self) -> dict[str, float]:
        """Image and video tokens per prompt of the last sampled batch (the condition reached the model)."""
        return {f"vision/{kind}_tokens": n for kind, n in self.backend.visual_tokens.items()}

    def render(self, rows: list[dict], system_prompt: Optional[str]) -> list[str]:
        """Prompt texts with one image / video placeholder per item of the row (the tokenizer's chat template)."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("the vision-language policy needs a tokenizer with a chat template (image content parts)")
        return [self.tokenizer.apply_chat_template(vision_messages(row, system_prompt), tokenize=False, add_generation_prompt=True)
                for row in rows]

    def sample(self, prompts: list[str], rows: list[dict[str, Any]], group_size: int, params: SamplingParams) -> RolloutBatch:
        return self.backend.generate(prompts, rows, group_size, params)

    # ------------------------------------------------------------------ conditions
    def _masker(self, group: int):
        rng = random.Random(f"grpokit/papo/{self.seed}/{self.step}/{group}")
        patch, p = self.processor.patch, self.mask_probability
        return lambda image: blacken_patches(image, patch, p, rng)

    def _inputs(self, mb: RolloutBatch, condition: Optional[str]) -> dict[str, torch.Tensor]:
        """Pixel fields of the micro-batch's rows (one encoding per group), plain or under ``condition``."""
        if condition not in (None, "masked"):
            raise ValueError(f"unknown condition {condition!r}: None or 'masked'")
        by_group: dict[int, Encoded] = {}
        samples = []
        for i, g in enumerate(mb.group_ids.tolist()):
            if g not in by_group:
                plain = self.encoder.pixels(mb.rows[i], f"row {i}")
                enc = plain
                if condition == "masked" and (plain.pixel_values is not None or plain.pixel_values_videos is not None):
                    enc = self.encoder.pixels(mb.rows[i], f"row {i}", transform=self._masker(g))
                    if not _same_grids(enc, plain):  # same grids = same image-pad count = the batch's ids still fit
                        raise VisionInputError(f"row {i}: the masked image changed the processor's grid")
                by_group[g] = enc
            samples.append(by_group[g])
        return stack_pixels(samples, mb.device)

    def _forward(self, module: torch.nn.Module, mb: RolloutBatch, pixels: dict[str, torch.Tensor], *,
                 with_entropy: bool = False, entropy_grad: bool = False):
        base = base_model(module)
        ids = torch.cat([mb.prompt_ids, mb.completion_ids], dim=1)
        mask = torch.cat([mb.prompt_mask, mb.completion_mask], dim=1)
        types = torch.zeros_like(ids)
        types[ids == self.processor.image_token_id] = 1
        types[ids == self.processor.video_token_id] = 2
        types[:, mb.prompt_ids.shape[1]:] = 0  # completions are text, whatever they sampled
        positions, _ = base.model.get_rope_index(ids, types, pixels.get("image_grid_thw"), pixels.get("video_grid_thw"), mask)
        hidden = base.model(input_ids=ids, attention_mask=mask, position_ids=positions, mm_token_type_ids=types,
                            **pixels).last_hidden_state
        p, t = mb.prompt_ids.shape[1], mb.completion_ids.shape[1]
        head = base.get_output_embeddings().weight
        return masked_head_logprobs(hidden[:, p - 1 : p + t - 1], head, mb.completion_ids, mb.completion_mask,
                                    temperature=self.temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)

    # ------------------------------------------------------------------ Policy
    @torch.no_grad()
    def score(self, mb: RolloutBatch, role: str = "current", condition: Optional[str] = None) -> torch.Tensor:
        """``[b, T]`` log-probs; ``condition='masked'``: under the rows' patch-blackened images (PAPO)."""
        if role not in ("current", "previous", "reference"):
            raise ValueError(f"the vision-language policy has no '{role}' role (current, previous or reference)")
        module, ctx = self.role_module(role)  # LoRA: the reference is the base weights, adapter disabled
        with ctx:
            logp, _ = self._forward(module, mb, self._inputs(mb, condition))
        return logp

    def sync_reference(self) -> None:
        if self.reference is None:
            raise ValueError("reference syncing needs a reference copy: set model.lora.enabled=false")
        self.reference.load_state_dict(self.module.state_dict())

    def learn_forward(self, mb: RolloutBatch, *, with_entropy: bool, entropy_grad: bool) -> UnitForward:
        logp, entropy = self._forward(self.module, mb, self._inputs(mb, None), with_entropy=with_entropy,
                                      entropy_grad=entropy_grad)
        return UnitForward(logp, entropy, lambda loss: loss.backward())


def _same_grids(a: Encoded, b: Encoded) -> bool:
    for field in ("image_grid_thw", "video_grid_thw"):
        x, y = getattr(a, field), getattr(b, field)
        if (x is None) != (y is None) or (x is not None and not torch.equal(x, y)):
            return False
    return True
