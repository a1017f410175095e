"""Cron expressions: why one is not usable, if it is not, and their fields when it is."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# --- Cron and time zones ---------------------------------------------------------------------

_FieldSpec = tuple[str, int, int, tuple[str, ...]]

# An optional leading seconds field, as in Quartz, Spring and APScheduler: "* * * * * *"
# fires every second, which sub-minute jobs and the scheduler's own tests need.
_SECOND_FIELD: _FieldSpec = ("second", 0, 59, ())
_CRON_FIELDS: tuple[_FieldSpec, ...] = (
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


@dataclass(frozen=True, kw_only=True, slots=True)
class CronFields:
    """The six fields of a usable cron expression, as written; ``second`` is ``"0"`` when the
    expression has the usual five fields."""

    second: str
    minute: str
    hour: str
    day_of_month: str
    month: str
    day_of_week: str


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is not a usable cron expression, or None.

    Five fields: minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or jan-dec,
    day-of-week 0-7 or sun-sat (0 and 7 are Sunday); or six, with second 0-59 first.
    Each comma-separated part is ``*``, ``N``, ``A-B``, ``*/S`` or ``A-B/S``.
    """
    fields = expression.split()
    if len(fields) not in (5, 6):
        return (
            "expected 5 fields (minute hour day-of-month month day-of-week) "
            f"or 6 with seconds first, got {len(fields)} in {json.dumps(expression)}"
        )
    specs = (_SECOND_FIELD, *_CRON_FIELDS) if len(fields) == 6 else _CRON_FIELDS
    expanded: list[set[int]] = []
    for text, spec in zip(fields, specs, strict=True):
        values = _field_values(text, spec)
        if isinstance(values, str):
            return values
        expanded.append(values)
    days, months, weekdays = expanded[-3], expanded[-2], fields[-1]
    if weekdays == "*" and not any(day <= _DAYS_IN_MONTH[m - 1] for day in days for m in months):
        return f"expected a schedule that can fire, got {json.dumps(expression)}, which never does"
    return None


def cron_fields(expression: str) -> CronFields:
    """The fields of a usable cron expression; ValueError (with :func:`cron_problem`'s
    message) when it is not usable."""
    problem = cron_problem(expression)
    if problem is not None:
        raise ValueError(problem)
    fields = expression.split()
    if len(fields) == 5:
        fields.insert(0, "0")
    second, minute, hour, day_of_month, month, day_of_week = fields
    return CronFields(
        second=second,
        minute=minute,
        hour=hour,
        day_of_month=day_of_month,
        month=month,
        day_of_week=day_of_week,
    )


def weekday_numbers(text: str) -> frozenset[int]:
    """The days a usable day-of-week field names, as crontab numbers 0 (Sunday) to 6
    (Saturday); 7 is folded into 0."""
    values = _field_values(text, _CRON_FIELDS[4])
    if isinstance(values, str):
        raise ValueError(values)
    return frozenset(value % 7 for value in values)


def month_numbers(text: str) -> frozenset[int]:
    """The months 1-12 a usable month field names (numbers or jan-dec)."""
    values = _field_values(text, _CRON_FIELDS[3])
    if isinstance(values, str):
        raise ValueError(values)
    return frozenset(values)


def _field_values(text: str, spec: _FieldSpec) -> set[int] | str:
    """The values one field names, or why it names none (a message)."""
    name, low, high, names = spec
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
    return values


def _cron_value(text: str, low: int, names: tuple[str, ...]) -> int:
    if text.isdigit():
        return int(text)
    lowered = text.lower()
    if lowered in names:
        return names.index(lowered) + low
    raise ValueError(text)
