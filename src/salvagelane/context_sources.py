"""Callables an instruction definition can name as a context source (``module:function``).

A context callable takes keyword arguments (the definition's ``args``) and
returns JSON-compatible data, which becomes a template variable.

Time-dependent sources read the run's reference time, not the wall clock: the fire
time of a scheduled run (a catch-up at 07:10 for the 05:20 fire still reports on the
05:20 day), the start of a manual run. The executor sets it around context resolution.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

_REFERENCE_TIME: ContextVar[datetime | None] = ContextVar("reference_time", default=None)


@contextmanager
def reference_time(moment: datetime) -> Iterator[None]:
    """Within the block, time-dependent sources report on ``moment`` (timezone-aware)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"naive datetime {moment.isoformat()}: pass a timezone-aware one")
    token = _REFERENCE_TIME.set(moment)
    try:
        yield
    finally:
        _REFERENCE_TIME.reset(token)


def now() -> datetime:
    """The run's reference time (see the module docstring); the wall clock outside a run."""
    return _REFERENCE_TIME.get() or datetime.now(UTC)


def today(timezone: str = "UTC") -> str:
    """The reference time's date in ``timezone``, as ISO 8601 (``2026-11-21``)."""
    return now().astimezone(ZoneInfo(timezone)).date().isoformat()
