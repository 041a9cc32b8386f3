"""Qwen2-VL's multimodal processing: chat text with image / video pads -> input ids and pixel rows.

What ``Qwen2VLProcessor`` does, written out so that it runs without torchvision (which
transformers' video processor imports, and for which no CPU wheel matching torch 2.13 is on this
machine): images go through ``Qwen2VLImageProcessorPil`` (resize to a multiple of patch x merge
within [min, max] pixels, rescale, normalise, cut into patch rows of ``3 * 2 * p * p`` values);
a video's frames are resized and normalised the same way and cut into rows that span
``temporal_patch_size`` consecutive frames (Qwen2-VL's layout ``[t, h/m, w/m, m, m, C, tp, p, p]``);
each ``<|image_pad|>`` / ``<|video_pad|>`` of the text is expanded to ``t * h * w / merge^2`` copies,
and ``mm_token_type_ids`` marks them (1 image, 2 video) for the multimodal RoPE.
Bad input gets one line naming the row and column (:class:`VisionInputError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch
from PIL import Image

IMAGE_PAD, VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"


class VisionInputError(ValueError):
    """A row's image or video cannot be used; the message names the row and the column."""


@dataclass
class Encoded:
    """One sample's processed condition: ids ``[L]``, token types ``[L]``, pixel rows and grids (``None`` when absent)."""

    input_ids: list[int]
    mm_token_type_ids: list[int]
    pixel_values: Optional[torch.Tensor]  # [rows, 3 * tp * p * p]
    image_grid_thw: Optional[torch.Tensor]  # [images, 3]
    pixel_values_videos: Optional[torch.Tensor]
    video_grid_thw: Optional[torch.Tensor]


def load_image(value: Any, where: str) -> Image.Image:
    """A PIL image from a PIL image or a file path; a missing or unreadable file names ``where``."""
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, (str, Path)):
        path = Path(value).expanduser()
        if not path.is_file():
            raise VisionInputError(f"{where}: image file '{value}' does not exist")
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except Exception as exc:  # PIL raises several types for a damaged file
            raise VisionInputError(f"{where}: image file '{value}' cannot be read ({type(exc).__name__}: {exc})") from None
    raise VisionInputError(f"{where}: expected a PIL image or an image file path, got {type(value).__name__}")


class VisionProcessor:
    """Tokenizer + Qwen2-VL image processor; ``encode(text, images, video)`` gives one sample's :class:`Encoded`.

    ``max_pixels`` policy: an image larger than the processor's pixel limit is *resized* into it
    by the processor (Qwen2-VL's ``smart_resize``), which this class documents rather than
    refuses; ``too_large="refuse"`` refuses such an image instead (one line naming the row).
    """

    def __init__(self, tokenizer: Any, image_processor: Any, *, too_large: str = "resize") -> None:
        if too_large not in ("resize", "refuse"):
            raise ValueError(f"too_large must be 'resize' or 'refuse', got {too_large!r}")
        self.tokenizer, self.image_processor, self.too_large = tokenizer, image_processor, too_large
        self.merge = int(image_processor.merge_size)
        self.patch = int(image_processor.patch_size)
        self.temporal = int(image_processor.temporal_patch_size)
        self.max_pixels = int(image_processor.size["longest_edge"])
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        self.video_token_id = tokenizer.convert_tokens_to_ids(VIDEO_PAD)

    @classmethod
    def from_pretrained(cls, path: str | Path, tokenizer: Any, **kwargs: Any) -> "VisionProcessor":
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        return cls(tokenizer, Qwen2VLImageProcessorPil.from_pretrained(str(path)), **kwargs)

    # ------------------------------------------------------------------ pixels
    def _check_size(self, image: Image.Image, where: str) -> None:
        if self.too_large == "refuse" and image.width * image.height > self.max_pixels:
            raise VisionInputError(f"{where}: image of {image.width}x{image.height} px exceeds the processor's pixel limit "
                                   f"({self.max_pixels} px); resize it or set too_large=resize")

    def image_rows(self, images: Sequence[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
        """(pixel rows ``[sum t*h*w, 3*tp*p*p]``, grids ``[n, 3]``) of still images (the processor's own output)."""
        out = self.image_processor(images=list(images), return_tensors="pt")
        return out["pixel_values"].float(), out["image_grid_thw"].long()

    def video_rows(self, frames: Sequence[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
        """(pixel rows ``[t*h*w, 3*tp*p*p]``, grid ``[1, 3]``) of one clip; frames must be a multiple of ``temporal_patch_size``."""
        single = self.image_processor(images=list(frames), return_tensors="np")  # one call: resize, rescale, normalise
        arrays, start = [], 0
        for grid in single["image_grid_thw"]:
            n = int(grid.prod())
            arrays.append(self._unpatchify(single["pixel_values"][start : start + n], int(grid[1]), int(grid[2])))
            start += n
        video = np.stack(arrays)  # [T, C, H, W]
        t, c, h, w = video.shape
        gt, gh, gw, m, p, tp = t // self.temporal, h // self.patch, w // self.patch, self.merge, self.patch, self.temporal
        rows = video.reshape(gt, tp, c, gh // m, m, p, gw // m, m, p).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
        rows = rows.reshape(gt * gh * gw, c * tp * p * p)
        grid = torch.tensor([[gt, gh, gw]], dtype=torch.long, device="cpu")  # host-side, as the image processor's
        return torch.from_numpy(np.ascontiguousarray(rows)).float(), grid

    def _unpatchify(self, rows: np.ndarray, gh: int, gw: int) -> np.ndarray:
        """The normalised image ``[C, H, W]`` back from a still image's patch rows (its first temporal copy)."""
        m, p, tp = self.merge, self.patch, self.temporal
        x = rows.reshape(gh // m, gw // m, m, m, 3, tp, p, p)[:, :, :, :, :, 0]  # [gh/m, gw/m, m, m, C, p, p]
        return x.transpose(4, 0, 2, 5, 1, 3, 6).reshape(3, gh * p, gw * p)

    # ------------------------------------------------------------------ text + pixels
    def pixels(self, images: Sequence[Any] = (), video: Optional[Sequence[Any]] = None, *, where: str = "row",
               min_frames: int = 0) -> Encoded:
        """A sample's pixel fields alone (``input_ids`` empty): the images' rows and grids, the video's."""
        pil = []
        for j, value in enumerate(images):
            img = load_image(value, f"{where}, column 'images'[{j}]")
            self._check_size(img, f"{where}, column 'images'[{j}]")
            pil.append(img)
        pixel_values = image_grid = videos = video_grid = None
        if pil:
            pixel_values, image_grid = self.image_rows(pil)
        if video is not None:
            frames = [load_image(v, f"{where}, column 'video'[{j}]") for j, v in enumerate(video)]
            need = max(min_frames, self.temporal)
            if len(frames) < need or len(frames) % self.temporal:
                raise VisionInputError(f"{where}: column 'video' has {len(frames)} frames; the config asks for at least "
                                       f"{need}, a multiple of temporal_patch_size={self.temporal}")
            for j, frame in enumerate(frames):
                self._check_size(frame, f"{where}, column 'video'[{j}]")
            videos, video_grid = self.video_rows(frames)
        return Encoded([], [], pixel_values, image_grid, videos, video_grid)

    def encode(self, text: str, images: Sequence[Any] = (), video: Optional[Sequence[Any]] = None, *,
               where: str = "row", min_frames: int = 0) -> Encoded:
        """One sample: ``text`` holds one ``<|image_pad|>`` per image (and one ``<|video_pad|>`` for the video)."""
        if text.count(IMAGE_PAD) != len(images):
            raise VisionInputError(f"{where}: the prompt has {text.count(IMAGE_PAD)} image placeholders but the row has "
                                   f"{len(images)} images (column 'images')")
        if (video is not None) != (VIDEO_PAD in text):
            raise VisionInputError(f"{where}: the prompt's video placeholder and the row's 'video' column disagree")
        px = self.pixels(images, video, where=where, min_frames=min_frames)
        per_image = [int(g.prod()) // self.merge**2 for g in px.image_grid_thw] if images else []
        per_video = int(px.video_grid_thw[0].prod()) // self.merge**2 if video is not None else 0
        ids: list[int] = []
        types: list[int] = []
        image_index = 0
        for token in self.tokenizer(text, add_special_tokens=False).input_ids:
            if token == self.image_token_id:
                ids += [token] * per_image[image_index]
                types += [1] * per_image[image_index]
                image_index += 1
            elif token == self.video_token_id:
                ids += [token] * per_video
                types += [2] * per_video
            else:
                ids.append(token)
                types.append(0)
        return Encoded(ids, types, px.pixel_values, px.image_grid_thw, px.pixel_values_videos, px.video_grid_thw)


def collate(samples: Sequence[Encoded], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Left-padded ``input_ids``, ``attention_mask``, ``mm_token_type_ids`` ``[n, L]`` plus the stacked pixel fields, on ``device``."""
    width = max(len(s.input_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(samples), width), dtype=torch.long, device=device)
    types = torch.zeros((len(samples), width), dtype=torch.long, device=device)
    for i, s in enumerate(samples):
        n = len(s.input_ids)
        ids[i, width - n:] = torch.tensor(s.input_ids, dtype=torch.long, device=device)
        mask[i, width - n:] = 1
        types[i, width - n:] = torch.tensor(s.mm_token_type_ids, dtype=torch.long, device=device)
    out = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types}
    return {**out, **stack_pixels(samples, device)}


def stack_pixels(samples: Sequence[Encoded], device: torch.device) -> dict[str, torch.Tensor]:
    """The samples' pixel rows and grids concatenated in sample order (the model splits them by grid), on ``device``."""
    out: dict[str, torch.Tensor] = {}
    for field, grid in (("pixel_values", "image_grid_thw"), ("pixel_values_videos", "video_grid_thw")):
        parts = [s for s in samples if getattr(s, field) is not None]
        if parts:
            out[field] = torch.cat([getattr(s, field) for s in parts]).to(device)
            out[grid] = torch.cat([getattr(s, grid) for s in parts]).to(device)
    return out
