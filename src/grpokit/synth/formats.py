"""Objective adapters: one synthetic record as the row each training stage reads.

Every row's prompt is the conversation before the last assistant turn (TRL's conversational
format: a list of ``{role, content}`` messages; the context is in the first user message), so one
file may mix paradigms and single- and multi-turn items.

| file       | columns                                                    | read by                                   |
|------------|------------------------------------------------------------|-------------------------------------------|
| sft.jsonl  | prompt, completion, messages, answer, verifier, metadata   | ``stage: sft`` (prompt-completion)        |
| dpo.jsonl  | prompt, chosen, rejected, answer, verifier, metadata       | ``stage: dpo`` (preference)               |
| grpo.jsonl | prompt, answer, verifier, metadata                         | GRPO ``data.path``; reward ``synth_verify`` |

``answer`` is the gold answer of ``answer`` / ``grounded`` / ``contains`` verifiers and, for
``fields`` / ``constraints`` (which have no single answer), the chosen response, a reference that
passes; the data loaders require an answer column and held-out accuracy needs one. ``messages``
is the whole conversation (TRL's conversational language-modeling format).
"""

from __future__ import annotations

FORMATS = ("sft", "dpo", "grpo")


def _common(record: dict) -> dict:
    verifier = record["verifier"]
    return {"prompt": record["messages"][:-1], "answer": str(verifier.get("answer", record["response"])),
            "verifier": verifier, "metadata": record["metadata"]}


def sft_row(record: dict) -> dict:
    base = _common(record)
    return {"prompt": base["prompt"], "completion": record["response"], "messages": record["messages"],
            **{k: base[k] for k in ("answer", "verifier", "metadata")}}


def dpo_row(record: dict) -> dict:
    base = _common(record)
    return {"prompt": base["prompt"], "chosen": record["response"], "rejected": record["rejected"],
            **{k: base[k] for k in ("answer", "verifier", "metadata")}}


def grpo_row(record: dict) -> dict:
    return _common(record)


ADAPTERS = {"sft": sft_row, "dpo": dpo_row, "grpo": grpo_row}
