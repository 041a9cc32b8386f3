"""Pull a final numeric answer out of free-form model text, and compare numbers."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# A number: optional thousands groups ("1,234"), optional decimal part.
_NUMBER = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
# A number right after "=" or the word "is", allowing whitespace, ":", "$", "**", a minus sign.
_AFTER_MARKER = re.compile(
    r"(?:=|\bis\b)[\s$*:]*(?P<num>-?\s*" + _NUMBER + r")", re.IGNORECASE
)
_MARKER = re.compile(r"=|\bis\b", re.IGNORECASE)
# A number in running text; a minus counts only when not glued to a preceding digit ("5-3").
_ANY_NUMBER = re.compile(r"(?:(?<![\d)])-)?" + _NUMBER)
# After a candidate, an operator followed by an operand means it started an expression.
_CONTINUES_EXPRESSION = re.compile(r"\s*[-+*/×^]\s*[\d(]")
_TOLERANCE = Decimal("1e-6")


def normalize_number(text: str) -> str:
    """Canonical string of a number: drop "," separators and spaces, trailing zeros of decimals.

    "1,234" -> "1234", "82.0" -> "82", "-0" -> "0", "2.50" -> "2.5".
    """
    s = text.replace(",", "").replace(" ", "")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    if s in ("-0", ""):
        s = "0"
    return s


def extract_answer_number(text: str) -> str | None:
    """Final numeric answer in ``text``: the number after the first "=" or "is", else the last.

    Models often restate the question ("37 + 45 = 82"), so the value right after the first
    "=" or the word "is" (case-insensitive; whitespace, "$", "**" and a leading minus
    allowed) wins. A number that merely starts an expression ("is 37 + 45 ...") is skipped in
    favour of the next marker. With no such marker, the last number in the text is used.
    Returns the normalised number ("1,234" -> "1234", "82.0" -> "82"), or None if none.
    """
    for marker in _MARKER.finditer(text):
        match = _AFTER_MARKER.match(text, marker.start())
        if match is None:
            continue
        end = match.end("num")
        if _CONTINUES_EXPRESSION.match(text, end):
            continue
        return normalize_number(match.group("num"))
    numbers = _ANY_NUMBER.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def _to_decimal(text: str) -> Decimal | None:
    """Parse ``text`` as a finite decimal number (commas, "$" and spaces ignored), else None."""
    s = str(text).strip().replace(",", "").replace("$", "").replace(" ", "")
    try:
        value = Decimal(s)
    except (InvalidOperation, ValueError):
        return None
    return value if value.is_finite() else None


def numbers_equal(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` parse as numbers within 1e-6 of each other (False if either fails).

    Uses ``Decimal`` so large integers compare exactly rather than through float rounding.
    """
    x, y = _to_decimal(a), _to_decimal(b)
    if x is None or y is None:
        return False
    return abs(x - y) <= _TOLERANCE
