"""``synth_verify``: score any response with the checker stored in a synthetic item's ``verifier`` column.

The verifiable items of ``grpokit synth`` ("Modular Techniques for Synthetic Long-Context Data
Generation in Language Model Training and Evaluation", arXiv 2509.01185) carry their checker
(:mod:`grpokit.synth.verify`: answer, contains, grounded, fields or constraints), so a GRPO run on
the generated ``grpo.jsonl`` needs no reference response and no judge.
"""

from __future__ import annotations

from typing import Any, Sequence

from grpokit.rewards.builtin import REWARDS, _require
from grpokit.synth.verify import check_verifier, score


def _prompt_text(prompt: Any) -> str:
    """The text a grounded verifier searches for its evidence quote: a string prompt, or its messages' contents."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(m.get("content", "")) for m in prompt)


@REWARDS.register("synth_verify")
def synth_verify(
    prompts: list, completions: list[str], verifier: Sequence | None = None, partial: bool = False, **kwargs: Any
) -> list[float | None]:
    """1.0 if the completion passes its row's ``verifier`` (a ``grpokit synth`` item), else 0.0; None without one.

    ``partial=True``: constraints and fields score the fraction met (IFEval's loose, per-instruction
    view) instead of all-or-nothing (its strict, per-prompt accuracy). A malformed verifier is a
    one-line ValueError naming the sample.
    """
    verifiers = _require("synth_verify", "verifier", verifier, len(completions))
    out: list[float | None] = []
    for i, (prompt, completion, v) in enumerate(zip(prompts, completions, verifiers)):
        if v is None:
            out.append(None)
            continue
        try:
            check_verifier(v)
        except ValueError as exc:
            raise ValueError(f"reward 'synth_verify', sample {i}: {exc}") from None
        out.append(score(v, completion, _prompt_text(prompt), partial=partial))
    return out
