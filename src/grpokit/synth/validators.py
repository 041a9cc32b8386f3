"""The record validator: every check a synthetic item must pass before it is written.

An item is rejected (counted, the run goes on) when any check fails; :func:`validate_record` also
re-checks records read back from disk, so a corrupted file is caught the same way. Checks
[inferred; the paper (arXiv 2509.01185) states that outputs are validated, not how]:

- ``structure``: the fields, a known paradigm and template, a well-formed verifier per turn;
- ``context``: ``metadata.context_tokens`` equals the tokenizer's length of the context (when a
  tokenizer is given); segments tile the context in order and each starts with its ``[Sk]`` tag;
- ``evidence``: every span's text equals ``context[start:end]``, lies inside a source segment, and
  its token span inside that segment's;
- ``separation`` (multi_hop): the evidence lies in >= 2 segments, consecutive spans at least
  ``metadata.min_gap_tokens`` tokens apart;
- ``conversation``: user / assistant turns alternate, the first user turn starts with the
  context, no chat special tokens or echoed rewrite instructions;
- ``turns``: every assistant turn passes its turn's verifier;
- ``preference``: the chosen response passes the verifier and the rejected one fails it.
"""

from __future__ import annotations

from typing import Any, Optional

from grpokit.synth.context import count_tokens
from grpokit.synth.paradigms import PARADIGMS
from grpokit.synth.verify import check, check_verifier

FIELDS = ("id", "paradigm", "template_id", "context", "messages", "turn_verifiers", "verifier", "response",
          "rejected", "evidence_spans", "metadata")
CHECKS = ("structure", "context", "evidence", "separation", "conversation", "turns", "preference")
_LEAKS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "Text:", "Rewrite the", "rewritten text")


def _structure(r: dict) -> list[str]:
    missing = [f for f in FIELDS if f not in r]
    if missing:
        return [f"missing fields {missing}"]
    if r["paradigm"] not in PARADIGMS or r["template_id"] not in PARADIGMS[r["paradigm"]]:
        return [f"unknown paradigm/template {r['paradigm']}/{r['template_id']}"]
    try:
        for v in [r["verifier"], *r["turn_verifiers"]]:
            check_verifier(v)
    except ValueError as exc:
        return [str(exc)]
    return []


def _context(r: dict, tokenizer: Any) -> list[str]:
    ctx, meta, problems = r["context"], r["metadata"], []
    if tokenizer is not None and count_tokens(tokenizer, ctx) != meta["context_tokens"]:
        problems.append(f"context_tokens {meta['context_tokens']} != tokenizer length {count_tokens(tokenizer, ctx)}")
    pos = 0
    for seg in meta["segment_offsets"]:
        if seg["char_start"] < pos or not ctx.startswith(f"[{seg['id']}] ", seg["char_start"]) or seg["char_end"] > len(ctx):
            problems.append(f"segment {seg['id']} offsets do not match the context")
        pos = seg["char_end"]
    return problems


def _evidence(r: dict) -> list[str]:
    segs = {s["id"]: s for s in r["metadata"]["segment_offsets"]}
    problems = []
    if not r["evidence_spans"]:
        return ["no evidence spans"]
    for span in r["evidence_spans"]:
        seg = segs.get(span["segment"])
        if r["context"][span["start"]:span["end"]] != span["text"]:
            problems.append(f"evidence span {span['start']}:{span['end']} is not verbatim in the context")
        elif seg is None or seg["role"] != "source" or not seg["char_start"] <= span["start"] < span["end"] <= seg["char_end"]:
            problems.append(f"evidence span {span['start']}:{span['end']} is not inside source segment {span['segment']}")
        elif not seg["token_start"] <= span["token_start"] < span["token_end"] <= seg["token_end"]:
            problems.append(f"evidence span {span['start']}:{span['end']} has token offsets outside its segment")
    return problems


def _separation(r: dict) -> list[str]:
    if r["paradigm"] != "multi_hop":
        return []
    spans = sorted(r["evidence_spans"], key=lambda s: s["token_start"])
    if len({s["segment"] for s in spans}) < 2:
        return ["multi-hop evidence lies in fewer than 2 segments"]
    gap = r["metadata"]["min_gap_tokens"]
    return [f"evidence {a['segment']} and {b['segment']} are {b['token_start'] - a['token_end']} < {gap} tokens apart"
            for a, b in zip(spans, spans[1:]) if b["token_start"] - a["token_end"] < gap]


def _conversation(r: dict) -> list[str]:
    msgs, problems = r["messages"], []
    roles = [m.get("role") for m in msgs]
    if roles != ["user", "assistant"] * (len(msgs) // 2) or not msgs:
        problems.append(f"turns do not alternate user/assistant: {roles}")
    elif not msgs[0]["content"].startswith(r["context"]):
        problems.append("the first user turn does not start with the context")
    elif msgs[-1]["content"] != r["response"]:
        problems.append("the last assistant turn is not the response")
    for m in msgs[1::2]:
        leak = next((x for x in _LEAKS if x in m["content"]), None)
        if leak:
            problems.append(f"an assistant turn contains {leak!r}")
    return problems


def _turns(r: dict) -> list[str]:
    answers = r["messages"][1::2]
    if len(answers) != len(r["turn_verifiers"]):
        return [f"{len(answers)} assistant turns for {len(r['turn_verifiers'])} verifiers"]
    return [f"turn {k}: {p}" for k, (m, v) in enumerate(zip(answers, r["turn_verifiers"]))
            for p in check(v, m["content"], r["context"])]


def _preference(r: dict) -> list[str]:
    problems = [f"chosen: {p}" for p in check(r["verifier"], r["response"], r["context"])]
    if not check(r["verifier"], r["rejected"], r["context"]):
        problems.append("rejected passes the verifier")
    return problems


def validate_record(record: dict, tokenizer: Optional[Any] = None) -> list[str]:
    """Every problem of ``record`` (``[]`` = valid); checks run in order and stop at the first that fails."""
    problems = _structure(record)
    if problems:
        return problems
    for name, fn in (("context", lambda r: _context(r, tokenizer)), ("evidence", _evidence), ("separation", _separation),
                     ("conversation", _conversation), ("turns", _turns), ("preference", _preference)):
        problems = fn(record)
        if problems:
            return [f"{name}: {p}" for p in problems]
    return []
