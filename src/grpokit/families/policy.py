"""The Policy interface: sample G trajectories per prompt, score their learnable units ``[B, U]``.

Every policy family (text causal LM today; vision-language, masked-diffusion and flow-matching
policies next) is "a stochastic generator whose sample decomposes into U scored units". The
trainer never needs to know what a unit is (a token, a turn's token, a denoising or unmasking
step): it needs per-unit log-probs ``[B, U]`` with a unit mask, with and without gradient, and a
statement of what the family can and cannot give (:class:`Capabilities`), read at load time
instead of guessed. Rewards, advantages, losses and aggregation are the pure functions of
``grpokit.algos`` and see only ``[B, U]`` tensors. See docs/policies.md for a worked example of
adding a family.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Protocol

import torch

from grpokit.rollout.types import RolloutBatch, SamplingParams


@dataclass(frozen=True)
class Capabilities:
    """What a policy family provides; the trainer and the load-time checks read these.

    unit_kind:                 'token', 'denoise_step', 'unmask_step' or 'sequence'
    entropy:                   per-unit entropies come with sampling and scoring (SPINE, PAPO, bonuses)
    behaviour_logprobs_exact:  the sampler's recorded log-probs are those of the distribution that
                               drew each unit (else the trainer must rescore with behaviour weights)
    logprob_is_surrogate:      log-probs are an estimator (d1 / ESPO), not the sampling probability
    units_share_one_forward:   all units of a sample come from one forward (tokens) rather than one
                               forward per unit (denoising steps)
    prompt_kv_sharing:         a group's rows share one prompt forward in sampling and learning
    condition_override:        ``score`` accepts a transformed condition (PAPO's masked image)
    visual_input:              the policy conditions on a row's ``images`` / ``video`` columns
    engine:                    what samples: 'hf' (the learner's own module) or an inference engine
                               ('vllm'), whose numerics differ from the learner's at equal weights
    previous_role:             ``score`` takes role 'previous', the weights one optimizer update behind
                               (Reg-GRPO's ``prev_logp``)
    """

    unit_kind: str = "token"
    entropy: bool = True
    behaviour_logprobs_exact: bool = True
    logprob_is_surrogate: bool = False
    units_share_one_forward: bool = True
    prompt_kv_sharing: bool = True
    condition_override: bool = False
    visual_input: bool = False
    engine: str = "hf"
    previous_role: bool = True


@dataclass
class UnitForward:
    """Per-unit log-probs of one micro-batch with gradient, and how to back-propagate a loss of them.

    logp:     [b, U] log pi_theta of each sampled unit (carries gradient, or is a leaf the
              policy back-propagates itself)
    entropy:  [b, U] or None
    backward: ``backward(loss)`` back-propagates a scalar loss built from ``logp`` / ``entropy``
              into the policy's parameters (a family may stage it: shared-prompt second stage,
              sequence chunks, one forward per denoising step)
    """

    logp: torch.Tensor
    entropy: Optional[torch.Tensor]
    backward: Callable[[torch.Tensor], None]


class ModulePolicy:
    """What every in-process family shares: ``module`` (the trained model) and ``backend`` (its sampler)."""

    module: torch.nn.Module
    backend: Any

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @property
    def pad_id(self) -> int:
        return self.backend.pad_id

    def trainable_parameters(self) -> Iterator[torch.nn.Parameter]:
        return (p for p in self.module.parameters() if p.requires_grad)

    def role_module(self, role: str) -> tuple[torch.nn.Module, Any]:
        """(module, context manager) that scores ``role``: 'current', 'previous', 'reference' or 'teacher'.

        The reference is the frozen copy (``self.reference``) when there is one, else for a LoRA
        (peft) module the module inside peft's ``disable_adapter()``, i.e. the base weights; a
        module with neither has no reference (scoring it as one would make every KL exactly 0).
        'previous' is the module with the trainable weights of :meth:`snapshot_previous` swapped in
        for the scoring (the current weights before any snapshot was taken).
        """
        if role == "current":
            return self.module, nullcontext()
        if role == "previous":
            return self.module, self._previous_weights()
        if role == "teacher":
            if getattr(self, "teacher", None) is None:
                raise ValueError("no teacher model: set model.teacher")
            return self.teacher, nullcontext()
        if role == "reference":
            if getattr(self, "reference", None) is not None:
                return self.reference, nullcontext()
            if hasattr(self.module, "peft_config"):
                return self.module, self.module.disable_adapter()
            raise ValueError("the policy has no reference: it is built with a frozen copy (full fine-tune) or LoRA")
        raise ValueError(f"unknown policy role '{role}': current, previous, reference or teacher")

    def snapshot_previous(self) -> None:
        """Keep a copy of the trainable weights as they are now: the 'previous' role until the next snapshot.

        Called right before each optimizer update (``trainer.stages.PreviousPolicySnapshot``), so
        'previous' is the policy one update behind. Costs one copy of the trainable parameters
        (LoRA: the adapter; a full fine-tune: the whole model), on their own device.
        """
        self._previous = [p.detach().clone() for p in self.trainable_parameters()]

    def previous_weights(self) -> Optional[list[torch.Tensor]]:
        """The snapshot the 'previous' role scores with (None before the first update), for checkpoints."""
        return getattr(self, "_previous", None)

    def load_previous_weights(self, weights: Optional[list[torch.Tensor]]) -> None:
        """Restore a checkpointed snapshot (each tensor onto its parameter's device)."""
        params = list(self.trainable_parameters())
        if weights is not None and len(weights) != len(params):
            raise ValueError(f"the checkpoint's previous-policy snapshot has {len(weights)} tensors, the policy {len(params)} "
                             "trainable parameters: resume with the model and LoRA settings it was saved with")
        self._previous = None if weights is None else [w.to(p.device) for w, p in zip(weights, params)]

    @contextmanager
    def _previous_weights(self):
        saved = getattr(self, "_previous", None)
        if saved is None:  # no update yet: the previous policy is the current (initial) one
            yield
            return
        params = list(self.trainable_parameters())
        current = [p.detach().clone() for p in params]
        try:
            with torch.no_grad():
                for p, w in zip(params, saved):
                    p.copy_(w)
            yield
        finally:
            with torch.no_grad():
                for p, w in zip(params, current):
                    p.copy_(w)


class Policy(Protocol):
    """What the trainer needs from a policy family (see the module docstring)."""

    capabilities: Capabilities
    module: torch.nn.Module  # the trained module (parameters, train/eval, checkpoints)
    # The policy's own sampler behind ``GenerationBackend.generate(prompts, rows, k, params)`` (and ``pad_id``): held-out
    # evaluation, validation batches and self-verification draw through it, so they sample exactly as training does.
    backend: Any

    @property
    def device(self) -> torch.device: ...

    def sample(self, prompts: list[str], rows: list[dict[str, Any]], group_size: int, params: SamplingParams) -> RolloutBatch:
        """G trajectories per condition, prompt-major, with behaviour log-probs and a unit mask."""

    def score(self, mb: RolloutBatch, role: str = "current") -> torch.Tensor:
        """``[b, U]`` unit log-probs without gradient under ``role``: 'current', 'previous', 'reference' or 'teacher'."""

    def learn_forward(self, mb: RolloutBatch, *, with_entropy: bool, entropy_grad: bool) -> UnitForward:
        """Unit log-probs of a micro-batch with gradient, and the matching ``backward``."""

    def trainable_parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def begin_step(self, step: int) -> None:
        """Called before each step's sampling with the learner's step (the weights version)."""

    def sampler_metrics(self) -> dict[str, float]:
        """Metrics of the sampler itself (e.g. an engine's weight-sync check)."""
