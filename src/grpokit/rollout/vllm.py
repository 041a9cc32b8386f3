"""Sampling with vLLM (extra ``[vllm]``, GPU): the same GenerationBackend as HFBackend.

``rollout.backend: vllm`` builds ``vllm.LLM(model=<policy folder>, dtype, seed, **backend_options)``
in the trainer's process (TRL's "colocate" mode) and samples each step's groups with

    SamplingParams(n=G, temperature, top_p, top_k (-1 = off), max_tokens=max_new_tokens,
                   min_tokens=min_new_tokens, logprobs=0)

``logprobs=0`` returns the log-prob of each sampled token only. The engine is started with
``logprobs_mode="processed_logprobs"`` (vLLM >= 0.10.2) so that log-prob is taken under the
sampling distribution (temperature, top-k, top-p applied), as HFBackend records it; override it
in ``rollout.backend_options``. vLLM returns no entropies: ``RolloutBatch.entropy`` is None, so
entropy-based token selection (forking tokens, SPINE) needs ``rollout.backend: hf``.

Weights: before sampling, the backend pushes the policy's current weights into the engine when
they changed since the last push: an optimizer stepped them (a global optimizer step hook; fused
AdamW does not bump tensor versions) or they were copied into (``load_state_dict`` on resume bumps
the parameters' in-place version counters). The push is ``LLM.apply_model(fn)``, which runs ``fn(model)`` on the model in
every vLLM worker (vLLM >= 0.10, ``vllm/entrypoints/llm.py``), and ``fn`` calls the model's own
``load_weights(iterable of (HF name, tensor))`` — the loader TRL's colocate mode
(``llm_engine.model_executor.driver_worker.model_runner.model.load_weights``) and verl's sharding
managers use; then ``LLM.reset_prefix_cache()`` drops KV blocks computed with the old weights.
A LoRA policy is merged for the push and unmerged after (TRL does the same), so vLLM always
holds full weights under their Hugging Face names.
"""

from __future__ import annotations

import functools
import weakref
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from grpokit.rollout.types import RolloutBatch, SamplingParams, group_batch

INSTALL_HINT = "rollout.backend=vllm needs vLLM: pip install 'grpokit[vllm]' (GPU), or set rollout.backend=hf"


def import_vllm() -> Any:
    """The ``vllm`` module, or a one-line error naming the extra and the config field."""
    try:
        import vllm
    except ImportError as exc:
        from grpokit.distributed import MissingExtraError

        raise MissingExtraError(INSTALL_HINT) from exc
    return vllm


def vllm_sampling_params(vllm: Any, group_size: int, params: SamplingParams) -> Any:
    """``vllm.SamplingParams`` equivalent to our SamplingParams for G = ``group_size`` samples per prompt."""
    if params.greedy:
        return vllm.SamplingParams(n=group_size, temperature=0.0, max_tokens=params.max_new_tokens,
                                   min_tokens=params.min_new_tokens, logprobs=0)
    return vllm.SamplingParams(
        n=group_size, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or -1,
        max_tokens=params.max_new_tokens, min_tokens=params.min_new_tokens, logprobs=0,
    )


@contextmanager
def hf_named_weights(model: torch.nn.Module) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """``(name, tensor)`` of the policy's full weights under Hugging Face names (LoRA merged meanwhile)."""
    peft = hasattr(model, "peft_config")
    if peft:
        model.merge_adapter()
    try:
        named = []
        for name, tensor in model.state_dict().items():
            if peft:
                if "lora_" in name or "modules_to_save" in name or "original_module" in name:
                    continue
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            named.append((name, tensor.detach()))
        yield named
    finally:
        if peft:
            model.unmerge_adapter()


def _load_weights(model: torch.nn.Module, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Runs inside each vLLM worker: load the weights into its model; returns how many were given."""
    model.load_weights(weights=weights)
    return len(weights)


def _versions(model: torch.nn.Module) -> tuple[int, ...]:
    return tuple(p._version for p in model.parameters())


def _watch_optimizers(backend: "VLLMBackend", model: torch.nn.Module) -> None:
    """Mark ``backend`` stale after any optimizer step over one of ``model``'s parameters."""
    ref, ids = weakref.ref(backend), {id(p) for p in model.parameters()}

    def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        target = ref()
        if target is not None and any(id(p) in ids for g in optimizer.param_groups for p in g["params"]):
            target.stale = True

    backend._hook = register_optimizer_step_post_hook(hook)


class VLLMBackend:
    """GenerationBackend over an in-process ``vllm.LLM``, kept in sync with the trained policy.

    model: the policy being trained (its weights are pushed to vLLM when they change; None = never);
    model_path: the Hugging Face folder vLLM loads first; tokenizer: the policy's tokenizer (prompts
    are tokenized here, so the learner sees exactly the ids vLLM sampled from).
    """

    def __init__(self, model: Optional[torch.nn.Module], tokenizer: Any, model_path: str, *, dtype: str = "auto",
                 seed: int = 0, options: Optional[dict] = None) -> None:
        vllm = import_vllm()
        self.vllm, self.model, self.tokenizer = vllm, model, tokenizer
        kwargs = {"logprobs_mode": "processed_logprobs", **(options or {})}
        self.llm = vllm.LLM(model=model_path, dtype=dtype, seed=seed, **kwargs)
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.stale = False  # vLLM loaded the policy's weights from model_path
        self._synced = _versions(model) if model is not None else ()
        if model is not None:
            _watch_optimizers(self, model)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load ``(Hugging Face name, tensor)`` pairs into every vLLM worker's model, then drop stale KV."""
        weights = list(named_tensors)
        self.llm.apply_model(functools.partial(_load_weights, weights=weights))
        self.llm.reset_prefix_cache()

    def sync_policy(self) -> bool:
        """Push the policy's weights if they changed since the last push; True when pushed."""
        if self.model is None or (not self.stale and _versions(self.model) == self._synced):
            return False
        with hf_named_weights(self.model) as named:
            self.update_weights(named)
        self.stale, self._synced = False, _versions(self.model)  # after the LoRA unmerge, which bumps versions
        return True

    @torch.no_grad()
    def generate(self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams) -> RolloutBatch:
        """Sample ``group_size`` completions per prompt; rows are ordered prompt-major like HFBackend's."""
        self.sync_policy()
        enc = self.tokenizer(prompt_texts, return_tensors="pt", padding=True, add_special_tokens=False)
        prompts = [{"prompt_token_ids": ids[m.bool()].tolist()} for ids, m in zip(enc.input_ids, enc.attention_mask)]
        outputs = self.llm.generate(prompts, vllm_sampling_params(self.vllm, group_size, params), use_tqdm=False)
        samples = [c for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]
        if len(samples) != len(prompt_texts) * group_size:
            raise RuntimeError(f"vLLM returned {len(samples)} completions for {len(prompt_texts)} prompts x {group_size}")
        width = max(1, max(len(c.token_ids) for c in samples))
        completion_ids = torch.full((len(samples), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(samples), width, dtype=torch.long)
        sampling_logp = torch.zeros(len(samples), width)
        for i, c in enumerate(samples):
            n = len(c.token_ids)  # vLLM stops at EOS (kept) or at max_tokens: every returned token counts
            completion_ids[i, :n] = torch.tensor(c.token_ids, dtype=torch.long)
            mask[i, :n] = 1
            if c.logprobs is not None:
                sampling_logp[i, :n] = torch.tensor([step[t].logprob for step, t in zip(c.logprobs, c.token_ids)])
        truncated = torch.tensor([c.finish_reason == "length" for c in samples])
        return group_batch(self.tokenizer, enc.input_ids, enc.attention_mask, rows, group_size,
                           completion_ids, mask, sampling_logp, truncated)
