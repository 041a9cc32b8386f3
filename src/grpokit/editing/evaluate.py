"""Knowledge-editing metrics under free generation (greedy decoding), not teacher forcing.

EtCon (Li et al., arXiv 2512.04753, Sec. 1 and Fig. 1) shows that editors that look reliable
under teacher forcing fail when the model generates freely; so every metric here greedily
decodes an answer and reads it:

    reliability     share of edit prompts whose answer mentions the new object
    generalisation  share of paraphrases whose answer mentions the new object
    locality        share of neighbour questions whose answer equals the pre-edit model's own

"Answer": the content of the first ``\\boxed{...}`` when there is one, else the whole completion;
"mentions": the normalised object (EtCon's normalisation, :func:`grpokit.rewards.etcon.normalize`)
appears as whole words in the normalised answer; "equals": the normalised answers are identical.
Two prompt styles: ``direct`` (the question alone) and ``cot`` (the question followed by the
authors' consolidation instruction :data:`COT_SUFFIX`, the inference policy GRPO consolidates).
"""

from __future__ import annotations

import re
from typing import Optional

import torch

from grpokit.data.chat import render_prompt
from grpokit.editing.facts import COT_SUFFIX, STYLES, Edit, styled  # noqa: F401  (re-exported)
from grpokit.rewards.etcon import normalize

SYSTEM_PROMPT = "You are a helpful assistant."  # [inferred] short: SmolLM2's default system prompt triples the CPU cost
_BOX = re.compile(r"\\boxed\{([^}]*)\}")


def final_answer(text: str) -> str:
    """The first box's content when the completion has one, else the completion itself."""
    match = _BOX.search(text)
    return match.group(1) if match else text


def mentions(answer: str, target: str) -> bool:
    """True when the normalised ``target`` occurs as whole words in the normalised ``answer``."""
    t = normalize(target)
    return bool(t) and f" {t} " in f" {normalize(answer)} "


def questions_of(edits: list[Edit]) -> list[str]:
    """Every question the metrics ask, each once, in a fixed order (prompts, paraphrases, neighbours)."""
    seen: dict[str, None] = {}
    for e in edits:
        for q in [e.prompt, *e.paraphrases, *e.neighbours]:
            seen.setdefault(q, None)
    return list(seen)


@torch.no_grad()
def greedy_answers(model, tokenizer, questions: list[str], style: str, *, max_new_tokens: int = 24,
                   batch_size: int = 50, system_prompt: Optional[str] = SYSTEM_PROMPT) -> dict[str, str]:
    """``{question: greedy completion}`` of ``model`` for the questions in ``style``, ``batch_size`` prompts at a time."""
    from grpokit.rollout.hf import HFBackend
    from grpokit.rollout.types import SamplingParams

    backend = HFBackend(model, tokenizer)
    params = SamplingParams(max_new_tokens, greedy=True)
    out: dict[str, str] = {}
    for s in range(0, len(questions), batch_size):
        chunk = questions[s : s + batch_size]
        texts = [render_prompt(tokenizer, styled(q, style), system_prompt) for q in chunk]
        batch = backend.generate(texts, [{"prompt": q} for q in chunk], 1, params)
        out.update(zip(chunk, batch.completions))
    return out


def score(edits: list[Edit], answers: dict[str, str], baseline: dict[str, str]) -> dict[str, float]:
    """Reliability, generalisation and locality of ``answers`` (``baseline``: the pre-edit model's answers)."""
    rel = [mentions(final_answer(answers[e.prompt]), e.target_new) for e in edits]
    gen = [mentions(final_answer(answers[q]), e.target_new) for e in edits for q in e.paraphrases]
    loc = [normalize(final_answer(answers[q])) == normalize(final_answer(baseline[q])) for e in edits for q in e.neighbours]

    def share(xs: list[bool]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    return {"reliability": share(rel), "generalisation": share(gen), "locality": share(loc)}


def evaluate(model, tokenizer, edits: list[Edit], styles: tuple[str, ...], baseline: Optional[dict] = None, *,
             max_new_tokens: dict[str, int], batch_size: int = 50,
             system_prompt: Optional[str] = SYSTEM_PROMPT) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, str]]]:
    """Per style: the metrics and the answers. ``baseline=None``: this model is the pre-edit one (locality 1 by definition)."""
    questions = questions_of(edits)
    metrics, answers = {}, {}
    for style in styles:
        answers[style] = greedy_answers(model, tokenizer, questions, style, max_new_tokens=max_new_tokens[style],
                                        batch_size=batch_size, system_prompt=system_prompt)
        metrics[style] = score(edits, answers[style], (baseline or answers)[style])
    return metrics, answers
