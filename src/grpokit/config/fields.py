"""``opt``: a documented, validated config field (shared by every section of :mod:`grpokit.config.schema`)."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def opt(default: Any, doc: str, **checks: Any) -> Any:
    """A dataclass field with a default, a one-line doc and optional checks.

    Checks understood by the validator: ``ge``/``gt``/``le``/``lt`` (numeric bounds),
    ``choices`` (allowed values), ``registry`` (name of the registry the value must be in).
    """
    meta = {"doc": doc, **checks}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)
