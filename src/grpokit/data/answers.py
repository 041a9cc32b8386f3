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
# The markers of a stated answer: also "equals" / "equal to" ("6 * 4 equals 24").
_STATED_MARKERS = r"=|\bis\b|\bequals?\b(?:\s+to\b)?"
_STATED_MARKER = re.compile(_STATED_MARKERS, re.IGNORECASE)
_AFTER_STATED_MARKER = re.compile(
    r"(?:" + _STATED_MARKERS + r")[\s$*:]*(?P<num>-?\s*" + _NUMBER + r")", re.IGNORECASE
)
# A completion that is nothing but a number ("24", "24.", "**24**", '"24"').
_BARE_NUMBER = re.compile(r"[\s\"'*$]*(?P<num>-?" + _NUMBER + r")[\s\"'*$.]*")
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
    stated = _number_after_marker(text, _MARKER, _AFTER_MARKER)
    if stated is not None:
        return stated
    numbers = _ANY_NUMBER.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def extract_stated_number(text: str) -> str | None:
    """The number ``text`` states as its answer, else None: never a number merely mentioned.

    Stated: the whole text is one number ("24", "24.", "**24**"), or a number right after the
    first "=", "is", "equals" or "equal to" that does not start an expression (as in
    :func:`extract_answer_number`). Unlike that function there is no last-number fallback, so
    "2 + 5 is a classic example" or a completion cut off at "2 + 5 =" has no answer (not "5").
    Meant for label-free votes (``majority_vote``): there the fallback turns a completion that
    answers nothing into a vote for the restated operand, the same wrong answer in every such
    completion (TTRL's own code likewise counts only a ``\\boxed{}`` answer as a vote).
    Returns the normalised number.
    """
    bare = _BARE_NUMBER.fullmatch(text)
    if bare is not None:
        return normalize_number(bare.group("num"))
    return _number_after_marker(text, _STATED_MARKER, _AFTER_STATED_MARKER)


def _number_after_marker(text: str, marker: re.Pattern, after: re.Pattern) -> str | None:
    """The normalised number after the first ``marker`` whose number does not start an expression."""
    for found in marker.finditer(text):
        match = after.match(text, found.start())
        if match is None or _CONTINUES_EXPRESSION.match(text, match.end("num")):
            continue
        return normalize_number(match.group("num"))
    return None


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
