"""Difficulty-decreasing hints cut from the policy's own answer-conditioned reasoning.

DeepVideo-R1 (Park et al., "DeepVideo-R1: Video Reinforcement Fine-Tuning via Difficulty-aware
Regressive GRPO", arXiv 2506.07464, §3.3, "Difficulty-decreasing augmentation"): for a sample
harder than the recent ones (ΔR > 0) the model is re-prompted with the ground-truth answer
appended to the question, several reasoning trajectories are sampled, the one with the highest
reward is kept, and a *partial* reasoning trace of it is put into the original prompt; harder
samples get a longer part ("the guidance level is scaled according to the sample's difficulty
magnitude"). Here:

* answer-conditioned prompt: ``prompt + "\\n" + answer_cue.format(answer=...)`` (the cue's wording
  is grpokit's [inferred]; the paper only says the answer is added to the prompt);
* ``samples`` trajectories (default 8, the paper's group size G [inferred]) from the policy as it
  is at the draw, best by the run's total reward (first of equals);
* the reasoning part of the best trajectory: its ``<think>…</think>`` content when it has one,
  else the text before the first statement of the gold answer (none when it never states it) —
  cut before the first place where the gold answer's words appear, so the hint never states
  the answer [inferred: the paper's partial trace stops short of the answer; it does not say how];
* the hint: ``"Hint: "`` + the first ``k = clip(ceil(f·n), 1, n)`` of its n words, f =
  clip(|ΔR| / r_range, 0, 1) (the linear form is [inferred]; the paper gives none).

A model that writes no reasoning before its answer (the tiny Qwen2-VL answers in one word) has
no such prefix: the row is left unchanged and counted as ``hint_unavailable``.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Optional

# rows (prompts already answer-conditioned), k -> for each row its k (completion text, reward)
TraceSampler = Callable[[list[dict], int], list[list[tuple[str, float]]]]

ANSWER_CUE = "The answer is {answer}."
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_WORD = re.compile(r"[\w']+")
_TAG = re.compile(r"</?\w+>")


def answer_conditioned(row: dict, cue: str = ANSWER_CUE) -> dict:
    """A copy of ``row`` whose prompt ends with the gold answer (``cue`` with ``{answer}``)."""
    return {**row, "prompt": f"{row['prompt']}\n{cue.format(answer=row['answer'])}"}


def _norm(word: str) -> str:
    return "".join(_WORD.findall(word.lower()))


def reasoning_words(completion: str, answer: object) -> list[str]:
    """The words of ``completion``'s reasoning that come before any statement of ``answer``.

    With ``<think>`` tags the reasoning is their content; else it is the text before the first
    run of words that spells the answer (case and punctuation ignored; before ``<answer>`` when
    the completion has that tag), and a completion that never states the answer has none (its
    last words would be its own, wrong, answer). E.g. "it moves left so left" with answer
    "left" -> ["it", "moves"]; "it moves up" with answer "left" -> [].
    """
    match = _THINK.search(completion)
    tagged = match is not None
    text = match.group(1) if tagged else completion.split("<answer>")[0]
    words = text.split()
    gold = [w for w in (_norm(x) for x in str(answer).split()) if w]
    normed = [_norm(w) for w in words]
    if gold:
        for i in range(len(words)):
            if normed[i : i + len(gold)] == gold:
                return words[:i]
    if tagged:
        return words
    stated = [_norm(w) for w in _TAG.sub(" ", completion).split()]  # the answer after <answer>, or nowhere
    return words if gold and any(stated[i : i + len(gold)] == gold for i in range(len(stated))) else []


def trace_prefix(words: list[str], fraction: float) -> str:
    """The first ``k = clip(ceil(fraction·n), 1, n)`` of the n ``words``, joined by spaces."""
    n = len(words)
    k = min(max(math.ceil(min(max(fraction, 0.0), 1.0) * n), 1), n)
    return " ".join(words[:k])


class TraceHints:
    """Hints for a batch of too-hard rows from one call of a bound :data:`TraceSampler`.

    ``samples``: trajectories per row; ``answer_cue``: the text that puts the answer into the
    prompt (must contain ``{answer}``). :meth:`bind` gives it the sampler (the trainer binds the
    run's policy and rewards); hinting before that is an error, never another kind of hint.
    """

    def __init__(self, samples: int = 8, answer_cue: str = ANSWER_CUE) -> None:
        if samples < 1:
            raise ValueError(f"curriculum 'difficulty_augmentation': trace_samples must be >= 1, got {samples}")
        if "{answer}" not in answer_cue:
            raise ValueError(f"curriculum 'difficulty_augmentation': answer_cue must contain {{answer}}, got {answer_cue!r}")
        self.samples, self.answer_cue = samples, answer_cue
        self.sampler: Optional[TraceSampler] = None

    def bind(self, sampler: TraceSampler) -> None:
        self.sampler = sampler

    def __call__(self, rows: list[dict], fractions: list[float]) -> list[Optional[str]]:
        """One hint (or None: no reasoning before the answer) per row, from its best answer-conditioned trace."""
        if not rows:
            return []
        if self.sampler is None:
            raise ValueError("curriculum 'difficulty_augmentation' with hint=trace samples the policy's own traces, "
                             "and no policy is bound: train through grpokit.Trainer, or set curriculum_options.hint=method")
        drawn = self.sampler([answer_conditioned(r, self.answer_cue) for r in rows], self.samples)
        hints: list[Optional[str]] = []
        for row, fraction, candidates in zip(rows, fractions, drawn):
            best = max(range(len(candidates)), key=lambda i: candidates[i][1])  # first of the highest reward
            words = reasoning_words(candidates[best][0], row["answer"])
            hints.append(f"Hint: {trace_prefix(words, fraction)}" if words else None)
        return hints
