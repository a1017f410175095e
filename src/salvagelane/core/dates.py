"""Dates a model wrote for a ``format: date`` or ``date-time`` field, read only when
they have one reading.

``12 November 2025``, ``Nov 12, 2025``, ``2025/11/12`` and ``13/11/2025`` each name one
day; ``11/12/2025`` names the 11th of December or the 12th of November, and is refused
with a signal that says so. A date-time is read only with its time zone: without one it
names a different instant in every zone. Pure: no clock, no locale.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
            ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
            ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}  # fmt: skip
_WEEKDAY = r"(?:(?:mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)[a-z]*\.?,?\s+)?"
_ORDINAL = r"(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR = re.compile(
    _WEEKDAY + r"(\d{1,2})" + _ORDINAL + r"\.?\s+([a-z]+)\.?,?\s+(\d{4})", re.IGNORECASE
)
_MONTH_DAY_YEAR = re.compile(
    _WEEKDAY + r"([a-z]+)\.?\s+(\d{1,2})" + _ORDINAL + r",?\s+(\d{4})", re.IGNORECASE
)
_YEAR_FIRST = re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})")
_YEAR_LAST = re.compile(r"(\d{1,2})([-/.])(\d{1,2})\2(\d{4})")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?"
    r"\s*(Z|UTC|[+-]\d{2}:?\d{2})?",
    re.IGNORECASE,
)
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})", re.IGNORECASE
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Ambiguous:
    """A value that reads more than one way: what the correction signal says."""

    readings: tuple[str, ...]
    why: str


def read_date(text: str) -> str | Ambiguous | None:
    """``text`` as ``YYYY-MM-DD`` when it names one day; Ambiguous when it names
    several; None when it is no date this reads (left for the schema to refuse)."""
    text = text.strip()
    if _ISO_DATE.fullmatch(text):
        return None  # already ISO 8601: valid or not, the schema decides
    match = _DAY_MONTH_YEAR.fullmatch(text)
    if match is not None:
        return _day(int(match[3]), _MONTHS.get(match[2].lower()), int(match[1]))
    match = _MONTH_DAY_YEAR.fullmatch(text)
    if match is not None:
        return _day(int(match[3]), _MONTHS.get(match[1].lower()), int(match[2]))
    match = _YEAR_FIRST.fullmatch(text)
    if match is not None:
        return _day(int(match[1]), int(match[2]), int(match[3]))
    match = _YEAR_LAST.fullmatch(text)
    if match is None:
        return None
    first, second, year = int(match[1]), int(match[3]), int(match[4])
    day_first = _day(year, second, first)
    month_first = _day(year, first, second)
    readings = tuple(sorted({r for r in (day_first, month_first) if isinstance(r, str)}))
    if len(readings) > 1:
        return Ambiguous(
            readings=readings,
            why=f"{text} reads as {' or '.join(readings)}: day and month could be either",
        )
    return readings[0] if readings else None


def read_date_time(text: str) -> str | Ambiguous | None:
    """``text`` as an RFC 3339 date-time when it names one instant; Ambiguous without a
    time zone; None when it is no date-time this reads."""
    text = text.strip()
    if _RFC3339.fullmatch(text):
        return None
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        return None
    date, hours, minutes, seconds, fraction, zone = match.groups()
    if zone is None:
        return Ambiguous(
            readings=(),
            why=f"{text} has no time zone: it names a different instant in every zone",
        )
    try:
        dt.date.fromisoformat(date)
        dt.time(int(hours), int(minutes), int(seconds or 0))
    except ValueError:
        return None
    zone = zone.upper()
    if zone in ("Z", "UTC"):
        offset = "Z"
    else:
        digits = zone[1:].replace(":", "")
        offset = f"{zone[0]}{digits[:2]}:{digits[2:]}"
    return f"{date}T{hours}:{minutes}:{seconds or '00'}{fraction or ''}{offset}"


def _day(year: int, month: int | None, day: int) -> str | None:
    if month is None:
        return None
    try:
        return dt.date(year, month, day).isoformat()
    except ValueError:
        return None
