"""The text causal-LM family: tokens are the units; all of today's CPU fast paths live here.

Sampling goes through a generation backend (in-process transformers with a shared prompt KV
cache and, on CPU, the fused decoder; or vLLM). Scoring is one forward per micro-batch with the
prompt encoded once per group and a chunked log-softmax head; learning adds the two-stage
backward of the shared prompt (``PromptStage``) or StreamBP's sequence-chunked exact backward
("StreamBP: Memory-Efficient Exact Backpropagation for Long Sequence Training of LLMs",
arXiv 2506.03077) -- over a kept KV cache (``train.streambp=cache``) or the paper's per-layer
recompute inside checkpointing (``layer``) -- and activation checkpointing.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from grpokit.model.logprobs import PromptStage, completion_logprobs
from grpokit.model.streambp import streamed_backward, streamed_forward
from grpokit.families.policy import Capabilities, ModulePolicy, UnitForward
from grpokit.rollout.types import RolloutBatch, SamplingParams


class CausalLMPolicy(ModulePolicy):
    """A transformers causal LM (optionally LoRA), its tokenizer, a sampler and frozen reference / teacher.

    temperature: learner logits are divided by it (as the sampler did); sequence_chunk > 0:
    StreamBP chunks of that many tokens, streamed over a kept KV cache (streambp 'cache',
    :mod:`grpokit.model.streambp`) or layer by layer inside checkpointing ('layer',
    :mod:`grpokit.model.streambp_layers`); checkpoint: recompute decoder layers in the backward;
    pack: the learner's completions of a group as one padding-free row where exact and cheaper.
    The reference is a frozen copy, or for LoRA the policy with its adapter disabled.
    """

    def __init__(
        self, module: torch.nn.Module, tokenizer: Any, backend: Any, *, reference: Optional[torch.nn.Module] = None,
        teacher: Optional[torch.nn.Module] = None, temperature: float = 1.0, sequence_chunk: int = 0,
        streambp: str = "cache", checkpoint: bool = False, use_reference: bool = False, pack: bool = True,
    ) -> None:
        self.module, self.tokenizer, self.backend = module, tokenizer, backend
        self.reference, self.teacher = reference, teacher
        self.use_reference = use_reference  # the run needs reference log-probs
        self.temperature, self.sequence_chunk, self.checkpoint = temperature, sequence_chunk, checkpoint
        self.pack = pack  # a group's completions as one padding-free row (grpokit.model.packed_completions)
        if streambp not in ("cache", "layer"):
            raise ValueError(f"train.streambp={streambp!r}: choose cache or layer")
        self.streambp = streambp
        self.logprobs = completion_logprobs  # a sharded learner runs it as a forward of the FSDP root (grpokit.distributed.fsdp)
        self.split_prompt_backward = True  # PromptStage; off when sharded (its second backward reads the root's weights)
        self.capabilities = self.capabilities_for(getattr(backend, "engine", "hf"))

    @staticmethod
    def capabilities_for(engine: str) -> Capabilities:
        """What the text family gives with sampler ``engine`` ('hf' or 'vllm'; vLLM returns no entropies)."""
        return Capabilities(unit_kind="token", entropy=engine == "hf", behaviour_logprobs_exact=True, engine=engine)

    # ------------------------------------------------------------------ sampling
    def begin_step(self, step: int) -> None:
        """The learner is at ``step``: an engine that syncs weights tags its batches with this version."""
        if hasattr(self.backend, "learner_step"):
            self.backend.learner_step = step

    def sampler_metrics(self) -> dict[str, float]:
        """The sampler's own metrics (an engine's last weight-sync check), logged with the step."""
        diff = getattr(self.backend, "last_sync_diff", None)
        return {"rollout/sync_logp_diff": float(diff)} if diff is not None else {}

    def sample(self, prompts: list[str], rows: list[dict[str, Any]], group_size: int, params: SamplingParams) -> RolloutBatch:
        return self.backend.generate(prompts, rows, group_size, params)

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def score(self, mb: RolloutBatch, role: str = "current") -> torch.Tensor:
        module, ctx = self.role_module(role)
        with ctx:
            logp, _ = self.logprobs(
                module, mb.prompt_ids, mb.prompt_mask, mb.completion_ids, mb.completion_mask,
                group_ids=mb.group_ids, temperature=self.temperature, pack=self.pack,
            )
        return logp

    def sync_reference(self) -> None:
        """Reference <- the current weights (a reference that follows the policy)."""
        if self.reference is None:
            raise ValueError("reference syncing needs a full fine-tune with a reference copy: set model.lora.enabled=false")
        self.reference.load_state_dict(self.module.state_dict())

    # ------------------------------------------------------------------ learning
    def learn_forward(self, mb: RolloutBatch, *, with_entropy: bool, entropy_grad: bool) -> UnitForward:
        tensors = (mb.prompt_ids, mb.prompt_mask, mb.completion_ids, mb.completion_mask)
        if self.sequence_chunk > 0 and self.streambp == "cache":  # StreamBP phase 1: no-grad log-probs as leaves
            logp, entropy, stream = streamed_forward(
                self.module, *tensors, group_ids=mb.group_ids, chunk=self.sequence_chunk,
                temperature=self.temperature, with_entropy=with_entropy or entropy_grad,
            )
            logp.requires_grad_()
            if entropy is not None and entropy_grad:
                entropy.requires_grad_()

            def backward(loss: torch.Tensor) -> None:  # dL/dlogp (and dL/dH), then the model chunk by chunk
                leaves = [logp] + ([entropy] if entropy_grad and entropy is not None else [])
                grads = torch.autograd.grad(loss, leaves, allow_unused=True)
                g_logp = grads[0] if grads[0] is not None else torch.zeros_like(logp)
                g_ent = grads[1] if len(grads) > 1 else None
                streamed_backward(self.module, *tensors, g_logp, stream, grad_entropy=g_ent, temperature=self.temperature)

            return UnitForward(logp, entropy, backward)
        prompt_stage = PromptStage() if self.split_prompt_backward else None  # the shared prompt's graph is back-propagated second
        streamed = {"stream_chunk": self.sequence_chunk} if self.sequence_chunk > 0 else {}  # streambp 'layer'
        logp, entropy = self.logprobs(
            self.module, *tensors, group_ids=mb.group_ids, temperature=self.temperature,
            with_entropy=with_entropy, entropy_grad=entropy_grad, checkpoint=self.checkpoint, prompt_stage=prompt_stage,
            pack=self.pack, **streamed,
        )

        def backward(loss: torch.Tensor) -> None:
            loss.backward()
            if prompt_stage is not None:
                prompt_stage.backward()

        return UnitForward(logp, entropy, backward)
