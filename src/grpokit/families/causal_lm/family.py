"""The causal-LM family: which models it loads, its policy, its teacher and its load-time checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

from grpokit.families import FAMILIES, Claim, Family
from grpokit.families.policy import Capabilities


def sequence_kl_problem(cfg: Any) -> Optional[str]:
    """ESPO's sequence k2 needs one sequence log-likelihood split over units; a token family has per-token log-probs."""
    a = cfg.algorithm
    if a.beta > 0 and a.kl == "seq_k2":
        return ("algorithm.kl 'seq_k2' needs units that split one sequence log-likelihood (unit_kind 'sequence'), which "
                f"model.name '{cfg.model.name}' (per-token log-probs) lacks: use k3 or a masked-diffusion policy with "
                "diffusion.likelihood=espo_elbo")
    return None


def teacher_model(cfg: Any, tokenizer: Any, device: torch.device) -> torch.nn.Module:
    """The frozen teacher of distillation losses (``model.teacher``); it must share the policy's vocabulary."""
    from grpokit.model.loading import load_model
    from grpokit.trainer.checkpoint import model_source

    if not cfg.model.teacher:
        raise ValueError(f"algorithm.loss '{cfg.algorithm.loss}' needs a teacher: set model.teacher")
    source = model_source(cfg.model.teacher)  # a run folder: its newest complete checkpoint
    teacher, tok = load_model(source, dtype=cfg.model.dtype, device=device)  # follows the policy
    if tok.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"model.teacher '{cfg.model.teacher}' has a different tokenizer from the policy")
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher.eval()


class CausalLMFamily(Family):
    """Hugging Face causal LMs: the embedded SmolLM2, a model folder, a .gguf file, a Hub id in the local cache, a run folder."""

    name = "causal_lm"
    description = ("text causal LM, units = tokens: the embedded SmolLM2, a model folder (also the Hub's cache layout), a .gguf "
                   "file, a Hub id in the local Hugging Face cache or a grpokit run folder")

    @property
    def embedded(self) -> dict[str, str]:  # type: ignore[override]
        from grpokit.model.loading import EMBEDDED_MODELS

        return {name: m.description for name, m in EMBEDDED_MODELS.items()}

    def claim(self, model_name: str) -> Claim:
        from grpokit.model.loading import EMBEDDED_MODELS

        if model_name in EMBEDDED_MODELS or model_name.endswith(".gguf") and Path(model_name).expanduser().is_file():
            return Claim.SPECIFIC
        return Claim.GENERIC if _loadable(model_name) else Claim.NO

    def unclaimed_hint(self, model_name: str) -> Optional[str]:
        """For a name shaped like a Hub id (``org/name``): where the local Hugging Face cache was searched and how to fill it."""
        if model_name.count("/") != 1 or model_name.startswith((".", "/", "~")):
            return None
        from grpokit.model.loading import model_name_problem

        problem = model_name_problem(model_name)
        return f"as a Hub id: {problem}" if problem else None

    def claim_model(self, model: torch.nn.Module, tokenizer: Any) -> Claim:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        return Claim.GENERIC if callable(getattr(base, "generate", None)) and hasattr(base, "config") else Claim.NO

    def capabilities(self, cfg: Any) -> Capabilities:
        from grpokit.families.causal_lm.policy import CausalLMPolicy

        return CausalLMPolicy.capabilities_for(cfg.rollout.backend)

    def config_problem(self, cfg: Any) -> Optional[str]:
        return sequence_kl_problem(cfg)

    def load(self, cfg: Any, device: torch.device) -> tuple[torch.nn.Module, Any]:
        from grpokit.model.loading import load_model
        from grpokit.model.lora import apply_lora
        from grpokit.trainer.checkpoint import model_source

        if self.claim(cfg.model.name) == Claim.NO:  # model.family=causal_lm names a run folder that does not exist yet
            raise ValueError(FAMILIES.unclaimed_message(cfg.model.name))
        model, tokenizer = load_model(model_source(cfg.model.name), dtype=cfg.model.dtype, device=device)  # CUDA: SDPA / flash attention
        return (apply_lora(model, cfg.model.lora) if cfg.model.lora.enabled else model), tokenizer

    def build_policy(self, cfg: Any, model: torch.nn.Module, tokenizer: Any, *, reference: Optional[torch.nn.Module],
                     needs_ref: bool, needs_teacher: bool, learners: Any):
        from grpokit.families.causal_lm.policy import CausalLMPolicy
        from grpokit.rollout import make_backend
        from grpokit.rollout.hf import HFBackend

        if learners.is_main:
            from grpokit.envs.episodes import episode_backend

            # multi-turn: every "completion" is an environment episode
            backend = episode_backend(make_backend(cfg.rollout, model, tokenizer, seed=cfg.train.seed), cfg)
        else:  # only rank 0 samples; other learners keep an idle in-process backend for its pad / EOS ids
            backend = HFBackend(model, tokenizer)
        device = next(model.parameters()).device
        teacher = teacher_model(cfg, tokenizer, device) if needs_teacher else None
        return CausalLMPolicy(
            model, tokenizer, backend, reference=reference, teacher=teacher,
            temperature=cfg.rollout.temperature if cfg.model.temperature_in_logprobs else 1.0,
            sequence_chunk=cfg.train.sequence_chunk, streambp=cfg.train.streambp, checkpoint=cfg.train.activation_checkpointing,
            pack=cfg.train.pack_completions, use_reference=needs_ref,
        )

    def build_offline_policy(self, cfg: Any, model: torch.nn.Module, tokenizer: Any, *, reference: Optional[torch.nn.Module],
                             needs_ref: bool):
        from grpokit.families.causal_lm.policy import CausalLMPolicy
        from grpokit.rollout import make_backend

        backend = make_backend(cfg.rollout, model, tokenizer, seed=cfg.train.seed)  # held-out greedy accuracy
        return CausalLMPolicy(
            model, tokenizer, backend, reference=reference,
            temperature=1.0,  # the data's own distribution: no sampling temperature in offline log-probs
            sequence_chunk=cfg.train.sequence_chunk, streambp=cfg.train.streambp, checkpoint=cfg.train.activation_checkpointing,
            pack=cfg.train.pack_completions, use_reference=needs_ref,
        )


def _loadable(model_name: str) -> bool:
    """A name the model loader resolves: an existing path (a model or run folder, a Hub-layout folder) or a cached Hub id."""
    from grpokit.model.loading import resolve_model_name

    return resolve_model_name(model_name) is not None


FAMILY = FAMILIES.register(CausalLMFamily())
