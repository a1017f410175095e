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


@dataclass(frozen=True, kw_only=True, slots=True)
class FieldHint:
    """One field of an item schema, for the correction editor: its ``path`` (``wsjf.score``,
    ``tags[]``), whether it is required, its type, its allowed values (JSON) and bounds."""

    path: str
    depth: int
    required: bool
    kind: str
    enum: tuple[str, ...]
    bounds: str


MAX_HINTS = 200
"""The most fields the editor lists (a larger schema is cut, saying so)."""
_HINT_DEPTH = 6


def schema_fields(schema: Mapping[str, Any]) -> list[FieldHint]:
    """The fields of an item schema as the correction editor lists them: each property
    (nested objects' and array items' too, local ``$ref`` followed), required or not,
    with its type, enum and bounds. Only a guide: the guardrails decide."""
    hints: list[FieldHint] = []

    def resolve(node: Any, depth: int) -> Any:
        while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and depth:
            ref = str(node["$ref"])
            if not ref.startswith("#/"):
                return node
            target: Any = schema
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, Mapping) else None
            node, depth = target, depth - 1
        return node

    def walk(node: Any, prefix: str, depth: int) -> None:
        node = resolve(node, _HINT_DEPTH)
        if not isinstance(node, Mapping) or depth > _HINT_DEPTH:
            return
        properties = node.get("properties")
        required = node.get("required")
        needed = {r for r in required if isinstance(r, str)} if isinstance(required, list) else ()
        if isinstance(properties, Mapping):
            for name, sub in properties.items():
                if len(hints) >= MAX_HINTS:
                    return
                path = f"{prefix}.{name}" if prefix else str(name)
                hints.append(_hint(path, depth, name in needed, resolve(sub, _HINT_DEPTH)))
                walk(sub, path, depth + 1)
        items = node.get("items")
        if isinstance(items, Mapping) and prefix:
            walk(items, f"{prefix}[]", depth + 1)

    walk(schema, "", 0)
    return hints


def _hint(path: str, depth: int, required: bool, node: Any) -> FieldHint:
    if not isinstance(node, Mapping):
        return FieldHint(
            path=one_line(path), depth=depth, required=required, kind="any", enum=(), bounds=""
        )
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    values: list[Any] = list(node["enum"]) if isinstance(node.get("enum"), list) else []
    if "const" in node:
        values = [node["const"]]
    bounds = []
    for low, high, what in (
        ("minimum", "maximum", ""),
        ("minLength", "maxLength", "length "),
        ("minItems", "maxItems", "items "),
    ):
        lo, hi = node.get(low), node.get(high)
        if lo is not None and hi is not None:
            bounds.append(f"{what}{lo} to {hi}")
        elif lo is not None:
            bounds.append(f"{what}at least {lo}")
        elif hi is not None:
            bounds.append(f"{what}at most {hi}")
    return FieldHint(
        path=one_line(path),
        depth=depth,
        required=required,
        kind=" or ".join(str(k) for k in kinds) or ("enum" if values else "any"),
        enum=tuple(one_line(json.dumps(v, ensure_ascii=False)) for v in values[:50]),
        bounds=", ".join(bounds),
    )


def describe_filter(instruction_id: str | None, reason: str | None, since: datetime | None) -> str:
    """A queue filter in words, for the bulk reject banner."""
    parts = []
    if instruction_id is not None:
        parts.append(f"instruction {one_line(instruction_id)}")
    if reason is not None:
        parts.append(f"reason {one_line(reason)}")
    if since is not None:
        parts.append(f"since {when(since)} UTC")
    return ", ".join(parts) if parts else "every pending item (no filter)"


def snippet(text: str | None, limit: int = 240) -> str:
    """A quarantined item's snippet for a pre-wrapped cell: its line breaks kept (each
    marked ``↵``), every other control character escaped, at most ``limit`` characters."""
    kept = block(text or "")
    if len(kept) > limit:
        kept = kept[: limit - 1] + "…"
    return kept.replace("\n", "↵\n")
