"""What the templates draw, computed in Python: the raw output as numbered lines with the
item's span marked, and the bars of the per-day charts. No HTML here: the templates
write it, with autoescape on, so model text is always escaped on its way out.

Model text also goes through :mod:`salvagelane.safe_text` first: control characters and
bidirectional overrides show as visible escapes in the page, as at the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from salvagelane.core.records import Reason
from salvagelane.safe_text import block, one_line

REASON_ORDER = tuple(reason.value for reason in Reason)
"""The guardrails' reasons in their order (the chart's stacking order)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Segment:
    text: str
    marked: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class RawLine:
    number: int
    segments: tuple[Segment, ...]
    marked: bool


def raw_lines(before: str, span: str, after: str, *, first_line: int = 1) -> list[RawLine]:
    """``before + span + after`` as numbered lines, the span's characters marked; each
    piece made safe by :func:`~salvagelane.safe_text.block` (newlines kept)."""
    lines: list[RawLine] = []
    current: list[Segment] = []
    for text, marked in ((before, False), (span, True), (after, False)):
        pieces = block(text).split("\n")
        for position, piece in enumerate(pieces):
            if position > 0:
                lines.append(_line(first_line + len(lines), current))
                current = []
            if piece:
                current.append(Segment(text=piece, marked=marked))
    lines.append(_line(first_line + len(lines), current))
    return lines


def _line(number: int, segments: list[Segment]) -> RawLine:
    return RawLine(number=number, segments=tuple(segments), marked=any(s.marked for s in segments))


def pretty(value: Any) -> str:
    """A JSON value for a ``<pre>``: indented, made safe."""
    return block(json.dumps(value, indent=2, ensure_ascii=False))


def message_of(error: Any) -> str:
    if isinstance(error, Mapping) and error.get("message"):
        return one_line(str(error["message"]))
    return one_line(json.dumps(error, ensure_ascii=False))


@dataclass(frozen=True, kw_only=True, slots=True)
class Bar:
    """One rectangle of a chart, in the chart's own units (x, y from the top left)."""

    x: float
    y: float
    width: float
    height: float
    key: str
    label: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Chart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    days: tuple[str, ...]
    keys: tuple[str, ...]
    peak: int
    empty: bool


CHART_HEIGHT = 120
BAR_WIDTH = 14
GAP = 4


def stacked(days: Sequence[str], counts: Mapping[str, Mapping[str, int]]) -> Chart:
    """A stacked bar per day of ``days`` (oldest first), one colour per key (a reason,
    or prompt/completion), scaled to the tallest day."""
    order = {reason: n for n, reason in enumerate(REASON_ORDER)}
    keys = sorted(
        {key for day in days for key in counts.get(day, {})}, key=lambda k: (order.get(k, 99), k)
    )
    totals = [sum(counts.get(day, {}).values()) for day in days]
    peak = max(totals, default=0)
    bars = []
    for position, day in enumerate(days):
        y = float(CHART_HEIGHT)
        for key in keys:
            count = counts.get(day, {}).get(key, 0)
            if not count:
                continue
            height = CHART_HEIGHT * count / peak
            y -= height
            bars.append(
                Bar(
                    x=position * (BAR_WIDTH + GAP),
                    y=round(y, 2),
                    width=BAR_WIDTH,
                    height=round(height, 2),
                    key=key,
                    label=f"{day}: {key} {count}",
                )
            )
    return Chart(
        width=max(1, len(days) * (BAR_WIDTH + GAP)),
        height=CHART_HEIGHT,
        bars=tuple(bars),
        days=tuple(days),
        keys=tuple(keys),
        peak=peak,
        empty=peak == 0,
    )


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else "-"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"
