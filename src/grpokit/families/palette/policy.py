"""The Co-GRPO policy (image-token masked model + schedule policy) behind grpokit's Policy interface.

See :mod:`grpokit.families.palette.cogrpo` for the MDP, the units and what is inferred. A batch is a
:class:`~grpokit.families.masked_diffusion.policy.CanvasBatch`: ``completion_ids`` = the 64 image
tokens, ``commit_step`` the sampler's record, ``schedule_actions [B, K, 4]`` the schedule actions;
``action_mask`` marks the 2K units (K without a stochastic schedule); ``sampling_logp`` holds the
sampler's own unit log-probs (exact). The embedded model ``tiny-palette-mdm`` is pretrained here
(:func:`~grpokit.families.palette.images.pretrain_palette`, about a minute on one thread) on first use.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Optional

import torch

from grpokit.families.palette.cogrpo import CoGRPOModel, Schedule, sample_images, step_unit_logp
from grpokit.families.palette.images import PALETTE_VOCAB, PaletteTokenizer, build_palette_predictor, pretrain_palette
from grpokit.families.policy import Capabilities, ModulePolicy, UnitForward
from grpokit.families.masked_diffusion.policy import CanvasBatch
from grpokit.rollout.types import RolloutBatch, SamplingParams

EMBEDDED_PALETTE = {"tiny-palette-mdm": "grpokit's class-conditional 8x8 palette mask predictor (noisy prior, built here)"}
VERSION = "v3"  # v3: fused AdamW (the same floats on every x86 CPU); v2: numerics pinned, weights fingerprinted


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


def is_palette_model(name: str) -> bool:
    from grpokit.trainer.checkpoint import CheckpointError, model_source

    if name in EMBEDDED_PALETTE:
        return True
    if not Path(name).expanduser().exists():
        return False
    try:
        return (Path(model_source(name)).expanduser() / PALETTE_VOCAB).is_file()
    except CheckpointError:
        return False


def palette_folder(name: str) -> Path:
    """The folder of ``name``: the embedded model's cache (pretrained on first use), else the folder or run checkpoint."""
    from grpokit.trainer.checkpoint import model_source

    if name not in EMBEDDED_PALETTE:
        return Path(model_source(name)).expanduser()
    from grpokit.model.fingerprint import log_fingerprint, pinned_build

    root = os.environ.get("GRPOKIT_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "grpokit")
    folder = Path(root).expanduser() / f"tiny-palette-mdm-{VERSION}"
    if not (folder / PALETTE_VOCAB).is_file():
        pinned_build("grpokit.families.palette.policy:build_palette", folder)
    log_fingerprint(folder, "tiny-palette-mdm")
    return folder


def build_palette(out: Path, *, seed: int = 0, steps: int = 400) -> Path:
    """The palette predictor at ``out``: built with ``seed``, MaskGIT noisy-prior pretrained, saved with its fingerprint; atomic.

    :func:`palette_folder` runs it in a child process with the CPU numerics pinned
    (:func:`grpokit.model.fingerprint.pinned_build`).
    """
    from grpokit.families.masked_diffusion.model import save_mdm
    from grpokit.model.fingerprint import record
    from grpokit.model.loading import atomic_folder

    predictor = build_palette_predictor(seed=seed)
    loss = pretrain_palette(predictor, steps=steps, seed=seed)
    with atomic_folder(out) as tmp:
        save_mdm(predictor, PaletteTokenizer(), tmp, extra={"version": VERSION, "pretrain_loss": loss})
        record(tmp, "tiny-palette-mdm", {"version": VERSION, "seed": seed, "steps": steps})
    return Path(out)


def load_cogrpo(name: str, steps: int, knobs: tuple[str, ...], std: float, lr_scale: float, device: Any = None):
    """``(CoGRPOModel, PaletteTokenizer)``: the predictor of ``name`` and a schedule (a run folder's own, else a fresh one)."""
    from transformers import AutoModelForMaskedLM

    folder = palette_folder(name)
    predictor = AutoModelForMaskedLM.from_pretrained(folder, local_files_only=True)
    schedule = Schedule(steps, knobs, std, lr_scale)
    saved = folder / "schedule.pt"
    if saved.is_file():
        state = torch.load(saved, map_location="cpu")
        if state["steps"] == steps:
            schedule.load_state_dict(state["state"])
    model = CoGRPOModel(predictor, schedule)
    return (model.to(device) if device is not None else model), PaletteTokenizer()


class CoGRPOPolicy(ModulePolicy):
    """theta + phi sampled as one MDP; units = step transitions and schedule actions (see the module docstring)."""

    def __init__(self, module: CoGRPOModel, tokenizer: PaletteTokenizer, *, reference: Optional[torch.nn.Module] = None,
                 seed: int = 0, use_reference: bool = False) -> None:
        self.module, self.tokenizer, self.reference, self.teacher = module, tokenizer, reference, None
        self.use_reference, self.seed, self.step, self.calls = use_reference, seed, 0, 0
        self.backend = self
        self.engine = "hf"
        self.capabilities = self.capabilities_for()

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    @staticmethod
    def capabilities_for() -> Capabilities:
        return Capabilities(previous_role=False, unit_kind="unmask_step", entropy=False, behaviour_logprobs_exact=True, logprob_is_surrogate=False,
                            units_share_one_forward=False, prompt_kv_sharing=False, condition_override=False, engine="hf")

    @property
    def stochastic_schedule(self) -> bool:
        return self.module.schedule.std > 0 and bool(self.module.schedule.learned.any())

    def begin_step(self, step: int) -> None:
        self.step = step

    def sampler_metrics(self) -> dict[str, float]:
        """The schedule's mean knob values, averaged over steps (what Co-GRPO moves), and ``schedule/moved``: max |mu_phi - init|."""
        schedule = self.module.schedule
        values = Schedule.values(schedule.mean().detach())
        moved = (schedule.mean() - schedule.init).detach().abs().max()  # how far mu_phi is from its initial schedule
        return {**{f"schedule/{k}": float(v.mean()) for k, v in values.items()}, "schedule/moved": float(moved)}

    def render(self, rows: list[dict], system_prompt: Optional[str]) -> list[str]:
        return [row["prompt"] for row in rows]

    def sample(self, prompts: list[str], rows: list[dict], group_size: int, params: SamplingParams) -> RolloutBatch:
        return self.generate(prompts, rows, group_size, params)

    @torch.no_grad()
    def generate(self, prompts: list[str], rows: list[dict], group_size: int, params: SamplingParams) -> CanvasBatch:
        device = self.device
        cond = torch.tensor([self.tokenizer.class_token(p) for p in prompts], dtype=torch.long, device=device)
        cond = cond.repeat_interleave(group_size)
        self.calls += 1
        gen = torch.Generator(device=device).manual_seed(_seed("grpokit/cogrpo", self.seed, self.step, self.calls))
        was = self.module.training
        self.module.eval()
        try:
            traj = sample_images(self.module, cond, self.tokenizer, gen, stochastic=True, greedy=params.greedy)
        finally:
            self.module.train(was)
        b, n = traj.canvas.shape
        steps = traj.actions.shape[1]
        units = [traj.token_logp] + ([traj.schedule_logp] if self.stochastic_schedule else [])
        sampling = torch.cat(units + [torch.zeros(b, n - steps * len(units), device=device)], dim=1)
        mask = torch.zeros(b, n, dtype=torch.long, device=device)
        mask[:, : steps * len(units)] = 1
        group_ids = torch.arange(len(rows), device=device).repeat_interleave(group_size)
        batch = CanvasBatch(
            prompt_ids=cond[:, None], prompt_mask=torch.ones(b, 1, dtype=torch.long, device=device), completion_ids=traj.canvas,
            completion_mask=torch.ones_like(traj.canvas), group_ids=group_ids, sampling_logp=sampling,
            truncated=torch.zeros(b, dtype=torch.bool, device=device), prompts=[rows[g]["prompt"] for g in group_ids.tolist()],
            completions=self.tokenizer.batch_decode(traj.canvas.tolist()), rows=[rows[g] for g in group_ids.tolist()],
            action_mask=mask, commit_step=traj.commit_step, estimator_seeds=torch.zeros(b, dtype=torch.long, device=device),
            schedule_actions=traj.actions,
        )
        return batch

    def _units(self, module: CoGRPOModel, mb: CanvasBatch) -> torch.Tensor:
        z = mb.schedule_actions if isinstance(mb, CanvasBatch) else None
        if z is None:
            raise ValueError("the Co-GRPO policy scores batches its own sampler returned (with schedule actions)")
        logp, _ = step_unit_logp(module, mb.prompt_ids[:, -1], mb.completion_ids, mb.commit_step, z, self.tokenizer,
                                 self.stochastic_schedule)
        return logp * mb.action_mask

    def score(self, mb: RolloutBatch, role: str = "current") -> torch.Tensor:
        module = self.module if role == "current" else self.reference if role == "reference" else None
        if module is None:
            raise ValueError(f"the Co-GRPO policy has no '{role}' role here (current, or reference with algorithm.beta > 0)")
        with torch.no_grad():
            return self._units(module, mb)

    def learn_forward(self, mb: RolloutBatch, *, with_entropy: bool, entropy_grad: bool) -> UnitForward:
        return UnitForward(self._units(self.module, mb), None, lambda loss: loss.backward())
