"""The four paradigms of arXiv 2509.01185 and their templates: ``PARADIGMS[paradigm][template_id] -> Template``."""

from __future__ import annotations

from grpokit.synth.paradigms import dialogue, grounded, multi_hop, verifiable
from grpokit.synth.paradigms.base import ParseError, Plan, Turn

PARADIGMS = {
    "dialogue": dialogue.TEMPLATES,
    "grounded": grounded.TEMPLATES,
    "verifiable": verifiable.TEMPLATES,
    "multi_hop": multi_hop.TEMPLATES,
}


def resolve(paradigm: str, templates: list[str] | None) -> list[str]:
    """The template ids of ``paradigm`` to cycle through (all by default); a one-line ValueError for unknown names."""
    if paradigm not in PARADIGMS:
        raise ValueError(f"unknown paradigm '{paradigm}'; choose one of: {', '.join(PARADIGMS)}")
    names = templates or list(PARADIGMS[paradigm])
    unknown = [t for t in names if t not in PARADIGMS[paradigm]]
    if unknown:
        raise ValueError(f"unknown template {unknown[0]!r} of paradigm '{paradigm}'; choose from: {', '.join(PARADIGMS[paradigm])}")
    return list(names)


__all__ = ["PARADIGMS", "ParseError", "Plan", "Turn", "resolve"]
