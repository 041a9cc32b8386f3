"""Config sections read only by one policy family: vision-language, masked-diffusion and flow-matching policies.

Part of the configuration tree of :mod:`grpokit.config.schema` (``Config.vision``,
``Config.diffusion``, ``Config.flow``); a field set here for another family's policy is refused
at load time.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpokit.config.fields import opt


@dataclass
class VisionConfig:
    """Images and video for a vision-language policy (``model.name`` a Qwen2-VL folder or ``tiny-qwen2vl``)."""

    mask_probability: float = opt(0.6, "PAPO's masked image: each processor-patch square of the image is blackened with this probability (authors: 0.6)", ge=0, le=1)
    min_frames: int = opt(0, "a row's video must have at least this many frames (0 = the processor's temporal patch, 2)", ge=0)
    too_large: str = opt("resize", "an image above the processor's pixel limit: resize it into the limit (Qwen2-VL's smart_resize) or refuse the row", choices=["resize", "refuse"])


@dataclass
class DiffusionConfig:
    """Sampling and likelihood of a masked-diffusion LM policy (``model.name`` tiny-mdm or a grpokit MDM folder); the canvas is rollout.max_new_tokens."""

    likelihood: str = opt("stand_in", "unit log-probs for RL: stand_in (d1), espo_elbo (ESPO sequence ELBO) or mask_grpo_step (Mask-GRPO steps); see `grpokit list`", registry="likelihood")
    likelihood_options: dict = opt({}, "keyword options of the likelihood (stand_in: prompt_mask_prob; espo_elbo: num_mc, coupled)")
    steps: int = opt(0, "unmasking steps per canvas (0 = the canvas length)", ge=0)
    block_length: int = opt(0, "semi-autoregressive block length (0 = the whole canvas at once)", ge=0)
    remasking: str = opt("low_confidence", "which proposals a step commits: the most confident (low_confidence) or random ones", choices=["low_confidence", "random"])
    schedule_knobs: list = opt(["remask_ratio", "temperature", "remask_temperature", "cfg"], "Co-GRPO (tiny-palette-mdm): the inference-schedule knobs the schedule policy learns; the others stay at MaskGIT's defaults")
    schedule_std: float = opt(0.3, "Co-GRPO: exploration std of the schedule actions in unconstrained space (0 = a deterministic schedule: Mask-GRPO)", ge=0)
    schedule_lr_scale: float = opt(1.0, "Co-GRPO: the schedule's step size relative to optim.lr (its own learning rate)", gt=0)


@dataclass
class FlowConfig:
    """Sampling and log-probs of a flow-matching image policy (``model.name`` tiny-flow or a grpokit flow folder; Flow-GRPO's SDE)."""

    steps: int = opt(10, "denoising steps K of a training rollout (Flow-GRPO: 10)", ge=1)
    eval_steps: int = opt(40, "denoising steps of a held-out evaluation sample, an ODE when eval_noise_level = 0 (Flow-GRPO: 40)", ge=1)
    noise_level: float = opt(0.7, "a of the SDE's diffusion coefficient g(sigma) = a * sqrt(sigma / (1 - sigma)) (Flow-GRPO: 0.7)", gt=0)
    eval_noise_level: float = opt(0.0, "a at evaluation (0 = the deterministic ODE)", ge=0)
    shift: float = opt(1.0, "sigma shift s * sigma / (1 + (s - 1) * sigma) of FlowMatchEulerDiscreteScheduler (DanceGRPO / Pref-GRPO: 3)", gt=0)
    train_fraction: float = opt(0.99, "trained denoising steps per sample = floor(fraction * steps) (Flow-GRPO: 0.99 -> 9 of 10; DanceGRPO / Pref-GRPO: 0.6)", gt=0, le=1)
    train_order: str = opt("first", "which steps are trained: the first ones in order (Flow-GRPO) or a fresh random subset per sample (DanceGRPO / Pref-GRPO)", choices=["first", "random"])
    guidance: float = opt(1.0, "classifier-free guidance scale w in rollout and learning, the unconditional branch without gradient (1 = off; Flow-GRPO: 4.5)", ge=0)
    same_noise: bool = opt(False, "the G samples of a group share their initial noise and differ only by SDE noise (DanceGRPO / Pref-GRPO init_same_noise)")
