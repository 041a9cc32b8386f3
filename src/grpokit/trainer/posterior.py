"""The variational posterior q_φ(z|x, y*) with weights of its own: a LoRA adapter, its optimizer and its update.

Zhou et al., "Variational Reasoning for Language Models", arXiv 2509.22637: the posterior is a
model of its own, trained only by its forward-KL objective, while the policy π_θ is trained only
by the (IWAE-)ELBO. Here q_φ is a LoRA adapter (rank ``variational.q_lora_r``, no dropout) on

- the policy's own PeftModel, next to the policy's adapter, when the policy is LoRA and no
  ``variational.q_model`` is set: the frozen base is shared and ``set_adapter`` switches between
  the two (peft's ``set_adapter`` also flips ``requires_grad``; :meth:`PosteriorModel.active`
  restores the flags, so the policy's trainable parameters never include q's);
- a base model of its own otherwise: ``variational.q_model``, or a fresh load of ``model.name``
  when the policy is fully fine-tuned, so q starts from the policy's initial weights.

[inferred] The paper fine-tunes q in full after an SFT on hint-prompted data; a LoRA adapter
starting at the base (its B = 0: q = the initial model under the hinted prompt) is what fits
beside the policy here. q's optimizer (AdamW, ``variational.q_lr``, betas and weight decay of
``optim``) holds q's adapter only; the policy's optimizer never sees it, and q's rows never enter
the policy's batch. q samples through an in-process sampler of its own module and scores / learns
through a copy of the run's policy object pointed at that module.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any, Iterator

import torch

from grpokit.config.schema import Config
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import RolloutBatch, SamplingParams
from grpokit.trainer.learner import micro_batches

ADAPTER = "posterior"  # q's adapter name on a shared PeftModel (the policy's is peft's "default")


def _shares_policy_model(cfg: Config, module: torch.nn.Module) -> bool:
    return cfg.variational.q_model is None and hasattr(module, "peft_config")


def _peft_lora(cfg: Config, targets: list[str]) -> Any:
    from peft import LoraConfig as PeftLoraConfig

    v = cfg.variational
    return PeftLoraConfig(r=v.q_lora_r, lora_alpha=v.q_lora_alpha, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")


def _separate_model(cfg: Config, tokenizer: Any, device: torch.device) -> torch.nn.Module:
    """q's own base (``variational.q_model``, else ``model.name``) with a fresh LoRA adapter; one-line errors."""
    from grpokit.model.loading import load_model
    from grpokit.model.lora import apply_lora
    from grpokit.trainer.checkpoint import model_source

    name = cfg.variational.q_model or cfg.model.name
    field = "variational.q_model" if cfg.variational.q_model else "model.name"
    try:
        base, q_tokenizer = load_model(model_source(name), dtype=cfg.model.dtype, device=device)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{field}={name!r}: q's base model does not load ({str(exc).splitlines()[0][:120]}); "
                         "set variational.q_model to a loadable model with the policy's tokenizer") from None
    if q_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"{field}={name!r}: q's tokenizer differs from the policy's (q scores the policy's trace tokens); "
                         "pick a q_model with the same tokenizer")
    lora = dataclasses.replace(cfg.model.lora, enabled=True, r=cfg.variational.q_lora_r, alpha=cfg.variational.q_lora_alpha, dropout=0.0)
    return apply_lora(base, lora)


class PosteriorModel:
    """q_φ: its module (shared with the policy or its own), sampler, scoring/learning view and optimizer."""

    def __init__(self, cfg: Config, policy: Any, tokenizer: Any) -> None:
        module = policy.module
        self.shared = _shares_policy_model(cfg, module)
        if self.shared:
            targets = sorted(module.peft_config[module.active_adapter].target_modules)
            flags = {id(p): p.requires_grad for p in module.parameters()}
            module.add_adapter(ADAPTER, _peft_lora(cfg, targets))
            new = [p for n, p in module.named_parameters() if f".{ADAPTER}." in n]
            for p in module.parameters():  # the policy's adapter stays trainable, q's is trained by q's optimizer only
                p.requires_grad_(flags.get(id(p), False))
            self.params = new
        else:
            module = _separate_model(cfg, tokenizer, policy.device)
            self.params = [p for p in module.parameters() if p.requires_grad]
        self.module = module
        self.view = copy.copy(policy)  # the run's scoring / learning code, on q's module, without reference or teacher
        self.view.module, self.view.reference, self.view.teacher = module, None, None
        self.view.backend = HFBackend(module, tokenizer, fused_decode=cfg.rollout.fused_decode)
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.variational.q_lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
        self.max_grad_norm = o.max_grad_norm if o.max_grad_norm > 0 else float("inf")

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Inside: the module computes q (a shared PeftModel runs q's adapter only, and only q's adapter has gradients)."""
        if not self.shared:
            yield
            return
        module = self.module
        before, flags = module.active_adapter, [(p, p.requires_grad) for p in module.parameters()]
        module.set_adapter(ADAPTER)
        try:
            yield
        finally:
            module.set_adapter(before)
            for p, flag in flags:
                p.requires_grad_(flag)

    def sample(self, prompts: list[str], rows: list[dict], k: int, params: SamplingParams) -> RolloutBatch:
        """``k`` traces per prompt drawn from q."""
        with self.active():
            return self.view.backend.generate(prompts, rows, k, params)

    @torch.no_grad()
    def score(self, batch: RolloutBatch, size: int) -> torch.Tensor:
        """``[B, T]`` log q_φ of the completion tokens (no gradient; 0 off the mask)."""
        out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.device)
        with self.active():
            for rows, mb in micro_batches(batch, size):
                logp = self.view.score(mb, "current")
                out[rows, : logp.shape[1]] = logp.to(out.dtype)
        return out * batch.completion_mask

    def update(self, batch: RolloutBatch, weights: torch.Tensor, normaliser: float, size: int) -> dict[str, float]:
        """One optimizer step of q on ``L_q = -(1/normaliser) Σ_rows w_row Σ_t log q_φ(token)`` (``weights [B]``).

        Gradients reach q's adapter only (the policy's adapter is inactive or on another module);
        clipped at ``optim.max_grad_norm``. Returns q's loss and gradient norm.
        """
        total = torch.zeros((), dtype=torch.float32, device=batch.device)
        with self.active():
            was_training = self.module.training
            self.module.train()
            try:
                for rows, mb in micro_batches(batch, size):
                    fwd = self.view.learn_forward(mb, with_entropy=False, entropy_grad=False)
                    w = weights[rows].to(device=fwd.logp.device, dtype=fwd.logp.dtype)
                    mask = mb.completion_mask[:, : fwd.logp.shape[1]].to(fwd.logp.dtype)
                    loss = -(w[:, None] * fwd.logp * mask).sum() / normaliser
                    fwd.backward(loss)
                    total += loss.detach().float()
                norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            finally:
                self.module.train(was_training)
        return {"variational/q_loss": float(total), "variational/q_grad_norm": float(norm)}

    def state_dict(self) -> dict[str, Any]:
        """q's adapter weights and optimizer state (the run's checkpoint carries them)."""
        return {"adapter": [p.detach().clone() for p in self.params], "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for p, saved in zip(self.params, state["adapter"], strict=True):
                p.copy_(saved)
        self.optimizer.load_state_dict(state["optimizer"])
