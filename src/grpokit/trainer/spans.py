"""Span masks found in the decoded completion text, mapped back to tokens.

A delimiter tokenizes differently inside a completion than on its own (SmolLM2 encodes "=" as
id 45 but writes " =" as id 446 after a space), so searching for the delimiter's standalone
token ids misses it. The span is found in the decoded text instead, and its end is mapped to
the first token whose decoded prefix covers it (a binary search over prefix decodes).
"""

from __future__ import annotations

from typing import Any

import torch


def prefix_tokens_covering(tokenizer: Any, ids: list[int], end_char: int) -> int:
    """The smallest k such that ``decode(ids[:k])`` has at least ``end_char`` characters."""
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer.decode(ids[:mid], skip_special_tokens=True)) >= end_char:
            hi = mid
        else:
            lo = mid + 1
    return lo


def span_mask_through_text(tokenizer: Any, completion_ids: torch.Tensor, completion_mask: torch.Tensor, delimiter: str) -> torch.Tensor:
    """``[B, T]`` 1 on the tokens up to and including the first ``delimiter`` in each row's decoded text (0 if absent)."""
    out = torch.zeros(completion_ids.shape, dtype=torch.long, device=completion_ids.device)
    for i in range(completion_ids.shape[0]):
        ids = completion_ids[i][completion_mask[i].bool()].tolist()
        text = tokenizer.decode(ids, skip_special_tokens=True)
        at = text.find(delimiter)
        if at >= 0 and ids:
            out[i, : prefix_tokens_covering(tokenizer, ids, at + len(delimiter))] = 1
    return out
