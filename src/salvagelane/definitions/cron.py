"""Cron expressions: why one is not usable, if it is not."""

from __future__ import annotations

import json
import re

# --- Cron and time zones ---------------------------------------------------------------------

_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    (
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
_CRON_PART = re.compile(
    r"^(?:(?P<star>\*)|(?P<low>[0-9]+|[a-zA-Z]{3})(?:-(?P<high>[0-9]+|[a-zA-Z]{3}))?)"
    r"(?:/(?P<step>[0-9]+))?$"
)
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is not a usable 5-field cron expression, or None.

    Fields: minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or jan-dec,
    day-of-week 0-7 or sun-sat (0 and 7 are Sunday). Each comma-separated part is
    ``*``, ``N``, ``A-B``, ``*/S`` or ``A-B/S``.
    """
    fields = expression.split()
    if len(fields) != 5:
        return (
            "expected 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)} in {json.dumps(expression)}"
        )
    expanded: list[set[int]] = []
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        values: set[int] = set()
        for part in text.split(","):
            match = _CRON_PART.match(part)
            if not match:
                return (
                    f"expected the {name} field to be *, N, A-B, */S or A-B/S (comma-separated), "
                    f"got {json.dumps(text)}"
                )
            if match["star"]:
                start, end = low, high
            else:
                try:
                    start = _cron_value(match["low"], low, names)
                    end = start if match["high"] is None else _cron_value(match["high"], low, names)
                except ValueError:
                    shown = "numbers" if not names else f"numbers or {names[0]}-{names[-1]}"
                    return f"expected {name} values as {shown}, got {json.dumps(part)}"
                for value in (start, end):
                    if not low <= value <= high:
                        return f"expected {name} values from {low} to {high}, got {value}"
                if start > end:
                    return f"expected a {name} range low-high, got {json.dumps(part)}"
            step = int(match["step"]) if match["step"] is not None else 1
            if match["step"] is not None and (match["star"] is None and match["high"] is None):
                return (
                    f"expected a step only after * or a range in the {name} field, "
                    f"got {json.dumps(part)}"
                )
            if not 1 <= step <= high - low + 1:
                return f"expected a {name} step from 1 to {high - low + 1}, got {step}"
            values.update(range(start, end + 1, step))
        expanded.append(values)
    days, months, weekdays = expanded[2], expanded[3], fields[4]
    if weekdays == "*" and not any(day <= _DAYS_IN_MONTH[m - 1] for day in days for m in months):
        return f"expected a schedule that can fire, got {json.dumps(expression)}, which never does"
    return None


def _cron_value(text: str, low: int, names: tuple[str, ...]) -> int:
    if text.isdigit():
        return int(text)
    lowered = text.lower()
    if lowered in names:
        return names.index(lowered) + low
    raise ValueError(text)
