"""LLM-judge pairwise preference P(a ≻ b) read from one forward pass of a local causal LM.

Pref-GRPO (Wang et al., "Pref-GRPO: Pairwise Preference Reward-based GRPO for Stable
Text-to-Image Reinforcement Learning", arXiv 2508.20751) scores a group by
pairwise verdicts of a judge. Here the judge is a local causal LM (default: the embedded
SmolLM2-135M-Instruct) prompted with ``DEFAULT_TEMPLATE`` through its chat template; instead of
sampling and parsing a verdict we read the next-token distribution right after the assistant tag
and renormalise it over the answer tokens:

    P(A) = Σ_{t∈T_A} p(t) / (Σ_{t∈T_A} p(t) + Σ_{t∈T_B} p(t))  =  σ(lse(z_{T_A}) − lse(z_{T_B}))

``T_A`` / ``T_B`` are the first token ids of "A" and " A" (resp. "B", " B") as the tokenizer
encodes them after the rendered prompt; a spelling whose A and B tokens coincide (a
character-level tokenizer gives " " for both " A" and " B") is dropped [inferred: the paper parses
a sampled verdict; the soft probability is the expectation of that verdict]. Judges are loaded
once per (source, device) and kept in a thread-safe module cache, in eval mode.
``win_rate(prefer="llm_judge", judge_model=...)`` uses :func:`llm_judge_prefer`.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from grpokit.data.chat import render_prompt
from grpokit.model.loading import load_model

logger = logging.getLogger(__name__)

DEFAULT_JUDGE = "smollm2-135m-instruct"
DEFAULT_TEMPLATE = (
    "Question: {prompt}\n\nResponse A: {a}\n\nResponse B: {b}\n\n"
    "Which response is better? Answer A or B."
)


class JudgeError(ValueError):
    """A judge model or template that cannot be used; the message names it and the fix."""


@dataclass(frozen=True)
class Judge:
    """A loaded judge: model (eval mode), tokenizer and the answer token ids ``T_A``, ``T_B``."""

    model: Any
    tokenizer: Any
    a_ids: tuple[int, ...]
    b_ids: tuple[int, ...]
    device: str


_JUDGES: dict[tuple[str, str], Judge] = {}
_LOCK = threading.Lock()


def _source_key(source: str | os.PathLike[str]) -> str:
    """Cache key of a judge source: a path's resolved form, or the embedded name as given."""
    text = os.fspath(source)
    path = Path(text).expanduser()
    return str(path.resolve()) if path.exists() else text


def _first_new_token(tokenizer: Any, prefix_ids: list[int], text: str) -> int | None:
    """First token id after ``prefix_ids`` when ``text`` is encoded, or None if the prefix re-tokenises."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= len(prefix_ids) or ids[: len(prefix_ids)] != prefix_ids:
        return None
    return ids[len(prefix_ids)]


def answer_token_ids(tokenizer: Any, rendered: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Token ids ``(T_A, T_B)`` that start an "A" / "B" answer right after the rendered prompt.

    Tries the spellings "A"/"B" and " A"/" B"; keeps each spelling whose first tokens exist and
    differ. Raises JudgeError when none does.
    """
    prefix = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    a_ids: list[int] = []
    b_ids: list[int] = []
    for space in ("", " "):
        ta = _first_new_token(tokenizer, prefix, rendered + space + "A")
        tb = _first_new_token(tokenizer, prefix, rendered + space + "B")
        if ta is not None and tb is not None and ta != tb and ta not in a_ids:
            a_ids.append(ta)
            b_ids.append(tb)
    if not a_ids:
        raise JudgeError(
            f"judge tokenizer '{getattr(tokenizer, 'name_or_path', '?')}' has no distinct tokens for "
            "answers 'A' and 'B' after the prompt; use another judge_model"
        )
    return tuple(a_ids), tuple(b_ids)


def load_judge(judge_model: str | os.PathLike[str] = DEFAULT_JUDGE, device: str | None = None) -> Judge:
    """The judge for ``judge_model`` (embedded name, HF folder or .gguf), loaded once per device.

    ``device=None`` picks "cuda" when available, else "cpu". Thread-safe: concurrent first calls
    load the model once.
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    key = (_source_key(judge_model), device)
    with _LOCK:
        judge = _JUDGES.get(key)
        if judge is None:
            model, tokenizer = load_model(judge_model)
            model.to(device).eval().requires_grad_(False)
            probe = render_prompt(tokenizer, DEFAULT_TEMPLATE.format(prompt="", a="", b=""))
            a_ids, b_ids = answer_token_ids(tokenizer, probe)
            judge = Judge(model, tokenizer, a_ids, b_ids, device)
            _JUDGES[key] = judge
            logger.info("LLM judge %s loaded on %s (answer tokens A=%s B=%s)", key[0], device, a_ids, b_ids)
        return judge


def clear_judge_cache() -> None:
    """Forget every loaded judge (the next call loads again)."""
    with _LOCK:
        _JUDGES.clear()


def _judge_text(tokenizer: Any, template: str, prompt: str, a: str, b: str, system_prompt: str | None) -> str:
    try:
        user = template.format(prompt=prompt, a=a, b=b)
    except (KeyError, IndexError, ValueError) as exc:
        raise JudgeError(
            f"judge template {template[:60]!r} is not a format string over {{prompt}}, {{a}}, {{b}} ({exc})"
        ) from exc
    return render_prompt(tokenizer, user, system_prompt)


@torch.no_grad()
def next_token_logits(judge: Judge, texts: list[str], batch_size: int) -> Iterator[torch.Tensor]:
    """The judge's next-token logits ``[b, V]`` (float32, on its device) after each rendered text, ``batch_size`` rows a pass."""
    tok = judge.tokenizer
    for start in range(0, len(texts), batch_size):
        enc = tok(texts[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
        ids = enc["input_ids"].to(judge.device)  # [b, T], left-padded
        mask = enc["attention_mask"].to(judge.device)  # [b, T]
        # positions count real tokens only, so a left-padded row sees the same positions as alone
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        yield judge.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1].float()


def _p_first(judge: Judge, texts: list[str], batch_size: int) -> torch.Tensor:
    """P(A) ``[N]`` (float64, CPU) for rendered judge prompts, ``batch_size`` per forward pass."""
    a_ids = torch.tensor(judge.a_ids, device=judge.device)
    b_ids = torch.tensor(judge.b_ids, device=judge.device)
    out = []
    for logits in next_token_logits(judge, texts, batch_size):
        margin = logits[:, a_ids].logsumexp(-1) - logits[:, b_ids].logsumexp(-1)  # [b]
        out.append(torch.sigmoid(margin.double()).cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64, device="cpu")


def llm_judge_prefer_batch(
    prompts: Sequence[str],
    firsts: Sequence[str],
    seconds: Sequence[str],
    *,
    judge_model: str | os.PathLike[str] = DEFAULT_JUDGE,
    template: str = DEFAULT_TEMPLATE,
    symmetric: bool = False,
    system_prompt: str | None = None,
    batch_size: int = 16,
    device: str | None = None,
) -> list[float]:
    """P(firsts[k] ≻ seconds[k] | prompts[k]) for every k, from batched judge forward passes.

    ``symmetric=True`` also judges the swapped order and returns (P(A | a, b) + 1 − P(A | b, a))/2,
    which cancels position bias: then prefer(a, b) + prefer(b, a) = 1 exactly. ``system_prompt``
    replaces the chat template's default system message (None keeps it).
    """
    if not (len(prompts) == len(firsts) == len(seconds)):
        raise JudgeError(f"judge got {len(prompts)} prompts, {len(firsts)} firsts, {len(seconds)} seconds")
    judge = load_judge(judge_model, device)
    tok = judge.tokenizer
    texts = [_judge_text(tok, template, q, a, b, system_prompt) for q, a, b in zip(prompts, firsts, seconds)]
    if symmetric:
        texts += [_judge_text(tok, template, q, b, a, system_prompt) for q, a, b in zip(prompts, firsts, seconds)]
    p = _p_first(judge, texts, batch_size)
    if symmetric:
        n = len(prompts)
        p = (p[:n] + 1.0 - p[n:]) / 2.0
    return p.tolist()


def llm_judge_prefer(
    prompt: str,
    a: str,
    b: str,
    *,
    judge_model: str | os.PathLike[str] = DEFAULT_JUDGE,
    template: str = DEFAULT_TEMPLATE,
    symmetric: bool = False,
    system_prompt: str | None = None,
    device: str | None = None,
    **_: Any,
) -> float:
    """P(a ≻ b | prompt) = σ(lse z_A − lse z_B) of a local LLM judge (one forward pass; two rows if symmetric).

    The ``prefer`` function behind ``win_rate(prefer="llm_judge")``; extra row columns are
    ignored. Through ``win_rate`` prefer win_rate's own ``symmetric`` (same average, two calls).
    """
    return llm_judge_prefer_batch(
        [prompt], [a], [b], judge_model=judge_model, template=template, symmetric=symmetric,
        system_prompt=system_prompt, device=device,
    )[0]
