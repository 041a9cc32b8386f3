"""The tiny class-conditional velocity network (diffusers ``UNet2DModel``) and classifier-free guidance.

``TinyFlowModel`` wraps a pixel-space ``UNet2DModel`` (no attention, one layer per block) whose
``num_class_embeds`` is the number of conditions plus one null class for classifier-free
guidance; the model timestep is 1000·σ, as diffusers' ``FlowMatchEulerDiscreteScheduler`` feeds
it. Pixels live in [−1, 1]. The folder format is grpokit's own: ``flow_config.json`` (the UNet
config and the condition names) and ``model.safetensors`` (the state dict), so a checkpoint of a
run is itself a loadable model.

Guidance (Flow-GRPO, arXiv 2505.05470, its code's ``train.cfg``): v = v_u + w·(v_c − v_u) with the
same w in rollout and learning, the unconditional branch computed **without gradient** during
learning, and w = 1 skipping the unconditional forward. The two branches are separate forwards
(never a concatenated batch), identical in rollout and learning, so the replayed log-probs match
the recorded ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

CONFIG_FILE = "flow_config.json"
WEIGHTS_FILE = "model.safetensors"
INSTALL_HINT = "the flow-matching image policy needs diffusers: pip install 'grpokit[diffusion]'"


def require_diffusers() -> Any:
    """The ``diffusers`` module, or an ImportError whose message is the one-line install hint."""
    try:
        import diffusers
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return diffusers


def unet_config(size: int = 8, num_classes: int = 12, channels: tuple = (32, 64)) -> dict:
    """A tiny ``UNet2DModel`` config: pixel space, RGB, ``channels`` per block, 8 norm groups, no attention."""
    return {
        "sample_size": size, "in_channels": 3, "out_channels": 3, "layers_per_block": 1,
        "block_out_channels": list(channels), "norm_num_groups": 8,
        "down_block_types": ["DownBlock2D"] * len(channels), "up_block_types": ["UpBlock2D"] * len(channels),
        "num_class_embeds": num_classes + 1,  # + the null class of classifier-free guidance
    }


class TinyFlowModel(torch.nn.Module):
    """v_θ(x, σ, c): ``x [B, 3, H, W]``, ``sigma [B]``, ``labels [B]`` (null class = ``num_classes``) -> ``[B, 3, H, W]``."""

    grpokit_family = "flow"  # the trainer's setup picks the flow-matching policy for it

    def __init__(self, config: dict, class_names: list[str]) -> None:
        super().__init__()
        diffusers = require_diffusers()
        self.config_dict, self.class_names = dict(config), list(class_names)
        self.unet = diffusers.UNet2DModel(**config)
        self.num_classes = config["num_class_embeds"] - 1
        self.size = config["sample_size"]

    @property
    def null_class(self) -> int:
        return self.num_classes

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.unet(x, sigma * 1000.0, class_labels=labels).sample.float()

    def save_pretrained(self, folder: str | Path, **_: Any) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_FILE).write_text(json.dumps({"unet": self.config_dict, "class_names": self.class_names}, indent=2))
        save_file({k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}, str(folder / WEIGHTS_FILE))

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "TinyFlowModel":
        from safetensors.torch import load_file

        folder = Path(folder)
        meta = json.loads((folder / CONFIG_FILE).read_text())
        model = cls(meta["unet"], meta["class_names"])
        model.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
        return model


class FlowConditions:
    """The flow policy's stand-in for a tokenizer: the condition names (checkpoints save them beside the weights)."""

    pad_token_id = 0

    def __init__(self, class_names: list[str]) -> None:
        self.class_names = list(class_names)

    def save_pretrained(self, folder: str | Path) -> None:
        (Path(folder) / "conditions.json").write_text(json.dumps(self.class_names))

    def get_vocab(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.class_names)}


def guided_velocity(model: torch.nn.Module, x: torch.Tensor, sigma: torch.Tensor, labels: torch.Tensor,
                    scale: float, null_class: int) -> torch.Tensor:
    """v_u + w·(v_c − v_u) ``[B, 3, H, W]``; the unconditional branch is computed without gradient (w = 1: v_c alone)."""
    v_cond = model(x, sigma, labels)
    if scale == 1.0:
        return v_cond
    with torch.no_grad():
        v_uncond = model(x, sigma, torch.full_like(labels, null_class))
    return v_uncond + scale * (v_cond - v_uncond)


def is_flow_folder(path: str | Path) -> bool:
    return (Path(path).expanduser() / CONFIG_FILE).is_file()
