"""The flow-matching image family (Flow-GRPO): the units are denoising steps, each a Gaussian policy.

Paper: Liu et al., "Flow-GRPO: Training Flow Matching Models via Online RL", arXiv 2505.05470
(§4: ODE-to-SDE conversion, denoising reduction; the authors' ``sde_step_with_logprob``). The
same machinery serves Pref-GRPO (arXiv 2508.20751: only the reward changes, a pairwise win rate)
and a DPP diversity reward over a group's images (DPP-GRPO, arXiv 2511.20647, applied to the
generator's own images: an extension, not that paper's setting).

* **Rollout** (:meth:`FlowMatchingPolicy.sample`): each sample starts from its own initial noise
  (or its group's shared noise with ``flow.same_noise``, DanceGRPO's ``init_same_noise``) and
  runs K = ``flow.steps`` SDE steps (:func:`~grpokit.families.flow_matching.sde.sample_sde`); every state
  x_0..x_K and each step's log-prob are recorded (float32; step *indices*, never float timesteps).
* **Units**: the trained steps of each sample, U = ⌊``train_fraction``·K⌋, the first U in order
  (Flow-GRPO) or a fresh random subset per sample (DanceGRPO / Pref-GRPO); ``completion_ids
  [B, U]`` holds each unit's step index and ``completion_mask`` is all ones, so every registered
  loss sees plain ``[B, U]`` tensors; the condition is ``labels [B]`` (``prompt_ids`` is empty, ``[B, 0]``). ``sampling_logp [B, U]`` are the recorded log-probs.
* **Scoring / learning**: one forward per unit (``units_share_one_forward = False``) on the stored
  (x_k, x_{k+1}) pair with the same guidance as rollout; ℓ = per-element mean Gaussian
  log-density of x_{k+1} under N(μ_θ(x_k), s_k²). Gradient reaches ℓ only through μ_θ.
* **Evaluation** (``backend.generate`` with greedy params): ``flow.eval_steps`` steps at
  ``flow.eval_noise_level`` (0: the ODE) from each row's fixed noise seed, so a held-out row is
  the same condition and the same noise before and after training.

Old log-probs: grpokit's learner uses the detached current log-probs when mu = 1 (ratio exactly
1 on the first update) and rescored ones when mu > 1; Flow-GRPO uses the recorded sampling
log-probs, which equal them up to numerical noise here (replay ratio 1, tested) [inferred:
equivalent on-policy]. The clip range ``algorithm.epsilon_low/high`` is the presets' 1e-4.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import torch

from grpokit.families.flow_matching.model import guided_velocity
from grpokit.families.flow_matching.rewards import GeneratedImage
from grpokit.families.flow_matching.sde import flow_sigmas, sample_sde, sde_step_stats, step_kl, step_logprob, trained_steps
from grpokit.families.policy import Capabilities, ModulePolicy, UnitForward
from grpokit.rollout.types import RolloutBatch, SamplingParams


@dataclass
class FlowSettings:
    """The sampler's options (``cfg.flow``): see :class:`grpokit.config.schema.FlowConfig` for each field."""

    steps: int = 10
    eval_steps: int = 40
    noise_level: float = 0.7
    eval_noise_level: float = 0.0
    shift: float = 1.0
    train_fraction: float = 0.99
    train_order: str = "first"
    guidance: float = 1.0
    same_noise: bool = False


@dataclass
class FlowRolloutBatch(RolloutBatch):
    """A RolloutBatch plus the replay record of each sample.

    states:  [B, K + 1, 3, H, W] x_0 (noise) .. x_K (the image, in [-1, 1]), float32
    labels:  [B] class ids of the conditions
    sigmas:  [K + 1] the schedule the states were drawn on
    """

    states: Optional[torch.Tensor] = None
    labels: Optional[torch.Tensor] = None
    sigmas: Optional[torch.Tensor] = None

    def select(self, index: torch.Tensor | slice) -> "FlowRolloutBatch":
        sub = super().select(index)
        base = {f.name: getattr(sub, f.name) for f in dataclasses.fields(RolloutBatch)}
        return FlowRolloutBatch(**base, states=self.states[index], labels=self.labels[index], sigmas=self.sigmas)


def to_images(x: torch.Tensor) -> torch.Tensor:
    """``[B, 3, H, W]`` in [-1, 1] -> ``[B, H, W, 3]`` in [0, 1] (clamped), on CPU."""
    return ((x.detach().float().clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 1).cpu()


class FlowBackend:
    """The policy's sampler behind the generation-backend interface (the trainer's evaluation calls ``generate``)."""

    engine = "hf"
    pad_id = 0

    def __init__(self, policy: "FlowMatchingPolicy") -> None:
        self.policy = policy

    def generate(self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams) -> RolloutBatch:
        return self.policy.sample(prompt_texts, rows, group_size, params)


class FlowMatchingPolicy(ModulePolicy):
    """A :class:`~grpokit.families.flow_matching.model.TinyFlowModel`, its SDE sampler and (when needed) a frozen reference copy."""

    def __init__(self, module: torch.nn.Module, settings: FlowSettings, *, reference: Optional[torch.nn.Module] = None,
                 seed: int = 0) -> None:
        self.module, self.settings, self.reference, self.seed = module, settings, reference, seed
        self.backend = FlowBackend(self)
        self.capabilities = self.capabilities_for()
        self.step = 0
        self.sigmas = flow_sigmas(settings.steps, settings.shift)
        self._last: dict[str, float] = {}

    @staticmethod
    def capabilities_for() -> Capabilities:
        return Capabilities(previous_role=False, unit_kind="denoise_step", entropy=False, behaviour_logprobs_exact=True, units_share_one_forward=False,
                            prompt_kv_sharing=False, condition_override=False, engine="hf")

    def begin_step(self, step: int) -> None:
        self.step = step

    def has_role(self, role: str) -> bool:
        return role == "current" or (role == "reference" and self.reference is not None)

    def sampler_metrics(self) -> dict[str, float]:
        """Of the last training batch: mean recorded step log-prob, trained steps per sample, image brightness."""
        return dict(self._last)

    def render(self, rows: list[dict], system_prompt: Optional[str]) -> list[str]:
        return [str(row["prompt"]) for row in rows]

    # ------------------------------------------------------------------ sampling
    def _labels(self, rows: list[dict]) -> torch.Tensor:
        missing = [i for i, r in enumerate(rows) if r.get("class_id") is None]
        if missing:
            raise ValueError(f"row {missing[0]} has no 'class_id': the flow policy is conditioned on it (data.task=flow_images)")
        labels = torch.tensor([int(r["class_id"]) for r in rows], dtype=torch.long, device=self.device)
        if int(labels.max()) >= self.module.num_classes or int(labels.min()) < 0:
            raise ValueError(f"class_id out of range: the model knows {self.module.num_classes} conditions")
        return labels

    def _initial_noise(self, rows: list[dict], group_size: int, evaluation: bool, gen: torch.Generator) -> torch.Tensor:
        """``[n·G, 3, H, W]``: eval = from each row's fixed ``seed`` (sample j: seed + j); training = the step's generator."""
        size, b = self.module.size, len(rows) * group_size
        if evaluation:
            draws = []
            for row in rows:
                for j in range(group_size):
                    g = torch.Generator(device="cpu").manual_seed(int(row.get("seed", 0)) + j)
                    draws.append(torch.randn(3, size, size, generator=g, device="cpu"))  # CPU seeds: the same noise on any device
            return torch.stack(draws).to(self.device)
        n = len(rows) if self.settings.same_noise else b
        x0 = torch.randn(n, 3, size, size, generator=gen, device="cpu")
        if self.settings.same_noise:
            x0 = x0.repeat_interleave(group_size, 0)
        return x0.to(self.device)

    @torch.no_grad()
    def sample(self, prompts: list[str], rows: list[dict[str, Any]], group_size: int, params: SamplingParams) -> FlowRolloutBatch:
        """G images per row: training = the SDE with K = ``steps``; greedy params = evaluation (``eval_steps``, ``eval_noise_level``)."""
        s = self.settings
        evaluation = params.greedy
        labels = self._labels(rows).repeat_interleave(group_size)
        seed = (self.seed * 1_000_003 + self.step) % 2**62  # per step, the same in every process (never hash())
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x0 = self._initial_noise(rows, group_size, evaluation, gen)
        sigmas = flow_sigmas(s.eval_steps, s.shift) if evaluation else self.sigmas
        noise = s.eval_noise_level if evaluation else s.noise_level
        was_training = self.module.training
        self.module.eval()
        try:
            velocity = lambda x, sig: guided_velocity(self.module, x, sig, labels, s.guidance, self.module.null_class)  # noqa: E731
            sde_gen = torch.Generator(device=self.device).manual_seed(seed + 1)
            states, logps = sample_sde(velocity, x0, sigmas, noise, sde_gen if self.device.type != "cpu" else gen)
        finally:
            self.module.train(was_training)
        b = len(labels)
        if evaluation or noise == 0:
            units = torch.zeros(b, 1, dtype=torch.long, device=self.device)
            mask = torch.zeros(b, 1, dtype=torch.long, device=self.device)  # the ODE has no log-prob: nothing to train
        else:
            units = trained_steps(len(sigmas) - 1, s.train_fraction, s.train_order, b, gen).to(self.device)
            mask = torch.ones_like(units)
        sampling_logp = logps.gather(1, units) * mask
        images = to_images(states[:, -1]).numpy()
        texts = [prompts[i // group_size] for i in range(b)]
        if not evaluation:
            self._last = {"flow/step_logp": float(sampling_logp.mean()), "flow/trained_steps": float(units.shape[1]),
                          "flow/brightness": float(images.mean())}
        return FlowRolloutBatch(
            # no prompt tokens: the condition is the class label (``labels``), not text
            prompt_ids=torch.zeros(b, 0, dtype=torch.long, device=self.device), prompt_mask=torch.zeros(b, 0, dtype=torch.long, device=self.device),
            completion_ids=units, completion_mask=mask,
            group_ids=torch.arange(len(rows), device=self.device).repeat_interleave(group_size),
            sampling_logp=sampling_logp, truncated=torch.zeros(b, dtype=torch.bool, device=self.device),
            prompts=texts, completions=[GeneratedImage(images[i], f"<image: {texts[i]}>") for i in range(b)],
            rows=[rows[i // group_size] for i in range(b)], states=states, labels=labels, sigmas=sigmas.to(self.device),
        )

    # ------------------------------------------------------------------ scoring
    def _step_stats(self, module: torch.nn.Module, mb: FlowRolloutBatch, u: int):
        """(x_{k+1}, μ, s, Δ) of unit ``u`` of every row of ``mb``; μ carries gradient when enabled."""
        k = mb.completion_ids[:, u]  # [b] step index of the unit
        rows = torch.arange(len(mb), device=mb.states.device)
        x, x_next = mb.states[rows, k], mb.states[rows, k + 1]
        sig, sig_next = mb.sigmas[k], mb.sigmas[k + 1]
        v = guided_velocity(module, x, sig, mb.labels, self.settings.guidance, self.module.null_class)
        second = float(mb.sigmas[1]) if mb.sigmas.shape[0] > 2 else 0.0
        mean, std = sde_step_stats(x, v, sig, sig_next, self.settings.noise_level, second)
        return x_next, mean, std, sig - sig_next

    def _unit_logp(self, module: torch.nn.Module, mb: FlowRolloutBatch) -> torch.Tensor:
        out = []
        for u in range(mb.completion_ids.shape[1]):
            x_next, mean, std, _ = self._step_stats(module, mb, u)
            out.append(step_logprob(x_next, mean, std))
        return torch.stack(out, dim=1) * mb.completion_mask  # [b, U]

    def _module(self, role: str) -> torch.nn.Module:
        if role == "current":
            return self.module
        if role == "reference" and self.reference is not None:
            return self.reference
        raise ValueError(f"the flow-matching policy has no '{role}' role here (current, or reference with a reference copy)")

    @torch.no_grad()
    def score(self, mb: FlowRolloutBatch, role: str = "current") -> torch.Tensor:
        """``[b, U]`` per-element-mean step log-probs of the stored steps under ``role``, without gradient."""
        return self._unit_logp(self._module(role), mb)

    def learn_forward(self, mb: FlowRolloutBatch, *, with_entropy: bool, entropy_grad: bool) -> UnitForward:
        return UnitForward(self._unit_logp(self.module, mb), None, lambda loss: loss.backward())

    @torch.no_grad()
    def unit_kl(self, mb: FlowRolloutBatch, convention: str = "exact") -> torch.Tensor:
        """``[b, U]`` closed-form KL(π_θ ‖ π_ref) of each stored step (equal variances): ‖μ_θ − μ_ref‖² / (2 s²)."""
        ref = self._module("reference")
        out = []
        for u in range(mb.completion_ids.shape[1]):
            _, mean, std, delta = self._step_stats(self.module, mb, u)
            _, ref_mean, _, _ = self._step_stats(ref, mb, u)
            out.append(step_kl(mean, ref_mean, std, convention=convention, sigma_delta=delta))
        return torch.stack(out, dim=1) * mb.completion_mask
