"""Framings: where in the output a model put its report's items.

The report document (one object holding the items array at the items path) is the
scanner's own framing. Models also send the items as top-level values one after the
other: JSON Lines (an envelope object, then one item object per line), pretty-printed
objects back to back, a fenced block per item or per part of the list, or a bare array
when the definition asked for an envelope. ``scan_values`` reads those: it splits the
output into its top-level values and hands each one to the scanner on its own, so one
broken line costs that line (docs/adr/0002-item-scanner.md, "Framings").

Which object is the envelope is decided from the definition, never from position: an
object whose members the envelope schema names more of than the item schema does. Pure:
no I/O, never raises on any ``str``.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from salvagelane.core import lexis
from salvagelane.core.records import Span
from salvagelane.core.scan_values import (
    Anomaly,
    AnomalyKind,
    Candidate,
    Closure,
    EnvelopeField,
    ItemsPath,
    ScanResult,
    new_candidate,
)
from salvagelane.core.scanner import bracket_extent, scan_leniently, scan_strict
from salvagelane.core.strict import is_strict_document
from salvagelane.core.strict_scan import scan_wrapped


class Framing(enum.StrEnum):
    """How a definition or ``salvage --framing`` expects the items to be framed."""

    AUTO = "auto"  # the report document, else top-level values (the default)
    DOCUMENT = "document"  # one report document; nothing else is tried
    LINES = "lines"  # top-level values: JSON Lines, back-to-back objects, fenced blocks


class Found(enum.StrEnum):
    """The framing a salvage found, as its result records it."""

    DOCUMENT = "document"  # the items array at the items path of one report object
    ARRAY = "array"  # a bare array of items where the definition names an items path
    LINES = "lines"  # several top-level values: envelope and item objects, parts of a list


# A top-level value: an object that opens with a member (a quoted, single-quoted or bare
# key) or closes at once, or an array of objects. Braces in prose are not values.
_VALUE = re.compile(r"\{[ \t\n\r]*+(?:[\"'}]|[A-Za-z_$][A-Za-z0-9_$]*+[ \t]*+:)|\[[ \t\n\r]*+[{\]]")
# The same at the start of a line: where, in JSON Lines or back-to-back output, the next
# value begins even when the one before it never closed.
_LINE_VALUE = re.compile(
    r"^([ \t]*+)(?:\{[ \t]*+(?:[\"'}]|[A-Za-z_$][A-Za-z0-9_$]*+[ \t]*+:)|\[[ \t]*+[{\]])",
    re.MULTILINE,
)

_FIRST_MEMBER = re.compile(r'\{[ \t\n\r]*+"([^"\\\n]*+)"[ \t\n\r]*+:')
# The boundary of two objects written back to back on one line.
_PACKED = re.compile(r"\}[ \t]*+(?=\{[ \t]*+\")")
# A member name outside any value: what is left of an object that lost its `{`.
_MEMBER = re.compile(r'"(?:[^"\\\n]|\\.)*+"[ \t]*+:')
_CUT_BY_NEXT = "the next top-level value began before this one closed"


@dataclass(frozen=True, kw_only=True, slots=True)
class ValuesScan:
    """The output read as top-level values: a scan result the salvage goes on with."""

    scan: ScanResult
    found: Found
    has_envelope: bool  # an envelope object or a report document was among the values


@dataclass(frozen=True, kw_only=True, slots=True)
class Keys:
    """Top-level member names each schema declares, to tell the envelope from an item."""

    envelope: frozenset[str]
    item: frozenset[str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Framed:
    """The scan a salvage goes on with, and the framing it found."""

    scan: ScanResult
    found: Found
    strict: bool  # the strict pass proved the report (``report``) one valid document
    no_envelope: bool  # an items path was named, and no value was an envelope or report
    report: Span | None = None  # with ``strict``: where the report is, when wrapped


_NO_KEYS = Keys(envelope=frozenset(), item=frozenset())


def scan_framed(
    text: str, items_path: ItemsPath, *, framing: Framing = Framing.AUTO, keys: Keys | None = None
) -> Framed:
    """Scan ``text`` in the framing asked for: ``auto`` reads the report document, and the
    output as top-level values when the document scan finds no items array, or finds the
    items going on in further fenced blocks. Never raises."""
    if framing is not Framing.LINES:
        strict = scan_strict(text, items_path)
        if strict is not None:
            return Framed(scan=strict, found=Found.DOCUMENT, strict=True, no_envelope=False)
        # The most common shape of all: a valid report in a code fence or after a line
        # of prose, read by the strict pass too.
        wrapped = scan_wrapped(text, items_path)
        if wrapped is not None:
            return Framed(
                scan=wrapped[0],
                found=Found.DOCUMENT,
                strict=True,
                no_envelope=False,
                report=wrapped[1],
            )
    if framing is Framing.AUTO and _items_key_absent(text, items_path):
        # No document holds the items here: the values reading comes first, and the
        # document scan (member by member, the slow part on many small objects) runs
        # only if that finds no values, for the envelope of a report cut before its items.
        values = scan_values(text, items_path, keys if keys is not None else _NO_KEYS)
        if values is not None and values.found is not Found.DOCUMENT:
            return Framed(
                scan=values.scan,
                found=values.found,
                strict=False,
                no_envelope=not values.has_envelope,
            )
    scanned = scan_leniently(text, items_path)
    if framing is Framing.DOCUMENT or (
        framing is Framing.AUTO and scanned.items_found and not _parts_in_blocks(text, scanned)
    ):
        return Framed(scan=scanned, found=Found.DOCUMENT, strict=False, no_envelope=False)
    values = scan_values(text, items_path, keys if keys is not None else _NO_KEYS)
    if values is None or values.found is Found.DOCUMENT:
        return Framed(scan=scanned, found=Found.DOCUMENT, strict=False, no_envelope=False)
    return Framed(
        scan=values.scan,
        found=values.found,
        strict=False,
        no_envelope=bool(items_path) and not values.has_envelope,
    )


def _items_key_absent(text: str, items_path: ItemsPath) -> bool:
    """Whether the items key is written nowhere in ``text`` (nor could be, escaped), so
    that the document scan can find no items array."""
    if not items_path or "\\u" in text:
        return False
    return json.dumps(items_path[0], ensure_ascii=False) not in text


def _parts_in_blocks(text: str, scanned: ScanResult) -> bool:
    """The report's items go on in further fenced blocks: more than one code fence, and
    an object outside the report the document scan could only hold as stray text."""
    root = scanned.root
    if root is None or text.count("```") < 3:
        return False
    return any(
        c.stray and (c.span.start >= root.end or c.span.end <= root.start)
        for c in scanned.candidates
    )


def schema_keys(
    envelope_schema: Mapping[str, Any] | None,
    item_schema: Mapping[str, Any] | None,
    items_path: ItemsPath,
) -> Keys:
    """The envelope's member names (the items key excluded) and the item's."""
    envelope = _properties(envelope_schema)
    if items_path:
        envelope.discard(items_path[0])
    return Keys(envelope=frozenset(envelope), item=frozenset(_properties(item_schema)))


def _properties(schema: Mapping[str, Any] | None) -> set[str]:
    if not isinstance(schema, Mapping):
        return set()
    properties = schema.get("properties")
    names = set(properties) if isinstance(properties, Mapping) else set()
    required = schema.get("required")
    if isinstance(required, list):
        names.update(name for name in required if isinstance(name, str))
    return names


def envelope_without_items(schema: Mapping[str, Any], items_path: ItemsPath) -> dict[str, Any]:
    """``schema`` with the items property (and its requirement) taken out, along the
    items path, so that the envelope is checked on its own."""
    copy = dict(schema)
    if not items_path:
        return copy
    key, rest = items_path[0], items_path[1:]
    properties = copy.get("properties")
    if isinstance(properties, Mapping) and key in properties:
        properties = dict(properties)
        if rest and isinstance(properties[key], Mapping):
            properties[key] = envelope_without_items(properties[key], rest)
        else:
            del properties[key]
        copy["properties"] = properties
    required = copy.get("required")
    if not rest and isinstance(required, list) and key in required:
        copy["required"] = [name for name in required if name != key]
    return copy


def scan_values(text: str, items_path: ItemsPath, keys: Keys) -> ValuesScan | None:
    """The output as top-level values, or None when it holds none.

    Each value is scanned on its own: an array's elements are item candidates; an object
    holding the items path is a report document (its items and members are taken); any
    other object is the envelope when its members are the envelope schema's, else an item.
    A value that never closes ends where the next one begins on a line of its own
    (``broken``) or at the end of the text (``truncated``).
    """
    n = len(text)
    line_starts = [
        (m.start() + len(m.group(1)), len(m.group(1))) for m in _LINE_VALUE.finditer(text)
    ]
    next_line = 0
    base_indent: int | None = None
    candidates: list[Candidate] = []
    fields: list[EnvelopeField] = []
    anomalies: list[Anomaly] = []
    kinds: list[str] = []
    names: frozenset[str] = frozenset()  # the last object's member names
    has_envelope = False
    truncated = False
    steps = 0
    first_start = last_end = -1
    pos = 0
    while True:
        match = _VALUE.search(text, pos)
        if match is None:
            break
        start = match.start()
        if base_indent is None:  # the first value's: looked up once, the scan stays linear
            indent = _line_indent(text, start)
            base_indent = 0 if indent is None else indent
        while next_line < len(line_starts) and (
            line_starts[next_line][0] <= start or line_starts[next_line][1] > base_indent
        ):
            next_line += 1
        bound = line_starts[next_line][0] if next_line < len(line_starts) else n
        end, closure, depth, defect = _extent(text, start, bound)
        if closure is Closure.TRUNCATED and bound < n:
            closure, defect = Closure.BROKEN, _CUT_BY_NEXT
            end = lexis.last_non_ws(text, bound) + 1 if bound > start else bound
            end = max(end, start + 1)
        elif closure is Closure.TRUNCATED:
            truncated = True
        _note_gap(text, max(last_end, 0), start, anomalies, candidates, first=last_end < 0)
        if first_start < 0:
            first_start = start
        last_end = end
        steps += end - start + 1
        span = Span(start=start, end=end)
        value = text[start:end]
        if text[start] == "[":
            # A valid array (a bare array of items, most often) in the one compiled pass
            # that proves it strict, with spans in place; the lenient scan otherwise.
            strict = scan_strict(value, (), offset=start) if closure is Closure.CLOSED else None
            if strict is not None:
                candidates.extend(strict.candidates)
                kinds.append("array")
                pos = max(end, start + 1)
                continue
            inner = scan_leniently(value, ())
            candidates.extend(_shifted_candidate(c, start) for c in inner.candidates)
            anomalies.extend(_shifted_anomaly(a, start) for a in inner.anomalies)
            truncated = truncated or (inner.truncated and end >= n)
            kinds.append("array")
        elif items_path and _plain_item(plain := _keys_of(value), items_path[0], keys):
            # An intact object that is no report and no envelope (most lines): an item,
            # without scanning it a second time.
            candidates.append(_candidate(span, closure, depth, defect))
            kinds.append("item")
            names = plain
        elif items_path:
            inner = scan_leniently(value, items_path)
            if inner.items_found:
                candidates.extend(_shifted_candidate(c, start) for c in inner.candidates)
                fields.extend(_shifted_field(f, start) for f in inner.envelope)
                anomalies.extend(_shifted_anomaly(a, start) for a in inner.anomalies)
                truncated = truncated or (inner.truncated and end >= n)
                has_envelope = True
                kinds.append("document")
            else:
                names = frozenset(f.path[0] for f in inner.envelope if f.path)
                if _is_envelope(names, keys):
                    fields.extend(_shifted_field(f, start) for f in inner.envelope)
                    has_envelope = True
                    kinds.append("envelope")
                else:
                    candidates.append(_candidate(span, closure, depth, defect))
                    kinds.append("item")
        else:
            candidates.append(_candidate(span, closure, depth, defect))
            kinds.append("item")
        pos = max(end, start + 1)
    _note_gap(text, max(last_end, 0), n, anomalies, candidates, first=last_end < 0)
    if first_start < 0 and candidates:
        # No value at all, yet an item's remains (a member name): held, never dropped.
        first_start, last_end = candidates[0].span.start, candidates[0].span.end
        kinds.append("remains")
    # One value alone, with no remains of another around it, may be a report document.
    alone = len(kinds) == 1 and not any(c.stray for c in candidates)
    if first_start < 0 or (
        alone and not _framed_alone(kinds[0], names, text[first_start:last_end], keys)
    ):
        return None
    candidates.sort(key=lambda c: c.span.start)
    numbered = tuple(
        new_candidate(i, c.span, c.closure, c.depth, c.defect, c.stray)
        for i, c in enumerate(candidates)
    )
    root = Span(start=first_start, end=last_end)
    found = Found.LINES
    if kinds == ["document"] or (kinds == ["array"] and not items_path):
        found = Found.DOCUMENT
    elif kinds == ["array"]:
        found = Found.ARRAY
    return ValuesScan(
        scan=ScanResult(
            items_path=items_path,
            root=root,
            container=root,
            container_closed=not truncated,
            candidates=numbered,
            envelope=tuple(fields),
            truncated=truncated,
            anomalies=tuple(sorted(anomalies, key=lambda a: a.span.start)),
            steps=steps,
        ),
        found=found,
        has_envelope=has_envelope,
    )


def _extent(text: str, start: int, bound: int) -> tuple[int, Closure, int, str]:
    """End, closure, depth and defect of the value opening at ``start``, read no further
    than ``bound`` (where the next value begins on a line of its own)."""
    end, closure, depth = bracket_extent(text[start:bound], 0)
    end += start
    # Values packed on one line: a damaged one can run over the next. Where it is not
    # valid JSON, it ends before the first place another value visibly begins: `}` then
    # `{"` with no comma, or an object opening where the grammar allows no value (not
    # after `:`, `[` or `,`). In valid JSON a raw `{"key":` is always an object.
    cut = _packed_boundary(text, start, end)
    if cut is None or is_strict_document(text[start:end]):
        return end, closure, depth, ""
    end, closure, depth = bracket_extent(text[start:cut], 0)
    end += start
    if closure is Closure.CLOSED:
        return end, closure, depth, ""
    end = max(lexis.last_non_ws(text, cut) + 1, start + 1)
    return end, Closure.BROKEN, depth, _CUT_BY_NEXT


def _packed_boundary(text: str, start: int, end: int) -> int | None:
    cuts = []
    packed = _PACKED.search(text, start + 1, end)
    if packed is not None:
        cuts.append(packed.end())
    for opener in lexis.OBJECT_WITH_MEMBER.finditer(text, start + 1, end):
        before = lexis.last_non_ws(text, opener.start())
        if text[before] not in ":[,":
            cuts.append(opener.start())
            break
    return min(cuts) if cuts else None


def _framed_alone(kind: str, names: frozenset[str], value: str, keys: Keys) -> bool:
    """One value alone is read as values only when it cannot be a report document: an
    array where the definition names an items path, or an object the item schema claims
    (by its members, or by the first member name of one cut before its first value).
    Anything else, such as a report cut before its items array, is the document scan's."""
    if kind == "array":
        return True
    if kind != "item":
        return False
    if not names:
        first = _FIRST_MEMBER.match(value)
        names = frozenset() if first is None else frozenset({first.group(1)})
    return len(names & keys.item) > len(names & keys.envelope)


def _keys_of(value: str) -> frozenset[str]:
    """The member names of ``value`` when it is strictly one JSON object, else none."""
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return frozenset()
    return frozenset(parsed) if isinstance(parsed, dict) else frozenset()


def _plain_item(names: frozenset[str], items_key: str, keys: Keys) -> bool:
    return bool(names) and items_key not in names and not _is_envelope(names, keys)


def _is_envelope(names: frozenset[str], keys: Keys) -> bool:
    """The envelope schema names more of its members than the item schema; without an
    envelope schema, the item schema names none of them."""
    shared = len(names & keys.item)
    if keys.envelope:
        return len(names & keys.envelope) > shared
    return bool(names) and bool(keys.item) and shared == 0


def _candidate(span: Span, closure: Closure, depth: int, defect: str) -> Candidate:
    return Candidate(index=0, span=span, closure=closure, depth=depth, defect=defect)


def _line_indent(text: str, pos: int) -> int | None:
    """The column of ``pos`` when only spaces and tabs come before it on its line."""
    line = text.rfind("\n", 0, pos) + 1
    before = text[line:pos]
    return len(before) if not before.strip(" \t") else None


def _note_gap(
    text: str,
    start: int,
    end: int,
    anomalies: list[Anomaly],
    candidates: list[Candidate],
    *,
    first: bool,
) -> None:
    """Text between values (prose, fences, commas) is tolerated and noted. Text holding
    a member name (``"id":``) is quarantined whole: it may be an item that lost its
    opening brace, and an operator must see it (ADR 0002, rule 6)."""
    gap = text[start:end].strip(lexis.WHITESPACE + ",")
    if not gap:
        return
    member = _MEMBER.search(text, start, end)
    if member is not None:
        at = lexis.skip_ws(text, start)
        last = len(text[start:end].rstrip(lexis.WHITESPACE)) + start
        candidates.append(
            Candidate(
                index=0,
                span=Span(start=at, end=max(last, at + 1)),
                closure=Closure.BROKEN,
                depth=0,
                defect="text between top-level values holding a member name",
                stray=True,
            )
        )
    if first:
        kind = AnomalyKind.LEADING_TEXT
    elif end >= len(text):
        kind = AnomalyKind.TRAILING_TEXT
    else:
        kind = AnomalyKind.SKIPPED_TEXT
    anomalies.append(Anomaly(kind=kind, span=Span(start=start, end=end)))


def _shifted_candidate(candidate: Candidate, offset: int) -> Candidate:
    return replace(candidate, span=_shift(candidate.span, offset))


def _shifted_field(member: EnvelopeField, offset: int) -> EnvelopeField:
    return replace(member, span=_shift(member.span, offset))


def _shifted_anomaly(anomaly: Anomaly, offset: int) -> Anomaly:
    return replace(anomaly, span=_shift(anomaly.span, offset))


def _shift(span: Span, offset: int) -> Span:
    return Span(start=span.start + offset, end=span.end + offset)
