"""Reports whose items carry sub-items with the items' own keys, and quote damage to them.

The generator behind issue 15's property: a damaged item's nested object that
shares the items' signature must never be accepted as an item. Every edit here
flips the string state of the text after it (a quote dropped, added, escaped or
unescaped), which is the damage that lets a scanner resynchronise on a nested
object.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

KEYS = ("rank", "id", "severity", "title")
"""Every item and every sub-item opens with these keys, in this order."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_ESCAPED_QUOTE = re.compile(r'\\"')

FLIPS = (
    "drop_closing_quote",
    "drop_opening_quote",
    "insert_quote",
    "drop_escape_before_quote",
    "escape_closing_quote",
)

LAYOUTS = ("compact", "spaced", "one_per_line", "pretty")

titles = st.sampled_from(
    ["t", 'say "hi"', "a [b] {c}", "x}", "]{", 'q"x', "", '{"rank": 9}', "w, v"]
)
severities = st.sampled_from(["low", "high", "critical"])


def _entry(rank: int, ident: str, severity: str, title: str) -> dict[str, Any]:
    return {"rank": rank, "id": ident, "severity": severity, "title": title}


@st.composite
def sub_items(draw: st.DrawFn, depth: int) -> dict[str, Any]:
    entry = _entry(
        draw(st.integers(min_value=0, max_value=99)),
        draw(st.sampled_from(["S-1", "S-2", "S-3"])),
        draw(severities),
        draw(titles),
    )
    if depth > 0 and draw(st.booleans()):
        entry["related"] = draw(st.lists(sub_items(depth - 1), min_size=1, max_size=2))
    if draw(st.booleans()):
        entry["note"] = draw(titles)
    return entry


@st.composite
def item_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(min_value=2, max_value=5))
    items = []
    for index in range(count):
        entry = _entry(index + 1, f"A-{index + 1}", draw(severities), draw(titles))
        nested = draw(st.sampled_from(["none", "list", "object", "list"]))
        if nested == "list":
            entry["related"] = draw(st.lists(sub_items(1), min_size=1, max_size=3))
        elif nested == "object":
            entry["parent"] = draw(sub_items(1))
        if draw(st.booleans()):
            entry["tags"] = draw(st.lists(st.sampled_from(["x", "]", "{"]), max_size=2))
        items.append(entry)
    return items


@dataclass(frozen=True)
class NestedReport:
    text: str
    items: tuple[dict[str, Any], ...]
    spans: tuple[tuple[int, int], ...]  # each item's [start, end) in text
    items_path: tuple[str, ...]


def render(items: list[dict[str, Any]], *, layout: str, shape: str) -> NestedReport:
    """Render with each item's span recorded; ``shape`` is "flat" or "bare"."""
    if layout == "pretty":
        dumped = [json.dumps(item, indent=2).replace("\n", "\n    ") for item in items]
        body, sep, head, tail = dumped, ",\n    ", "[\n    ", "\n  ]"
    elif layout == "compact":
        body = [json.dumps(item, separators=(",", ":")) for item in items]
        sep, head, tail = ",", "[", "]"
    else:
        body = [json.dumps(item) for item in items]
        sep, head, tail = (",\n ", "[\n ", "]") if layout == "one_per_line" else (", ", "[", "]")
    if shape == "bare":
        prefix, suffix, path = head, tail, ()
    else:
        prefix = '{"summary": "s", "findings": ' + head
        suffix = tail + ', "count": ' + str(len(items)) + "}"
        path = ("findings",)
    spans = []
    pos = len(prefix)
    for index, chunk in enumerate(body):
        spans.append((pos, pos + len(chunk)))
        pos += len(chunk) + (len(sep) if index < len(body) - 1 else 0)
    text = prefix + sep.join(body) + suffix
    return NestedReport(text=text, items=tuple(items), spans=tuple(spans), items_path=path)


def flip_sites(text: str, start: int, end: int, flip: str) -> list[int]:
    """Offsets inside ``text[start:end]`` where ``flip`` can be applied."""
    if flip == "drop_escape_before_quote":
        return [m.start() for m in _ESCAPED_QUOTE.finditer(text, start, end)]
    strings = list(_STRING.finditer(text, start, end))
    if flip == "drop_opening_quote":
        return [m.start() for m in strings]
    if flip in ("drop_closing_quote", "escape_closing_quote"):
        return [m.end() - 1 for m in strings]
    # insert_quote: strictly inside a string's content
    return [pos for m in strings for pos in range(m.start() + 1, m.end() - 1)]


def apply_flip(text: str, at: int, flip: str) -> str:
    if flip in ("drop_closing_quote", "drop_opening_quote", "drop_escape_before_quote"):
        return text[:at] + text[at + 1 :]
    if flip == "escape_closing_quote":
        return text[:at] + "\\" + text[at:]
    return text[:at] + '"' + text[at:]


@st.composite
def damaged_reports(
    draw: st.DrawFn, *, max_damaged: int = 1
) -> tuple[NestedReport, str, list[int]]:
    """A report, its text after one flipping edit in each of up to ``max_damaged`` items,
    and the indexes of the damaged items."""
    report = render(
        draw(item_lists()),
        layout=draw(st.sampled_from(LAYOUTS)),
        shape=draw(st.sampled_from(["flat", "bare"])),
    )
    count = draw(st.integers(min_value=1, max_value=max_damaged))
    chosen = sorted(
        draw(st.sets(st.integers(0, len(report.items) - 1), min_size=1, max_size=count)),
        reverse=True,  # edits from the end keep earlier offsets valid
    )
    text = report.text
    damaged = []
    for index in chosen:
        start, end = report.spans[index]
        flip = draw(st.sampled_from(FLIPS))
        sites = flip_sites(text, start, end, flip)
        if not sites:
            continue
        text = apply_flip(text, draw(st.sampled_from(sites)), flip)
        damaged.append(index)
    return report, text, damaged
