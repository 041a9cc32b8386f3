"""The masked-diffusion LM family (LLaDA-style): a fixed-length canvas unmasked in steps, likelihoods by name.

"Large Language Diffusion Models" (arXiv 2502.09992). A sample is the canvas of L =
``rollout.max_new_tokens`` positions after the prompt, [EOS]-padded; the sampler is
:func:`grpokit.families.masked_diffusion.sampler.generate` (blocks, transfer schedule, low-confidence or random
remasking, Gumbel temperature = ``rollout.temperature``; greedy = argmax). What a learnable unit
is, and its log-prob, is the registered likelihood ``diffusion.likelihood``
(:mod:`grpokit.families.masked_diffusion.likelihoods`): d1's one-step stand-in (tokens), ESPO's coupled ELBO
(one sequence, split over the L positions) or Mask-GRPO's step transitions (unmasking steps).

Batch layout (a :class:`CanvasBatch`): ``completion_ids`` = the canvas ``[B, L]`` and
``completion_mask`` all 1 (the canvas has a fixed length, so micro-batches never cut it);
``action_mask`` = the likelihood's unit mask ``[B, L]`` (for steps: 1 on columns k < K, unit k =
step k); ``commit_step [B, L]`` the sampler's record; ``estimator_seeds [B]`` one seed per row and
step, shared by the current, old and reference evaluations (common random numbers) and by every
one of the mu updates of the step [inferred: d1 and ESPO draw a fresh mask per inner iteration,
each with its own old log-probs; one seed per step keeps the generic loop's single old-log-prob
pass exact]. ``sampling_logp`` holds the sampler's step log-probs for Mask-GRPO (exact), zeros
for the surrogates (``behaviour_logprobs_exact`` is False there).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any, Optional

import torch

from grpokit.families.masked_diffusion.likelihoods import LIKELIHOODS, CanvasInputs
from grpokit.families.masked_diffusion.model import MDMTokenizer, mdm_logits
from grpokit.families.masked_diffusion.pretrain import encode_rows
from grpokit.families.masked_diffusion.sampler import SamplerOptions, generate
from grpokit.families.policy import Capabilities, ModulePolicy, UnitForward
from grpokit.rollout.types import RolloutBatch, SamplingParams


@dataclass
class CanvasBatch(RolloutBatch):
    """A RolloutBatch of canvases plus the sampler's record: commit_step [B, L], estimator_seeds [B] int64,
    schedule_actions [B, K, A] (Co-GRPO's schedule actions, else None)."""

    commit_step: Optional[torch.Tensor] = None
    estimator_seeds: Optional[torch.Tensor] = None
    schedule_actions: Optional[torch.Tensor] = None

    def select(self, index: torch.Tensor | slice) -> "CanvasBatch":
        base = RolloutBatch.select(self, index)
        z = self.schedule_actions[index] if self.schedule_actions is not None else None
        return CanvasBatch(**{f.name: getattr(base, f.name) for f in dataclasses.fields(RolloutBatch)},
                           commit_step=self.commit_step[index], estimator_seeds=self.estimator_seeds[index], schedule_actions=z)


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


class MDMBackend:
    """Samples canvases with the LLaDA sampler; ``generate`` is what rollout and held-out evaluation call."""

    engine = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: MDMTokenizer, options: SamplerOptions, *, seed: int, likelihood: str,
                 likelihood_options: dict) -> None:
        self.model, self.tokenizer, self.options, self.seed = model, tokenizer, options, seed
        self.pad_id = tokenizer.pad_id
        self.likelihood, self.likelihood_options = likelihood, likelihood_options
        self.step, self.calls = 0, 0

    @torch.no_grad()
    def generate(self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams) -> CanvasBatch:
        device = next(self.model.parameters()).device
        p_ids, p_mask, _ = encode_rows(self.tokenizer, prompt_texts, None, 0, device)
        p_ids, p_mask = p_ids.repeat_interleave(group_size, 0), p_mask.repeat_interleave(group_size, 0)
        opts = dataclasses.replace(self.options, temperature=0.0 if params.greedy else params.temperature)
        self.calls += 1
        gen = torch.Generator(device=device).manual_seed(_seed("grpokit/mdm/sample", self.seed, self.step, self.calls))
        was_training = self.model.training
        self.model.eval()
        try:
            traj = generate(self.model, p_ids, p_mask, params.max_new_tokens, opts, self.tokenizer.mask_id, gen)
        finally:
            self.model.train(was_training)
        b, length = traj.canvas.shape
        group_ids = torch.arange(len(rows), device=device).repeat_interleave(group_size)
        seeds = torch.tensor([_seed("grpokit/mdm/estimator", self.seed, self.step, self.calls, i) for i in range(b)],
                             dtype=torch.long, device=device)
        spec = LIKELIHOODS.spec(self.likelihood)
        inp = CanvasInputs(p_ids, p_mask, traj.canvas, traj.commit_step, seeds, traj.step_logp.shape[1])
        unit_mask = _unit_mask(spec.name, inp, self.tokenizer)
        sampling = torch.zeros(b, length, device=device)
        if spec.unit_kind == "unmask_step":
            sampling[:, : traj.step_logp.shape[1]] = traj.step_logp
        return CanvasBatch(
            prompt_ids=p_ids, prompt_mask=p_mask, completion_ids=traj.canvas, completion_mask=torch.ones_like(traj.canvas),
            group_ids=group_ids, sampling_logp=sampling, truncated=torch.zeros(b, dtype=torch.bool, device=device),
            prompts=[rows[g]["prompt"] for g in group_ids.tolist()], completions=self.tokenizer.batch_decode(traj.canvas.tolist()),
            rows=[rows[g] for g in group_ids.tolist()], action_mask=unit_mask, commit_step=traj.commit_step, estimator_seeds=seeds,
        )


def _unit_mask(likelihood: str, inp: CanvasInputs, tok: MDMTokenizer) -> torch.Tensor:
    """``[B, L]`` the units of ``likelihood`` (without computing log-probs)."""
    from grpokit.families.masked_diffusion.likelihoods import through_first_eos

    kind = LIKELIHOODS.spec(likelihood).unit_kind
    if kind == "token":
        return through_first_eos(inp.canvas, tok.eos_id)
    if kind == "unmask_step":
        mask = torch.zeros_like(inp.canvas)
        mask[:, : inp.steps] = 1
        return mask
    return torch.ones_like(inp.canvas)


class MaskedDiffusionPolicy(ModulePolicy):
    """A mask predictor (BertForMaskedLM / ModernBertForMaskedLM), its character tokenizer, the LLaDA sampler, a frozen reference.

    temperature: the likelihoods' logits are divided by it (as the sampler's proposals were).
    """

    def __init__(self, module: torch.nn.Module, tokenizer: MDMTokenizer, options: SamplerOptions, *, likelihood: str = "stand_in",
                 likelihood_options: Optional[dict] = None, reference: Optional[torch.nn.Module] = None,
                 temperature: float = 1.0, seed: int = 0, use_reference: bool = False) -> None:
        self.module, self.tokenizer, self.reference, self.teacher = module, tokenizer, reference, None
        self.use_reference, self.temperature = use_reference, temperature
        self.likelihood, self.likelihood_options = likelihood, dict(likelihood_options or {})
        LIKELIHOODS.check_options(likelihood, self.likelihood_options, "diffusion.likelihood_options")
        self.backend = MDMBackend(module, tokenizer, options, seed=seed, likelihood=likelihood,
                                  likelihood_options=self.likelihood_options)
        self.capabilities = self.capabilities_for(likelihood)
        self._last: dict[str, float] = {}

    @staticmethod
    def capabilities_for(likelihood: str) -> Capabilities:
        """What the family gives with ``likelihood``: no entropies, no prompt KV sharing; surrogate or exact per the estimator."""
        spec = LIKELIHOODS.spec(likelihood)
        return Capabilities(previous_role=False, unit_kind=spec.unit_kind, entropy=False, behaviour_logprobs_exact=not spec.surrogate,
                            logprob_is_surrogate=spec.surrogate, units_share_one_forward=spec.units_share_one_forward,
                            prompt_kv_sharing=False, condition_override=False, engine="hf")

    def begin_step(self, step: int) -> None:
        self.backend.step = step

    def sampler_metrics(self) -> dict[str, float]:
        """Of the last training batch: the likelihood's units per sample (tokens through [EOS], the L canvas positions of a
        sequence ELBO, or the K unmasking steps) and the share of completion positions that were [EOS] padding."""
        return dict(self._last)

    def render(self, rows: list[dict], system_prompt: Optional[str]) -> list[str]:
        """The prompts as they are: the model has no chat template (a system prompt is refused at load)."""
        return [row["prompt"] for row in rows]

    def sample(self, prompts: list[str], rows: list[dict[str, Any]], group_size: int, params: SamplingParams) -> RolloutBatch:
        return self.backend.generate(prompts, rows, group_size, params)

    def _unit_logp(self, module: torch.nn.Module, mb: CanvasBatch) -> torch.Tensor:
        if not isinstance(mb, CanvasBatch):
            raise TypeError("the masked-diffusion policy scores the CanvasBatch its own sampler returned")
        steps = int(mb.action_mask.sum(-1).max()) if LIKELIHOODS.spec(self.likelihood).unit_kind == "unmask_step" else 0
        inp = CanvasInputs(mb.prompt_ids, mb.prompt_mask, mb.completion_ids, mb.commit_step, mb.estimator_seeds, steps)
        fn = LIKELIHOODS.get(self.likelihood)
        logp, mask = fn(lambda ids, att: mdm_logits(module, ids, att), inp, mask_id=self.tokenizer.mask_id,
                        eos_id=self.tokenizer.eos_id, temperature=self.temperature, **self.likelihood_options)
        return logp * mb.action_mask

    def score(self, mb: RolloutBatch, role: str = "current") -> torch.Tensor:
        if role == "current":
            module = self.module
        elif role == "reference":
            module = self.reference if self.reference is not None else self.module
        else:
            raise ValueError(f"the masked-diffusion policy has no '{role}' role (current or reference)")
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad():
                return self._unit_logp(module, mb)
        finally:
            module.train(was_training)

    def sync_reference(self) -> None:
        if self.reference is None:
            raise ValueError("reference syncing needs a reference copy (algorithm.beta > 0)")
        self.reference.load_state_dict(self.module.state_dict())

    def learn_forward(self, mb: RolloutBatch, *, with_entropy: bool, entropy_grad: bool) -> UnitForward:
        logp = self._unit_logp(self.module, mb)
        self._last = {"mdm/units_per_sample": float(mb.action_mask.sum(-1).float().mean()),
                      "mdm/eos_frac": float((mb.completion_ids == self.tokenizer.eos_id).float().mean())}
        return UnitForward(logp, None, lambda loss: loss.backward())
