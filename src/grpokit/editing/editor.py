"""Sequential (lifelong) editing: SFT or TPSFT of each edit's new object on a window of FFN weights.

The edit stage of EtCon (Li et al., arXiv 2512.04753): "localized edits within selected FFN
layers". Only the ``window`` modules (default: ``mlp.down_proj`` of layers 4-8, the MLP output
projections of early-middle layers that ROME / MEMIT-style editors write; [inferred] for a
30-layer SmolLM2) are trainable, everything else is frozen. Edits are applied one after another
in the given order, each with its own optimizer and ``steps`` updates on one sequence: the chat-
rendered edit prompt followed by the new object and the end-of-turn token, the loss on the
object's tokens and that token only ([B, T] mask = 1 there).

``method="tpsft"``: :func:`grpokit.editing.tpsft.tpsft_token_loss` against pi_old, the target
tokens' log-probs under a snapshot of the model taken at the start of the edit and refreshed
every ``refresh_every`` steps (PSFT's iteration; default 2; 0 = one snapshot per edit, which
caps each target token at about (1 + eps) times its pre-edit probability: too little to write a
fictional fact whose object starts near p = 0.01). A step whose target tokens are all past
1 + eps has exactly zero gradient and takes no optimizer step; the edit goes on at the next
refresh, as PSFT's next iteration does, and ends early only when no refresh is left. Or pi_old is the
pre-edit model throughout (``anchor="pre_edit"``, the stricter locality option). Only the
target's log-probs of the snapshot are needed, so no weights are copied. ``method="sft"``: the
token-mean NLL of the same tokens (the baseline that differs only by the trust region).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from grpokit.editing.facts import Edit
from grpokit.editing.tpsft import tpsft_metrics, tpsft_token_loss
from grpokit.trainer.progress import ItemProgress

log = logging.getLogger(__name__)


@dataclass
class EditConfig:
    """How each edit is written into the model."""

    method: str = "tpsft"  # "tpsft" (trust-region) or "sft" (plain NLL), same window and steps
    layers: list = field(default_factory=lambda: [4, 5, 6, 7, 8])  # decoder layers whose `module` trains
    module: str = "mlp.down_proj"  # attribute path inside a decoder layer, its .weight trains
    steps: int = 10  # optimizer updates per edit
    lr: float = 5e-4  # Adam learning rate (a fresh optimizer per edit)
    epsilon: float = 0.2  # TPSFT trust region: r <= 1 + epsilon keeps its gradient [inferred, PSFT-style]
    refresh_every: int = 2  # TPSFT: refresh pi_old every N steps of an edit (0 = one snapshot per edit) [inferred]
    anchor: str = "snapshot"  # TPSFT pi_old: "snapshot" (per edit) or "pre_edit" (the unedited model)
    max_grad_norm: float = 1.0  # clip the window's gradient norm (0 = off)

    def validate(self) -> None:
        if self.method not in ("tpsft", "sft"):
            raise ValueError(f"edit.method={self.method!r}; choose tpsft or sft")
        if self.anchor not in ("snapshot", "pre_edit"):
            raise ValueError(f"edit.anchor={self.anchor!r}; choose snapshot (per edit) or pre_edit")
        if self.steps < 1 or self.lr <= 0 or self.epsilon <= 0 or self.refresh_every < 0:
            raise ValueError("edit: steps >= 1, lr > 0, epsilon > 0 and refresh_every >= 0 are required")
        if not self.layers:
            raise ValueError("edit.layers is empty; name at least one decoder layer whose FFN trains")


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a Llama-style causal LM (``model.model.layers``)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no model.layers; the FFN window needs a Llama-style decoder")
    return layers


def select_window(model: torch.nn.Module, layers: list, module: str) -> list[torch.nn.Parameter]:
    """Freeze every parameter, then make ``layers[i].<module>.weight`` trainable for i in ``layers``; returns those."""
    stack = decoder_layers(model)
    bad = [i for i in layers if not 0 <= int(i) < len(stack)]
    if bad:
        raise ValueError(f"edit.layers {bad} out of range: the model has layers 0..{len(stack) - 1}")
    model.requires_grad_(False)
    params = []
    for i in layers:
        target = stack[int(i)]
        for part in module.split("."):
            if not hasattr(target, part):
                raise ValueError(f"edit.module={module!r}: layer {i} has no {part!r}; e.g. mlp.down_proj")
            target = getattr(target, part)
        target.weight.requires_grad_(True)
        params.append(target.weight)
    return params


def encode_edit(tokenizer, prompt_text: str, target: str, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids [1, L]`` = rendered prompt + target + EOS, ``mask [1, L]`` = 1 on the target and EOS tokens, on ``device``."""
    prompt = tokenizer(prompt_text, add_special_tokens=False).input_ids
    answer = tokenizer(target, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt + answer], device=device)
    mask = torch.zeros_like(ids, dtype=torch.float32)
    mask[0, len(prompt):] = 1.0
    return ids, mask


def token_logp(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[1, L]`` log p(ids_t | ids_<t) at positions where mask = 1 (0 elsewhere; position 0 is never a target)."""
    logits = model(input_ids=ids).logits[:, :-1].float()  # [1, L-1, V]
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # [1, L-1]
    return torch.nn.functional.pad(logp, (1, 0)) * mask


def apply_edits(model: torch.nn.Module, tokenizer, edits: list[Edit], prompts: list[str], cfg: EditConfig,
                progress: bool = True) -> list[dict[str, float]]:
    """Write ``edits`` into ``model`` in order (``prompts[i]`` = edit i's rendered prompt); per-edit metrics.

    Each metric row: ``loss`` of the last update, ``ratio`` / ``clipped`` of the target tokens
    after the last update (TPSFT), ``updates`` (optimizer steps taken: TPSFT skips those whose
    target tokens are all clipped), ``p_before`` / ``p_after`` = exp(mean target log-prob).
    """
    cfg.validate()
    params = select_window(model, cfg.layers, cfg.module)
    device = params[0].device
    encoded = [encode_edit(tokenizer, p, e.target_new, device) for e, p in zip(edits, prompts)]
    pre_edit = None
    if cfg.method == "tpsft" and cfg.anchor == "pre_edit":
        with torch.no_grad():
            pre_edit = [token_logp(model, ids, mask) for ids, mask in encoded]
    was_training = model.training
    model.eval()  # no dropout: the snapshot's and the policy's log-probs must agree at theta = theta_old
    rows = []
    bar = ItemProgress(len(edits), "edits", enabled=progress)
    try:
        for k, (ids, mask) in enumerate(encoded):
            rows.append(_edit_one(model, params, ids, mask, cfg, None if pre_edit is None else pre_edit[k]))
            bar.update(1)
    finally:
        bar.close()
        model.train(was_training)
        model.requires_grad_(True)
    return rows


def _refreshes(cfg: EditConfig, anchor_logp, step: int) -> bool:
    """Whether update ``step`` (0-based) of an edit starts by refreshing pi_old (PSFT's iteration boundary)."""
    return cfg.method == "tpsft" and anchor_logp is None and cfg.refresh_every > 0 and step > 0 and step % cfg.refresh_every == 0


def _edit_one(model, params, ids, mask, cfg: EditConfig, anchor_logp) -> dict[str, float]:
    opt = torch.optim.Adam(params, lr=cfg.lr)
    n = mask.sum()
    with torch.no_grad():
        start = token_logp(model, ids, mask)
    old = start if anchor_logp is None else anchor_logp
    updates = 0
    for step in range(cfg.steps):
        if _refreshes(cfg, anchor_logp, step):
            with torch.no_grad():
                old = token_logp(model, ids, mask)  # PSFT: pi_old <- the current policy
        logp = token_logp(model, ids, mask)
        token = tpsft_token_loss(logp, old, mask, cfg.epsilon) if cfg.method == "tpsft" else -logp
        loss = token.sum() / n
        if cfg.method == "tpsft" and float(tpsft_metrics(logp, old, mask, cfg.epsilon)["clipped"]) >= 1.0:
            # every target token is past 1 + epsilon: the gradient is exactly 0 until pi_old is refreshed (an Adam
            # step on it would still move the weights by momentum alone). The edit ends only when no refresh is left.
            if not any(_refreshes(cfg, anchor_logp, later) for later in range(step + 1, cfg.steps)):
                break
            continue
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        updates += 1
    with torch.no_grad():
        end = token_logp(model, ids, mask)
        stats = tpsft_metrics(end, old, mask, cfg.epsilon)
    return {"loss": float(loss.detach()), "ratio": float(stats["ratio"]), "clipped": float(stats["clipped"]), "updates": updates,
            "p_before": float(torch.exp(start.sum() / n)), "p_after": float(torch.exp(end.sum() / n))}
