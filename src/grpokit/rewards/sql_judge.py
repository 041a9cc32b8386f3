"""LLM-judge term of the Text2SQL reward: an ordinal grade of the predicted query against the gold one, in [0, 1].

"Sparks of Tabular Reasoning via Text2SQL Reinforcement Learning" (Stoisser et al., arXiv
2505.00016) adds an LLM judge's ordinal score, mapped to [0, 1], to its partial rewards. Here the
judge is a local causal LM (default: the embedded SmolLM2-135M-Instruct, loaded once through
:func:`grpokit.rewards.judge.load_judge`) asked for a grade 1..K; rather than sampling and
parsing a digit, the grade is the expectation under the judge's next-token distribution
renormalised over the grade tokens:

    p_k = Σ_{t∈T_k} e^{z_t} / Σ_j Σ_{t∈T_j} e^{z_t},     score = Σ_k p_k (k − 1) / (K − 1)

``T_k`` are the first token ids of "k" and " k" after the rendered prompt (as in
:func:`~grpokit.rewards.judge.answer_token_ids`). The prompt wording, the scale K = 5 and the
soft expectation are [inferred]: the paper gives neither its judge prompt nor its scale.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch

from grpokit.rewards.builtin import REWARDS, _require
from grpokit.rewards.judge import DEFAULT_JUDGE, JudgeError, _first_new_token, _judge_text, load_judge, next_token_logits
from grpokit.rewards.sql import extract_sql

DEFAULT_SQL_TEMPLATE = (
    "{prompt}\n\nReference query:\n{a}\n\nCandidate query:\n{b}\n\n"
    "On a scale of 1 to {scale}, how well does the candidate query answer the question? "
    "{scale} means it returns the same result as the reference, 1 means it is unrelated. Answer with one digit."
)


def grade_token_ids(tokenizer: Any, rendered: str, scale: int) -> list[tuple[int, ...]]:
    """``[T_1, …, T_K]``: the token ids that start the answer "k" or " k" right after ``rendered``.

    A spelling whose first token is shared by two grades (a character tokenizer's " ") is dropped;
    JudgeError when some grade has no token of its own.
    """
    prefix = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    grades: list[list[int]] = [[] for _ in range(scale)]
    for space in ("", " "):
        ids = [_first_new_token(tokenizer, prefix, f"{rendered}{space}{k}") for k in range(1, scale + 1)]
        if None not in ids and len(set(ids)) == scale:
            for k, t in enumerate(ids):
                if t not in grades[k]:
                    grades[k].append(t)
    if not all(grades):
        raise JudgeError(
            f"judge tokenizer '{getattr(tokenizer, 'name_or_path', '?')}' has no distinct tokens for the grades "
            f"1..{scale} after the prompt; use another judge_model"
        )
    return [tuple(g) for g in grades]


def expected_grade(logits: torch.Tensor, grades: list[tuple[int, ...]]) -> torch.Tensor:
    """``[b]`` Σ_k p_k (k−1)/(K−1) in [0, 1] from next-token ``logits [b, V]`` and the grade ids ``T_1..T_K``."""
    z = logits.double()
    per_grade = torch.stack([z[:, torch.tensor(ids, device=z.device)].logsumexp(-1) for ids in grades], dim=-1)  # [b, K]
    p = per_grade.softmax(-1)
    levels = torch.arange(len(grades), dtype=torch.float64, device=logits.device) / (len(grades) - 1)  # [K]
    return p @ levels


@REWARDS.register("sql_judge")
def sql_judge(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    judge_model: str | os.PathLike[str] = DEFAULT_JUDGE,
    template: str = DEFAULT_SQL_TEMPLATE,
    scale: int = 5,
    system_prompt: str | None = None,
    batch_size: int = 8,
    device: str | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """An LLM judge's expected grade (1..``scale`` mapped to [0, 1]) of the completion's SQL against the gold SQL.

    ``template`` formats ``{prompt}`` (the task prompt: schema and question), ``{a}`` (the gold
    query, column ``answer``), ``{b}`` (the predicted query) and ``{scale}``; it is rendered
    with the judge's chat template. One forward pass per row, ``batch_size`` rows at a time
    (module docstring). 0.0 without extractable SQL (the judge is not asked); None where the
    gold SQL is None.
    """
    if isinstance(scale, bool) or not isinstance(scale, int) or not 2 <= scale <= 9:
        raise ValueError(f"reward 'sql_judge': option 'scale' must be an int in 2..9 (one digit per grade), got {scale!r}")
    answers = _require("sql_judge", "answer", answer, len(completions))
    scores: list[float | None] = [None if g is None else 0.0 for g in answers]
    asked = [(i, extract_sql(c)) for i, (c, g) in enumerate(zip(completions, answers)) if g is not None]
    asked = [(i, sql) for i, sql in asked if sql is not None]
    if not asked:
        return scores
    judge = load_judge(judge_model, device)
    filled = template.replace("{scale}", str(scale))
    texts = [_judge_text(judge.tokenizer, filled, prompts[i], str(answers[i]), sql, system_prompt) for i, sql in asked]
    grades = grade_token_ids(judge.tokenizer, _judge_text(judge.tokenizer, filled, "", "", "", system_prompt), scale)
    values = torch.cat([expected_grade(logits, grades) for logits in next_token_logits(judge, texts, batch_size)])
    for (i, _), v in zip(asked, values.tolist()):
        scores[i] = v
    return scores
