"""Sampling with vLLM (extra ``[vllm]``, GPU): the same GenerationBackend as HFBackend.

Untested on hardware: the tests run this module against a fake ``vllm`` module whose signatures
follow vLLM 0.30 (``vllm/entrypoints/llm.py``, ``vllm/lora/request.py``, ``vllm/sampling_params.py``).

``rollout.backend: vllm`` builds ``vllm.LLM(model=<policy folder>, dtype, seed, **backend_options)``
in the trainer's process (TRL's "colocate" mode) and samples each step's groups with

    SamplingParams(n=G, temperature, top_p, top_k (-1 = off), max_tokens=max_new_tokens,
                   min_tokens=min_new_tokens, logprobs=0)

Sampler log-probs: ``logprobs=0`` returns the log-prob of each sampled token only, and it becomes
``RolloutBatch.sampling_logp`` (``engine="vllm"``, ``weights_version`` = the learner step of the
last weight sync). The engine runs with ``logprobs_mode="processed_logprobs"`` (vLLM >= 0.10.2;
no other value is accepted): vLLM's v1 sampler (``vllm/v1/sample/sampler.py``) applies the
min-tokens processor (EOS banned before ``min_tokens``), then temperature, then top-k / top-p, and
returns log-softmax of those processed logits, i.e. the log-prob under the distribution that drew
the token, renormalised over the allowed tokens, as HFBackend records it. vLLM returns no
entropies: ``RolloutBatch.entropy`` is None, so entropy-based token selection (forking tokens,
SPINE) needs ``rollout.backend: hf``.

Weights: before sampling, the backend pushes the policy's weights into the engine when they
changed since the last push: an optimizer stepped them (a global optimizer step hook; fused AdamW
does not bump tensor versions) or they were copied into (``load_state_dict`` on resume bumps the
parameters' in-place version counters).

- Full weights: ``LLM.apply_model(fn)`` runs ``fn(model)`` in every vLLM worker and ``fn`` calls
  the model's own ``load_weights(iterable of (HF name, tensor))``, the loader TRL's colocate mode
  and verl's sharding managers use; then ``LLM.reset_prefix_cache()`` drops KV blocks computed
  with the old weights.
- LoRA (a peft policy): only the adapter moves. The engine starts with ``enable_lora=True`` and
  ``max_lora_rank`` = the adapter rank rounded up to a rank vLLM accepts; each push saves the
  adapter (peft ``save_pretrained``) to ``<temp>/v<k>`` and samples with
  ``LoRARequest("grpokit-policy-v<k>", k, path)``. vLLM caches adapters by id and reuses a cached
  one without reading its folder again (``vllm/lora/worker_manager.py``), so the id changes with
  every version; prefix-cache blocks are keyed by the adapter's name, which changes too, so none
  is reset. The adapter is pushed before the first sampling.

Sync check (``backend_options.sync_check``, default on): after every push, and before the first
sampling, a fixed probe (``PROBE_PROMPT`` + ``PROBE_COMPLETION``, token ids) is scored by vLLM
(``prompt_logprobs=0``: a plain fp32 log-softmax of the logits, no sampling processors) and by
the learner (the policy's forward, no grad, fp32 log-softmax); if the largest per-token
|difference| over the completion exceeds ``sync_check_tolerance``, ``WeightSyncError`` is raised.
The value is logged at debug level and kept in ``last_sync_diff``. Default tolerances by dtype
(``SYNC_TOLERANCE``) sit above the largest difference between two correct implementations,
measured on SmolLM2-135M-Instruct (CPU, transformers ``sdpa`` vs ``eager`` attention, three
43-59 token chat probes): bfloat16 0.25 nats (tolerance 0.5, twice that), float16 0.049 (0.1),
float32 2.8e-5 (1e-3: room for GPU kernels' other summation orders, still below the 0.014 nats
one AdamW step at lr 1e-6 moved the probe). vLLM's kernels are not measured here [inferred].
Weights that never loaded (a random-initialised model against the trained one: 11 nats) are
caught at every dtype; a push that silently fails every time is caught once the policy has drifted further than
the tolerance from the engine (three AdamW steps at lr 1e-5 moved the probe 0.36 nats): in
float32 after one step, in bfloat16 after a few.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import inspect
import logging
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Iterable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from grpokit.rollout.types import RolloutBatch, SamplingParams, group_batch

log = logging.getLogger(__name__)

INSTALL_HINT = "rollout.backend=vllm needs vLLM: pip install 'grpokit[vllm]' (GPU), or set rollout.backend=hf"
PROBE_PROMPT = "Question: what is 7 + 5?\nAnswer:"
PROBE_COMPLETION = " 7 + 5 = 12. The answer is 12."
SYNC_TOLERANCE = {"float32": 1e-3, "float16": 0.1, "bfloat16": 0.5}  # nats; see the module docstring
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm/config/lora.py MaxLoRARanks (0.30)
OWN_OPTIONS = ("model", "dtype", "sync_check", "sync_check_tolerance")  # model / dtype: read by make_backend


class WeightSyncError(RuntimeError):
    """vLLM's weights do not match the policy's after a sync (one line: the difference and the option)."""


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


def engine_keywords(vllm: Any) -> Optional[set[str]]:
    """Keyword arguments ``vllm.LLM`` accepts (its own and, through ``**kwargs``, ``EngineArgs``'s); None = unknown."""
    try:
        params = inspect.signature(vllm.LLM).parameters.values()
    except (TypeError, ValueError):
        return None
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        engine_args = getattr(vllm, "EngineArgs", None)
        if engine_args is None or not dataclasses.is_dataclass(engine_args):
            return None
        names |= {f.name for f in dataclasses.fields(engine_args)}
    return names


def split_options(vllm: Any, options: dict) -> tuple[dict, bool, Optional[float]]:
    """(engine keyword arguments, sync_check, sync_check_tolerance) of ``rollout.backend_options``.

    Unknown keys fail here with one line rather than deep inside vLLM; when vLLM's signature
    cannot be read, engine keys pass through unchecked.
    """
    options = dict(options)
    check, tolerance = options.pop("sync_check", True), options.pop("sync_check_tolerance", None)
    if not isinstance(check, bool):
        raise ValueError(f"rollout.backend_options.sync_check must be true or false, got {check!r}")
    if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or tolerance <= 0):
        raise ValueError(f"rollout.backend_options.sync_check_tolerance must be a positive number, got {tolerance!r}")
    if "seed" in options:
        raise ValueError("rollout.backend_options.seed: vLLM is seeded with train.seed; remove it")
    if options.get("logprobs_mode", "processed_logprobs") != "processed_logprobs":
        raise ValueError(
            f"rollout.backend_options.logprobs_mode={options['logprobs_mode']!r}: only 'processed_logprobs' gives "
            "sampling_logp under the sampling distribution (as rollout.backend=hf records it); remove it"
        )
    known = engine_keywords(vllm)
    unknown = sorted(set(options) - known) if known is not None else []
    if unknown:
        close = [(k, difflib.get_close_matches(k, known | set(OWN_OPTIONS), 1)) for k in unknown]
        hints = ", ".join(f"{k!r} -> {m[0]!r}" for k, m in close if m)
        raise ValueError(
            f"rollout.backend_options {unknown} are not options of this vLLM"
            f"{f' (did you mean {hints}?)' if hints else ''}: valid are grpokit's {', '.join(OWN_OPTIONS)} and the keyword arguments of vllm.LLM / vllm.EngineArgs"
        )
    return options, check, float(tolerance) if tolerance is not None else None


def hf_named_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(Hugging Face name, tensor)`` of a full (non-peft) policy's weights."""
    return [(name, tensor.detach()) for name, tensor in model.state_dict().items()]


def lora_rank(model: torch.nn.Module) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds every adapter rank of the peft ``model``."""
    ranks = [r for cfg in model.peft_config.values() for r in (cfg.r, *(cfg.rank_pattern or {}).values())]
    return next((r for r in VLLM_LORA_RANKS if r >= max(ranks)), max(ranks))


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


@torch.no_grad()
def learner_logprobs(model: torch.nn.Module, ids: list[int], start: int) -> torch.Tensor:
    """``[len(ids) - start]`` log-probs the policy gives tokens ``ids[start:]`` (eval mode, fp32 log-softmax)."""
    device = next(model.parameters()).device
    training = model.training
    model.eval()  # no dropout in the probe
    try:
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, start - 1 : -1]
    finally:
        model.train(training)
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, torch.tensor(ids[start:], device=device).unsqueeze(-1)).squeeze(-1).cpu()


class VLLMBackend:
    """GenerationBackend over an in-process ``vllm.LLM``, kept in sync with the trained policy.

    model: the policy being trained (its weights, or its LoRA adapter, are pushed to vLLM when
    they change; None = never); model_path: the Hugging Face folder vLLM loads first (for a peft
    policy, its base); tokenizer: the policy's tokenizer (prompts are tokenized here, so the
    learner sees exactly the ids vLLM sampled from); options: ``rollout.backend_options`` without
    ``model`` / ``dtype``. The trainer sets ``learner_step`` to its step before sampling; a push
    records it as ``weights_version``. Batches land on the policy's device (the CPU without one).
    """

    engine = "vllm"  # an inference engine: its numerics differ from the learner's

    def __init__(self, model: Optional[torch.nn.Module], tokenizer: Any, model_path: str, *, dtype: str = "auto",
                 seed: int = 0, options: Optional[dict] = None) -> None:
        vllm = import_vllm()
        self.vllm, self.model, self.tokenizer = vllm, model, tokenizer
        kwargs, self.sync_check, tolerance = split_options(vllm, options or {})
        held = str(next(model.parameters()).dtype).removeprefix("torch.") if dtype == "auto" and model is not None else dtype
        default = SYNC_TOLERANCE.get(held, SYNC_TOLERANCE["bfloat16"])  # unknown dtype: the loosest
        self.sync_tolerance = tolerance if tolerance is not None else default
        self.lora = model is not None and hasattr(model, "peft_config")
        lora = {"enable_lora": True, "max_lora_rank": lora_rank(model)} if self.lora else {}
        kwargs = {"logprobs_mode": "processed_logprobs", **lora, **kwargs}
        self.llm = vllm.LLM(model=model_path, dtype=dtype, seed=seed, **kwargs)
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        prompt = tokenizer(PROBE_PROMPT, add_special_tokens=False).input_ids
        self.probe_start = len(prompt)  # the probe's completion starts here
        self.probe_ids = prompt + tokenizer(PROBE_COMPLETION, add_special_tokens=False).input_ids
        self.learner_step = self.weights_version = 0
        self.last_sync_diff: Optional[float] = None
        self.lora_request: Any = None  # the adapter version vLLM samples with (peft policies)
        self._lora_dir: Optional[Path] = None
        self.stale = self.lora  # vLLM loaded full weights from model_path; a peft adapter still has to go
        self._checked = model is None or not self.sync_check
        self._synced = _versions(model) if model is not None else ()
        if model is not None:
            _watch_optimizers(self, model)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load ``(Hugging Face name, tensor)`` pairs into every vLLM worker's model, then drop stale KV."""
        weights = list(named_tensors)
        self.llm.apply_model(functools.partial(_load_weights, weights=weights))
        self.llm.reset_prefix_cache()

    def push_adapter(self) -> None:
        """Save the policy's LoRA adapter as a new version and sample with a LoRARequest of a new id."""
        lora_request_cls = importlib.import_module("vllm.lora.request").LoRARequest
        if self._lora_dir is None:
            self._lora_dir = Path(tempfile.mkdtemp(prefix="grpokit-vllm-lora-"))
            weakref.finalize(self, shutil.rmtree, self._lora_dir, ignore_errors=True)
        version = self.lora_request.lora_int_id + 1 if self.lora_request is not None else 1
        path = self._lora_dir / f"v{version}"
        self.model.save_pretrained(str(path))  # peft: adapter_config.json + adapter_model.safetensors only
        if self.lora_request is not None and self.lora_request.lora_path != str(path):  # vLLM never asks for it again
            shutil.rmtree(self.lora_request.lora_path, ignore_errors=True)
        self.lora_request = lora_request_cls(f"grpokit-policy-v{version}", version, str(path))

    def sync_policy(self) -> bool:
        """Push the policy's weights (or adapter) if they changed since the last push, then check; True when pushed."""
        pushed = self.model is not None and (self.stale or _versions(self.model) != self._synced)
        if pushed:
            if self.lora:
                self.push_adapter()
            else:
                self.update_weights(hf_named_weights(self.model))
            self.stale, self._synced, self.weights_version = False, _versions(self.model), self.learner_step
        if self.sync_check and (pushed or not self._checked):
            self.check_sync()
        return pushed

    def check_sync(self) -> float:
        """Max |vLLM - learner| per-token log-prob on the probe completion; WeightSyncError above the tolerance."""
        request = self.vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        out = self.llm.generate([{"prompt_token_ids": self.probe_ids}], request, use_tqdm=False, lora_request=self.lora_request)
        scored = out[0].prompt_logprobs  # [None, {token: Logprob}, ...]: position i scores probe_ids[i]
        values = [scored[i][t].logprob for i, t in enumerate(self.probe_ids) if i >= self.probe_start]
        engine = torch.tensor(values, device="cpu")  # host-side values; learner_logprobs returns CPU too
        diff = float((engine - learner_logprobs(self.model, self.probe_ids, self.probe_start)).abs().max())
        self.last_sync_diff, self._checked = diff, True
        log.debug("vLLM sync check (weights of learner step %d): max |delta log-prob| %.3g, tolerance %g",
                  self.weights_version, diff, self.sync_tolerance)
        if not diff <= self.sync_tolerance:  # NaN fails too
            raise WeightSyncError(
                f"vLLM's weights do not match the policy after the sync at learner step {self.weights_version}: "
                f"max |delta log-prob| {diff:.3g} on the probe > rollout.backend_options.sync_check_tolerance="
                f"{self.sync_tolerance:g}; the engine would sample from other weights (raise the tolerance only if "
                "its kernels differ that much at this dtype; sync_check: false skips the check)"
            )
        return diff

    @torch.no_grad()
    def generate(self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams) -> RolloutBatch:
        """Sample ``group_size`` completions per prompt; rows are ordered prompt-major like HFBackend's."""
        self.sync_policy()
        enc = self.tokenizer(prompt_texts, return_tensors="pt", padding=True, add_special_tokens=False)
        prompts = [{"prompt_token_ids": ids[m.bool()].tolist()} for ids, m in zip(enc.input_ids, enc.attention_mask)]
        outputs = self.llm.generate(prompts, vllm_sampling_params(self.vllm, group_size, params), use_tqdm=False,
                                    lora_request=self.lora_request)
        samples = [c for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]
        if len(samples) != len(prompt_texts) * group_size:
            raise RuntimeError(f"vLLM returned {len(samples)} completions for {len(prompt_texts)} prompts x {group_size}")
        width = max(1, max(len(c.token_ids) for c in samples))
        # vLLM's outputs are host-side lists: the batch is built on the CPU, then moved once
        completion_ids = torch.full((len(samples), width), self.pad_id, dtype=torch.long, device="cpu")
        mask = torch.zeros(len(samples), width, dtype=torch.long, device="cpu")
        sampling_logp = torch.zeros(len(samples), width, device="cpu")  # [B, T]
        for i, c in enumerate(samples):
            n = len(c.token_ids)  # vLLM stops at EOS (kept) or at max_tokens: every returned token counts
            if c.logprobs is None or len(c.logprobs) != n:
                raise RuntimeError(f"vLLM returned {0 if c.logprobs is None else len(c.logprobs)} log-probs for {n} sampled tokens")
            completion_ids[i, :n] = torch.tensor(c.token_ids, dtype=torch.long, device="cpu")
            mask[i, :n] = 1
            sampling_logp[i, :n] = torch.tensor([step[t].logprob for step, t in zip(c.logprobs, c.token_ids)], device="cpu")
        truncated = torch.tensor([c.finish_reason == "length" for c in samples], device="cpu")
        device = next(self.model.parameters()).device if self.model is not None else torch.device("cpu")
        on = [t.to(device) for t in (enc.input_ids, enc.attention_mask, completion_ids, mask, sampling_logp, truncated)]
        batch = group_batch(self.tokenizer, *on[:2], rows, group_size, *on[2:])
        batch.engine, batch.weights_version = "vllm", self.weights_version
        return batch
