"""The writer LM: any callable ``(messages, params) -> text`` that rewrites a procedural draft.

"Modular Techniques for Synthetic Long-Context Data Generation" (arXiv 2509.01185) is
model-agnostic: the generator only calls a client with chat messages. Clients here:

- :class:`HFWriter` — a local causal LM through transformers ``generate`` (default: the embedded
  SmolLM2-135M-Instruct, ``smollm2-135m-instruct``, or any local HF folder / .gguf file);
- :class:`VLLMWriter` — ``vllm:<model>``, vLLM's offline ``LLM`` when the package is importable
  (a GPU machine);
- ``none`` — no model: the drafts are the responses (procedural surface text).

Sampling is seeded per call (``params.seed``, derived from the run seed, the item and the turn), so
the same seed gives the same text on the same machine and library versions.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Optional

SYSTEM = ("You rewrite short texts for a dataset. Reply with the rewritten text only. Keep every name, "
          "number and quoted sentence exactly as written.")


@dataclass(frozen=True)
class WriterParams:
    """Sampling options of one writer call."""

    max_new_tokens: int = 160  # cap of the rewrite in tokens
    temperature: float = 0.7  # 0 = greedy
    top_p: float = 0.95
    seed: int = 0  # sampling seed of this call


Writer = Callable[[list[dict], WriterParams], str]


def rewrite_messages(instruction: str, draft: str) -> list[dict]:
    """The chat the writer sees: the system rule, then the rewrite instruction and the draft after ``Text:``."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{instruction}\n\nText:\n{draft}"}]


class HFWriter:
    """A local causal LM (grpokit's loader: embedded name, HF folder or .gguf) sampling with transformers."""

    def __init__(self, source: str, device: str = "cpu") -> None:
        from grpokit.model.context import context_length
        from grpokit.model.loading import load_model

        self.name = source
        self.model, self.tokenizer = load_model(source, dtype="float32", device=device)
        self.model.eval()
        self.max_context = context_length(source)  # the GGUF's metadata or the folder's config

    def __call__(self, messages: list[dict], params: WriterParams) -> str:
        import torch

        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(self.model.device)
        torch.manual_seed(params.seed)
        sample = params.temperature > 0
        with torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=params.max_new_tokens, do_sample=sample,
                temperature=params.temperature if sample else None, top_p=params.top_p if sample else None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        return self.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


class VLLMWriter:
    """vLLM's offline engine (``vllm:<model>``); the sampling seed goes with each request."""

    def __init__(self, source: str) -> None:
        from vllm import LLM

        self.name = f"vllm:{source}"
        self.llm = LLM(model=source, seed=0)
        self.max_context = int(self.llm.llm_engine.model_config.max_model_len)

    def __call__(self, messages: list[dict], params: WriterParams) -> str:
        from vllm import SamplingParams

        sp = SamplingParams(max_tokens=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p, seed=params.seed)
        return self.llm.chat([messages], sp, use_tqdm=False)[0].outputs[0].text


def make_writer(spec: str, device: str = "cpu") -> Optional[Any]:
    """The writer named by ``--writer``: ``none`` (drafts only), ``vllm:<model>``, or a local model for :class:`HFWriter`."""
    if spec == "none":
        return None
    if spec.startswith("vllm:"):
        if importlib.util.find_spec("vllm") is None:
            raise ValueError(f"--writer {spec}: vllm is not installed (pip install 'grpokit[vllm]' on a GPU machine), or use a local model")
        return VLLMWriter(spec[len("vllm:"):])
    return HFWriter(spec, device=device)
