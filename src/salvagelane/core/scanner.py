"""The item scanner: raw model text in, item and envelope spans out.

A single forward pass that never raises, never recurses on input nesting and
never backtracks. It locates the items container named by a dotted path,
yields every item candidate with its character span and whether it closed,
and records the span of every other envelope field it passes.

Resynchronisation (see docs/adr/0002-item-scanner.md): inside an item the scan
only counts brackets and skips well-formed strings. A quote that cannot open a
well-formed string (a raw newline, a bad escape, an unescaped quote) is stepped
over, so pretty-printed output resynchronises at the next line. For output on
one line, the scanner learns the item signature (``{`` plus the key the first
item opens with) and never lets an item run across a later signature that
cannot belong to it: one that falls inside what the scan believes is a string,
or one that opens an object where the grammar allows no value.

Invariant (fuzzed in tests): ``steps <= 2 * len(text) + 2``; every loop
iteration consumes at least one character or ends a structure.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from salvagelane.core import lexis, speedups
from salvagelane.core.placement import ListBounds, place
from salvagelane.core.records import Span, new_span
from salvagelane.core.scan_values import (
    Anomaly,
    AnomalyKind,
    Candidate,
    Closure,
    EnvelopeField,
    ItemsPath,
    ScanResult,
    new_candidate,
    parse_items_path,
)
from salvagelane.core.strict_scan import scan_strict, scan_wrapped

__all__ = [
    "Anomaly",
    "AnomalyKind",
    "Candidate",
    "Closure",
    "EnvelopeField",
    "ItemsPath",
    "ScanResult",
    "bracket_extent",
    "parse_items_path",
    "scan",
    "scan_leniently",
    "scan_strict",
]


def scan(text: str, items_path: ItemsPath) -> ScanResult:
    """Scan ``text`` for the items container at ``items_path``. Never raises.

    A strict document, bare or wrapped in prose or a code fence, is read in one compiled
    pass (``core.strict_scan``), with the answer the full scan would give; anything else
    is scanned leniently.
    """
    strict = scan_strict(text, items_path)
    if strict is not None:
        return strict
    wrapped = scan_wrapped(text, items_path)
    return wrapped[0] if wrapped is not None else scan_leniently(text, items_path)


def scan_leniently(text: str, items_path: ItemsPath) -> ScanResult:
    """The full scan, with its recovery, whatever ``text`` is. Never raises."""
    return _Scanner(text, items_path).run()


def bracket_extent(text: str, start: int) -> tuple[int, Closure, int]:
    """End, closure and nesting depth of the object or array opening at ``start``."""
    matched = speedups.match_container(text, start, len(text))
    if matched is not None:  # what scan_brackets answers first, without a scanner
        return matched[0], Closure.CLOSED, matched[1]
    value = _Scanner(text, ()).scan_brackets(start, anchored=False)
    return value.end, value.closure, value.depth


_ROOT_OBJECT = re.compile(r"\{[ \t\n\r]*+(?:[\"}]|\Z)")
_ROOT_ARRAY = re.compile(r"\[[ \t\n\r]*+[{\]]")
_ROOT_ARRAY_LINE = re.compile(r"^[ \t]*+(\[)[ \t]*+\r?$", re.MULTILINE)
_VALUE_START = frozenset('{["-0123456789tfn')
# Containers this shallow take the fast path even next to a dead-quote region: the
# regex fast path always did (lexis.SHALLOW_CONTAINERS), and the scan must not depend on
# which implementation of it runs.
_ALWAYS_FAST = len(lexis.SHALLOW_CONTAINERS)
_COMMA_SEPARATOR = re.compile(r"[ \t\n\r]*+,(?![ \t\n\r]*+[,\]])")
# A code fence's closing line: framing around the document, never an item's text.
_FENCE_LINE = re.compile(r"(?<![^\n])[ \t]*+```[^\n]*+(?:\n|\Z)")


class _StringEnd(enum.StrEnum):
    """How a string read leniently from its opening quote ends."""

    STRING = "string"  # at its closing quote
    CUT = "cut"  # at the bound without closing (the text ends, or the next item starts)
    DEAD = "dead"  # at a raw newline or bad escape: the quote cannot open a string


class _Expect(enum.IntEnum):
    """What an envelope object accepts next, member by member."""

    KEY = 0
    KEY_OR_CLOSE = 1
    COMMA_OR_CLOSE = 2


# Module-level aliases for the members the innermost loops compare with: a global load,
# not a global load plus a class attribute lookup (5% of the scan on an envelope of many
# members, measured against plain ints).
_STRING, _CUT, _DEAD = _StringEnd.STRING, _StringEnd.CUT, _StringEnd.DEAD
_EXPECT_KEY, _EXPECT_KEY_OR_CLOSE = _Expect.KEY, _Expect.KEY_OR_CLOSE
_EXPECT_COMMA_OR_CLOSE = _Expect.COMMA_OR_CLOSE


@dataclass(slots=True)
class _Level:
    """An object being scanned member by member (the root or one on the items path)."""

    prefix: tuple[str, ...]
    expect: _Expect = _EXPECT_KEY_OR_CLOSE
    keys: set[str] = field(default_factory=set)
    last_field: int = -1  # index into the envelope list of this level's latest field


class _Value(NamedTuple):
    """A scanned value (internal; a tuple because one is built per item on the hot path)."""

    end: int  # end of the value's span
    resume: int  # where scanning goes on (past ``end`` when an item was cut)
    closure: Closure
    depth: int
    defect: str = ""


class _Scanner:
    def __init__(self, text: str, items_path: ItemsPath) -> None:
        self.text = text
        self.n = len(text)
        self.path = items_path
        self.steps = 0
        self.truncated = False
        self.container: Span | None = None
        self.container_closed = False
        self.candidates: list[Candidate] = []
        # Kept as candidates are added, so that a clean scan of many items is not walked
        # again: a candidate found before the last one, and one that is not clean.
        self._out_of_order = False
        # Where the list first ended (its `]`, or where it was left unclosed): damage can
        # end it early, and the scan then takes the items after the report as its own.
        self._first_list_end = self.n
        self._unclean = False
        self.anomalies: list[Anomaly] = []
        self._anchor_iter: Iterator[re.Match[str]] | None = None
        self._signature_key = ""  # the raw key (quotes included) items open with, once learned
        self._signature: re.Pattern[str] | None = None  # its pattern
        self._anchor = self.n + 1  # next item signature not yet passed
        # Quotes strictly inside these regions cannot open a (lenient / strict) string.
        # Remembering them keeps the scan linear on text full of quotes that never close.
        self._dead = (-1, -1)
        self._strict_dead = (-1, -1)
        self._items_indent: int | None = None  # indentation of laid-out items, once seen
        self._array_is_document = False  # the items array is the whole document
        self._nested_anchor = -1  # a signature read as a damaged item's sub-object
        self._arrays_checked: dict[int, bool] = {}  # array-shaped candidates: well formed?
        self._array_budget = 2 * self.n  # characters those checks may read in all

    # ----------------------------------------------------------------- driver

    def run(self) -> ScanResult:
        root: Span | None = None
        envelope: list[EnvelopeField] = []
        if not self.path:
            start = self._find_root_array()
            if start is not None:
                self._array_is_document = start == lexis.skip_ws(self.text, 0)
                end = self._scan_container(start)
                root = Span(start=start, end=end)
        else:
            pos = 0
            while self.container is None and not self.truncated:
                match = _ROOT_OBJECT.search(self.text, pos)
                if match is None:
                    break
                fields: list[EnvelopeField] = []
                end = self._scan_object(match.start(), fields)
                if root is None or self.container is not None:
                    root = Span(start=match.start(), end=end)
                    envelope = fields
                pos = max(end, match.start() + 1)
        if root is not None:
            self._note_surroundings(root)
            end = self._scan_items_after(root.end)
            self._hold_objects_outside(0, root.start, "before")
            self._hold_objects_outside(end, self.n, "after")
        # Text outside the report is looked at last; candidates are numbered in text order.
        candidates = self.candidates
        if self._out_of_order:
            candidates = sorted(candidates, key=lambda c: c.span.start)
        if self.container is not None and root is not None and not self._in_step():
            closed = self.container_closed and self.container.end <= self.n
            close = self.container.end - 1 if closed else self.container.end
            bounds = ListBounds(
                start=self.container.start,
                close=close,
                first_end=min(self._first_list_end, close),
                report_end=root.end,
                enclosing=1 + len(self.path),
            )
            candidates = list(place(self.text, candidates, bounds))
        return ScanResult(
            items_path=self.path,
            root=root,
            container=self.container,
            container_closed=self.container_closed,
            candidates=(
                tuple(c if c.index == i else replace(c, index=i) for i, c in enumerate(candidates))
                if self._out_of_order
                else tuple(candidates)  # numbered in text order as they were added
            ),
            envelope=tuple(envelope),
            truncated=self.truncated,
            anomalies=tuple(self.anomalies),
            steps=self.steps,
        )

    def _in_step(self) -> bool:
        """Nothing the placement check could act on: every candidate closed (or cut by
        the end of the text) and only leading prose tolerated. Anything placement
        quarantines needs text between or after the items (a stray closer, a member
        name, closers after the report), and the scan notes each of those."""
        return not self._unclean and all(a.kind is AnomalyKind.LEADING_TEXT for a in self.anomalies)

    def _find_root_array(self) -> int | None:
        first = lexis.skip_ws(self.text, 0)
        if first < self.n and self.text[first] == "[":
            return first  # the document itself is an array
        # A line holding just `[` opens a laid-out array (after a fence or prose) even when
        # its first item is too damaged to start with `{`.
        line = _ROOT_ARRAY_LINE.search(self.text)
        if line is not None:
            return line.start(1)
        match = _ROOT_ARRAY.search(self.text)
        if match is not None:
            return match.start()
        found = self.text.find("[")
        return None if found < 0 else found

    def _note_surroundings(self, root: Span) -> None:
        if self.text[: root.start].strip(lexis.WHITESPACE):
            self.anomalies.append(
                Anomaly(kind=AnomalyKind.LEADING_TEXT, span=Span(start=0, end=root.start))
            )
        if self.text[root.end :].strip(lexis.WHITESPACE):
            self.anomalies.append(
                Anomaly(kind=AnomalyKind.TRAILING_TEXT, span=Span(start=root.end, end=self.n))
            )

    def _hold_objects_outside(self, start: int, end: int, where: str) -> None:
        """Text outside the report that holds an object with members is quarantined whole.

        Prose around a report is noted and dropped, but an object there may be an item
        that damage put outside the list (a first item too broken to teach the scanner
        its signature): an operator must see it.
        """
        if self.container is None:
            return
        found = lexis.OBJECT_WITH_MEMBER.search(self.text, start, end)
        if found is None:
            return
        first = lexis.skip_ws(self.text, start)
        self._add_stray(first, end, f"text {where} the report holding an object")

    # ------------------------------------------------------ envelope objects

    def _scan_object(self, start: int, fields: list[EnvelopeField]) -> int:
        """Scan an object member by member, descending only along the items path."""
        text, n = self.text, self.n
        levels = [_Level(prefix=())]
        pos = start + 1
        while levels:
            self.steps += 1
            if pos < 0:
                return n  # damage with no later member to resume at: the object is lost here
            pos = lexis.skip_ws(text, pos)
            if pos >= n:
                self.truncated = True
                return n
            level = levels[-1]
            char = text[pos]
            if level.expect is _EXPECT_COMMA_OR_CLOSE:
                if char == ",":
                    level.expect = _EXPECT_KEY
                    pos += 1
                elif char == "}":
                    levels.pop()
                    pos += 1
                elif char == '"':
                    self._anomaly(AnomalyKind.MISSING_COMMA, pos, pos)
                    level.expect = _EXPECT_KEY
                elif char == "`" and _FENCE_LINE.match(text, pos) is not None:
                    return pos  # the fence closes the document where its braces did not
                else:
                    self._break_last_field(level, fields, f"unexpected {char!r} after the value")
                    pos = self._resync_member(level, pos)
                continue
            if char == "}":
                if level.expect is _EXPECT_KEY:
                    self._anomaly(AnomalyKind.TRAILING_COMMA, pos, pos + 1)
                levels.pop()
                pos += 1
                continue
            if char != '"':
                pos = self._resync_member(level, pos)
                continue
            key_end = self._strict_string(pos)
            if key_end < 0:
                if self._lenient_string(pos)[1] is _CUT:
                    self.truncated = True
                    return n
                pos = self._resync_member(level, pos + 1)
                continue
            key = _decode_key(text[pos:key_end])
            colon = lexis.skip_ws(text, key_end)
            if colon >= n:
                self.truncated = True
                return n
            if text[colon] != ":":
                self._anomaly(AnomalyKind.MISSING_COLON, pos, colon)
                pos = self._resync_member(level, colon)
                continue
            pos = lexis.skip_ws(text, colon + 1)
            if pos >= n:
                self.truncated = True
                return n
            duplicate = key in level.keys
            level.keys.add(key)
            level.expect = _EXPECT_COMMA_OR_CLOSE
            member_path = (*level.prefix, key)
            on_path = (
                not duplicate
                and len(level.prefix) < len(self.path)
                and self.path[len(level.prefix)] == key
            )
            if on_path and len(member_path) == len(self.path) and text[pos] == "[":
                if self.container is None:
                    pos = self._scan_container(pos)
                    if self.truncated:
                        return n
                    continue
            elif on_path and len(member_path) < len(self.path) and text[pos] == "{":
                levels.append(_Level(prefix=member_path))
                pos += 1
                continue
            value = self._scan_value(pos, item=False)
            conflict = ""
            if duplicate:
                conflict = "duplicate key"
            elif on_path and len(member_path) == len(self.path):
                conflict = "the items key does not hold an array"
            elif on_path:
                conflict = "an object on the items path is not an object"
            level.last_field = len(fields)
            fields.append(
                EnvelopeField(
                    path=member_path,
                    span=Span(start=pos, end=value.end),
                    closure=value.closure,
                    depth=value.depth,
                    defect=value.defect,
                    conflict=conflict,
                )
            )
            if value.closure is Closure.TRUNCATED:
                self.truncated = True
                return n
            pos = value.resume
        return pos

    def _break_last_field(self, level: _Level, fields: list[EnvelopeField], defect: str) -> None:
        if level.last_field < 0:
            return
        old = fields[level.last_field]
        if old.closure is Closure.CLOSED:
            fields[level.last_field] = EnvelopeField(
                path=old.path,
                span=old.span,
                closure=Closure.BROKEN,
                depth=old.depth,
                defect=defect,
                conflict=old.conflict,
            )

    def _resync_member(self, level: _Level, pos: int) -> int:
        """After damage between members, resume at the next ``"key":``; -1: none left.

        Once the list has ended, an item signature before that member means damage
        closed the list early (a stray ``]``): the items there are scanned as the
        list's continuation, so they are salvaged or quarantined, never skipped.
        """
        while True:
            found = self._next_member(pos)
            resume = self.n if found < 0 else found
            container = self.container
            if container is not None and pos >= container.end:
                if lexis.OBJECT_WITH_MEMBER.match(self.text, pos):
                    # An object where a member should be is no envelope: an item. If the
                    # first item was too damaged to teach the signature, this one does.
                    self._learn_signature(pos, including=True)
                    anchor = pos
                else:
                    anchor = self._anchor_at_or_after(pos)
                if anchor < resume:
                    pos = self._continue_items(pos, anchor)
                    if self.truncated:
                        return self.n
                    continue
            self._anomaly(AnomalyKind.SKIPPED_TEXT, pos, resume)
            level.expect = _EXPECT_KEY
            return found

    # ------------------------------------------------------- items container

    def _scan_items_after(self, pos: int) -> int:
        """Items whose signature appears after the report ended: damage closed it early.

        Scanned as a continuation of the list, so an intact item is never lost
        as trailing text; the anomaly says where this happened. Returns where the
        scan stopped.
        """
        while self.container is not None and not self.truncated:
            self.steps += 1
            anchor = self._anchor_at_or_after(pos)
            if anchor >= self.n:
                break
            end = self._continue_items(pos, anchor)
            if end <= anchor:
                break
            pos = end
        return self.n if self.truncated else pos

    def _continue_items(self, pos: int, anchor: int) -> int:
        """Scan on from the item signature at ``anchor`` as part of the list, which
        damage at ``pos`` closed early; return where scanning goes on."""
        assert self.container is not None
        self._anomaly(AnomalyKind.ITEMS_AFTER_REPORT, pos, anchor)
        if self.text[pos:anchor].strip(" \t\r\n,]}"):
            # Remnants of whatever closed the list early: shown, not dropped.
            self._add_stray(pos, anchor, "text after the list closed early")
        return self._scan_items(anchor, self.container.start, expect_item=True)

    def _scan_container(self, start: int) -> int:
        """Scan the items array opening at ``start``; return where scanning goes on."""
        self.container = Span(start=start, end=self.n)
        return self._scan_items(start + 1, start, expect_item=True)

    def _scan_items(self, pos: int, start: int, *, expect_item: bool) -> int:
        """The items loop of the array opening at ``start``, from ``pos``."""
        text, n = self.text, self.n
        seen_item = False
        while True:
            self.steps += 1
            pos = lexis.skip_ws(text, pos)
            if pos >= n:
                self.truncated = True
                return n
            char = text[pos]
            if char == ",":
                if expect_item:
                    self._anomaly(AnomalyKind.EXTRA_COMMA, pos, pos + 1)
                expect_item = True
                pos += 1
                continue
            if char == "]":
                if self._item_follows(pos + 1) or self._list_goes_on(pos):
                    self._anomaly(AnomalyKind.STRAY_BRACKET, pos, pos + 1)
                    pos += 1
                    continue
                if expect_item and seen_item:
                    self._anomaly(AnomalyKind.TRAILING_COMMA, pos, pos + 1)
                self.container = Span(start=start, end=pos + 1)
                self.container_closed = True
                self._first_list_end = min(self._first_list_end, pos)
                return pos + 1
            if char == "}":
                # Stray unless the list visibly ends here: items still follow, or a
                # separator or another item comes next.
                if (
                    self._array_is_document  # no enclosing object for it to close
                    or self._next_char(pos + 1) in (",", "{", "]")
                    or self._item_ahead(pos + 1)
                ):
                    self._anomaly(AnomalyKind.STRAY_BRACE, pos, pos + 1)
                    pos += 1
                    continue
                # The model closed the envelope without closing the list.
                self._anomaly(AnomalyKind.UNCLOSED_ITEMS, pos, pos)
                self.container = Span(start=start, end=pos)
                self._first_list_end = min(self._first_list_end, pos)
                return pos
            if char == '"' and self.path and self._is_member(pos) and not self._item_ahead(pos):
                # A member of the enclosing object, and no item after it: the model
                # never closed the list. (With items after it, it is damage inside the
                # list, such as an item that lost its opening brace: stray text.)
                self._anomaly(AnomalyKind.UNCLOSED_ITEMS, pos, pos)
                self.container = Span(start=start, end=_trim_end(text, start, pos))
                self._first_list_end = min(self._first_list_end, self.container.end)
                return pos
            if char == "{" and expect_item:
                self._learn_signature(pos)  # as taking this item would: the run needs it
                run_end, expect_item = self._item_run(pos)
                if run_end != pos:
                    seen_item = True
                    pos = run_end
                    continue
            if not expect_item:
                self._anomaly(AnomalyKind.MISSING_COMMA, pos, pos)
            seen_item = True
            expect_item = False
            value = None
            if char in _VALUE_START and not (char == '"' and self._is_member(pos)):
                value = self._scan_value(pos, item=True)  # a member name is never an item
                if char == '"' and value.end > self._anchor_at_or_after(pos + 1):
                    value = None  # a "string" across the next signature: quotes out of step
            if value is not None and (value.closure is not Closure.BROKEN or char in "{["):
                self._add_candidate(pos, value)
                if value.closure is Closure.TRUNCATED:
                    self.truncated = True
                    return n
                pos = value.resume
                if value.resume != value.end:
                    expect_item = True  # cut at the next item's signature
                else:
                    separator = _COMMA_SEPARATOR.match(text, pos)
                    if separator is not None:  # the usual case, taken in one step
                        pos = separator.end()
                        expect_item = True
            elif _FENCE_LINE.match(text, pos) is not None and not self._item_ahead(pos):
                # The fence closes the document before the list was closed (a delimiter
                # was lost inside it): the list ends here, the fence is not an item.
                self._anomaly(AnomalyKind.UNCLOSED_ITEMS, pos, pos)
                self.container = Span(start=start, end=_trim_end(text, start, pos))
                self._first_list_end = min(self._first_list_end, self.container.end)
                return pos
            else:
                end = self._stray_end(pos)
                self._add_stray(pos, end, "text between items that is not a JSON value")
                pos = end

    def _item_run(self, pos: int) -> tuple[int, bool]:
        """Take the run of intact items from ``pos`` in one compiled call, exactly as
        the loop would take them one by one; return where it stopped and whether an
        item is expected there."""
        run = speedups.item_run
        if run is None or not self._signature_key:
            return pos, True
        spans, end, separated, indent = run(
            self.text, pos, self._signature_key, *self._dead, _ALWAYS_FAST
        )
        if not spans:
            return pos, True
        if self._items_indent is None and indent >= 0:
            self._items_indent = indent
        self.steps += len(spans) * 2 // 3  # two per item, as the loop counts them
        if self.candidates and spans[0] < self.candidates[-1].span.start:
            self._out_of_order = True
        add = self.candidates.append
        closed = Closure.CLOSED
        index = len(self.candidates)
        for k in range(0, len(spans), 3):
            add(
                new_candidate(
                    index, new_span(spans[k], spans[k + 1]), closed, spans[k + 2], "", False
                )
            )
            index += 1
        # The signatures the run passed are behind it: look on from where it stopped.
        self._follow(self._signature_key, end)
        return end, separated

    def _add_stray(self, start: int, end: int, defect: str) -> None:
        """Text that is not an item, kept as a candidate so that it is quarantined."""
        value = _Value(
            end=_trim_end(self.text, start, end),
            resume=end,
            closure=Closure.BROKEN,
            depth=0,
            defect=defect,
        )
        self._add_candidate(start, value, stray=True)

    def _add_candidate(self, start: int, value: _Value, *, stray: bool = False) -> None:
        if self.candidates and start < self.candidates[-1].span.start:
            self._out_of_order = True
        if stray or value.closure is Closure.BROKEN:
            self._unclean = True
        self.candidates.append(
            new_candidate(
                len(self.candidates),
                new_span(start, value.end),
                value.closure,
                value.depth,
                value.defect,
                stray,
            )
        )

    # ---------------------------------------------------------------- values

    def _scan_value(self, pos: int, *, item: bool) -> _Value:
        text = self.text
        char = text[pos]
        if char in "{[":
            if item and char == "{":
                self._learn_signature(pos)
            return self.scan_brackets(pos, anchored=item)
        if char == '"':
            end = self._strict_string(pos)
            if end >= 0:
                return _Value(end=end, resume=end, closure=Closure.CLOSED, depth=0)
            if self._lenient_string(pos)[1] is _CUT:
                return _Value(end=self.n, resume=self.n, closure=Closure.TRUNCATED, depth=0)
            # The damage is where the strict read failed; what follows may be intact.
            end = max(pos + 1, self._strict_failure(pos))
            return _Value(
                end=end,
                resume=end,
                closure=Closure.BROKEN,
                depth=0,
                defect=f"string opening at offset {pos} is not well formed",
            )
        return self._scan_bare(pos)

    def _scan_bare(self, pos: int) -> _Value:
        """Numbers and literals; anything else word-like is junk (NaN, True, 01)."""
        text, n = self.text, self.n
        word = lexis.WORD.match(text, pos)
        end = word.end() if word else pos + 1
        token = text[pos:end]
        number = lexis.NUMBER.match(text, pos)
        if end >= n:
            # The text stops inside the token: whatever it was going to be, it is cut.
            return _Value(end=n, resume=n, closure=Closure.TRUNCATED, depth=0)
        if (number is not None and number.end() == end) or token in lexis.LITERALS:
            return _Value(end=end, resume=end, closure=Closure.CLOSED, depth=0)
        return _Value(
            end=end,
            resume=end,
            closure=Closure.BROKEN,
            depth=0,
            defect=f"{_preview(token)} is not a JSON value",
        )

    def scan_brackets(self, start: int, *, anchored: bool) -> _Value:
        """Match brackets from ``start``, skipping strings; cut at a foreign item start."""
        text, n = self.text, self.n
        if anchored and self._items_indent is None:
            self._items_indent = self._line_indent(start)  # learned from the first item
        # No regex in an item reads past the next item's signature: that keeps the
        # work linear when quotes are out of step on one line.
        bound = min(self._anchor_at_or_after(start + 1), n) if anchored else n
        if not self._in_dead(start):
            # Fast path: a well-formed container is matched in one call, exactly as the
            # loop below would find it, unless a dead-quote region (which the loop reads
            # as plain text) lies inside it.
            matched = speedups.match_container(text, start, bound)
            if matched is not None:
                end, depth = matched
                if depth <= _ALWAYS_FAST or not self._dead_overlaps(start, end):
                    self.steps += 1
                    return _Value(end=end, resume=end, closure=Closure.CLOSED, depth=depth)
        stack = [text[start]]
        open_counts = {"{": 0, "[": 0}
        open_counts[text[start]] += 1
        depth = 1
        defect = ""
        pos = start + 1
        while True:
            self.steps += 1
            anchor = self._anchor_at_or_after(pos) if anchored else n + 1
            pos = self._skip(pos, min(anchor, n))
            if pos >= n:
                return _Value(
                    end=n, resume=n, closure=Closure.TRUNCATED, depth=depth, defect=defect
                )
            char = text[pos]
            if char == "{" or char == "[":
                if (
                    anchor == pos
                    and pos != self._nested_anchor
                    and self._starts_another_item(pos, stack, start)
                ):
                    return self._cut(start, pos, depth, "item not closed before the next item")
                stack.append(char)
                open_counts[char] += 1
                depth = max(depth, len(stack))
                pos += 1
            elif char == "}" or char == "]":
                opener = "{" if char == "}" else "["
                if stack[-1] != opener:
                    defect = defect or f"mismatched {char!r} at offset {pos}"
                    if open_counts[opener] == 0 or self._inner_goes_on(pos, stack[-1]):
                        pos += 1  # a stray closer: step over it
                        continue
                while stack[-1] != opener:
                    open_counts[stack.pop()] -= 1
                open_counts[stack.pop()] -= 1
                pos += 1
                if not stack:
                    closure = Closure.BROKEN if defect else Closure.CLOSED
                    return _Value(end=pos, resume=pos, closure=closure, depth=depth, defect=defect)
            else:
                end, kind = self._lenient_string(pos, min(anchor, n))
                if kind is _CUT and anchor < n:
                    # A string that would run across the next item's signature: in valid
                    # JSON no string holds an unescaped `{"key":`, so quotes are out of step.
                    nested = self._nested_reading(stack, pos, anchor)
                    if nested is None:
                        return self._cut(
                            start, anchor, depth, "item not closed before the next item"
                        )
                    # The signature may be a sub-object of this damaged item: it stays
                    # inside the item (and is quarantined with it), never an item itself.
                    stack = nested
                    open_counts = {"{": stack.count("{"), "[": stack.count("[")}
                    depth = max(depth, len(stack) + 1)
                    defect = defect or f"quotes out of step before offset {anchor}"
                    self._nested_anchor = anchor
                    pos = anchor
                    continue
                if kind is _CUT:
                    # The text ends inside this string: a cut, whatever closers it holds.
                    return _Value(
                        end=n, resume=n, closure=Closure.TRUNCATED, depth=depth, defect=defect
                    )
                defect = defect or f"string at offset {pos} is not well formed"
                # A bad escape or a raw control character still leaves a string on one
                # line: skip it whole. A quote that meets a newline is out of step: step
                # over it alone (its line is now a dead region, read as plain text), so
                # the count resynchronises at the next line.
                pos = end if kind is _STRING else pos + 1

    def _nested_reading(self, stack: list[str], quote: int, anchor: int) -> list[str] | None:
        """The open containers at ``anchor`` if the string cut there is read as structure.

        Quotes out of step mean the text from ``quote`` to ``anchor`` may be structure the
        scan took for a string (a dropped quote flips the reading): its brackets are
        applied to ``stack``. If the item is still open there and the grammar allows a
        value at ``anchor`` (after ``[``, ``,`` in an array, or ``:``), the signature
        could be a sub-object: the stack is returned. None: it can only be a new item.
        """
        nested = list(stack)
        for char in self.text[quote:anchor]:
            if char in "{[":
                nested.append(char)
            elif char in "}]":
                if not nested:
                    return None
                nested.pop()
        if not nested:
            return None
        before = self._prev_char(anchor)
        if nested[-1] == "[" and before in ("[", ","):
            return nested
        if nested[-1] == "{" and before == ":":
            return nested
        return None

    def _cut(self, start: int, at: int, depth: int, defect: str) -> _Value:
        return _Value(
            end=_trim_end(self.text, start, at),
            resume=at,
            closure=Closure.BROKEN,
            depth=depth,
            defect=defect,
        )

    # ------------------------------------------------------ item signatures

    def _learn_signature(self, pos: int, *, including: bool = False) -> None:
        """Learn the signature from the object opening at ``pos``: later objects opening
        with its first key (this one too if ``including``) are item starts."""
        if self._anchor_iter is not None:
            return
        key = self._member_key(lexis.skip_ws(self.text, pos + 1))
        if key is not None:
            self._follow(key, pos if including else pos + 1)

    def _item_ahead(self, pos: int) -> bool:
        """Does an item signature follow ``pos``?

        With no signature learned yet (the first item was damaged), a member ``"key":``
        at ``pos`` is tried: a later object opening with that key means this item lost
        its opening brace, and that key is the signature.
        """
        if self._anchor_iter is None:
            quote = lexis.skip_ws(self.text, pos)
            key = self._member_key(quote)
            if key is not None:
                pattern = lexis.item_anchor(key)
                if pattern.search(self.text, quote + len(key)) is not None:
                    self._follow(key, quote + len(key))
        return self._anchor_at_or_after(pos) <= self.n

    def _follow(self, key: str, start: int) -> None:
        """Item signatures are ``{`` then ``key``: look for them from ``start`` on."""
        if key != self._signature_key or self._signature is None:
            self._signature_key, self._signature = key, lexis.item_anchor(key)
        self._anchor_iter = self._signature.finditer(self.text, start)
        self._anchor = -1

    def _anchor_at_or_after(self, pos: int) -> int:
        while self._anchor < pos:
            nxt = next(self._anchor_iter, None) if self._anchor_iter is not None else None
            self._anchor = self.n + 1 if nxt is None else nxt.start()
        return self._anchor

    # --------------------------------------------------------------- strings
    #
    # Dead quotes: if a string opening at quote p fails at f, every quote between
    # them is the second half of an escape pair as read from p, so a string opening
    # there reads the same text and fails at f too. Such a region is remembered and
    # read as plain text, so no quote in it is tried again: linear work on any input.

    def _in_dead(self, pos: int) -> bool:
        return self._dead[0] < pos < self._dead[1]

    def _dead_overlaps(self, start: int, end: int) -> bool:
        return self._dead[0] < end and start < self._dead[1]

    def _strict_string(self, quote: int) -> int:
        """End of the well-formed string opening at ``quote``, or -1."""
        if self._in_dead(quote) or self._strict_dead[0] < quote < self._strict_dead[1]:
            return -1
        stop = lexis.STRICT_STRING_PREFIX.match(self.text, quote).end()  # type: ignore[union-attr]
        if stop < self.n and self.text[stop] == '"':
            return stop + 1
        self._strict_dead = (quote, stop)
        return -1

    def _strict_failure(self, quote: int) -> int:
        """Where a strict string opening at ``quote`` (known to fail) stops."""
        if self._strict_dead[0] <= quote < self._strict_dead[1]:
            return self._strict_dead[1]
        return self._dead[1] if self._in_dead(quote) else quote + 1

    def _lenient_string(self, quote: int, bound: int | None = None) -> tuple[int, _StringEnd]:
        """Where and how a string read leniently from ``quote`` ends (see ``_StringEnd``).

        CUT: it runs to ``bound`` (the end of the text by default) without closing.
        """
        if self._in_dead(quote):
            return self._dead[1], _DEAD
        limit = self.n if bound is None else bound
        stop = lexis.LENIENT_STRING_PREFIX.match(self.text, quote, limit).end()  # type: ignore[union-attr]
        if stop >= limit or (stop + 1 >= limit and self.text[stop] == "\\"):
            return limit, _CUT  # runs to the bound, maybe ending in half an escape
        if self.text[stop] == '"':
            return stop + 1, _STRING
        self._dead = (quote, stop)
        return stop, _DEAD

    def _skip(self, pos: int, bound: int | None = None) -> int:
        """Up to the next bracket or quote outside strings and dead regions, or ``bound``."""
        limit = self.n if bound is None else bound
        if self._in_dead(pos):
            dead_end = min(self._dead[1], limit)
            end = lexis.RAW_TO_BRACKET.match(self.text, pos, dead_end).end()  # type: ignore[union-attr]
            if end < dead_end or end >= limit:
                return end
            pos = end
        return lexis.skip_to_bracket(self.text, pos, limit)

    def _is_member(self, quote: int) -> bool:
        """Does an object member (``"key":``) start at ``quote`` (a quote)?"""
        end = self._strict_string(quote)
        return end >= 0 and self._next_char(end) == ":"

    def _member_key(self, pos: int) -> str | None:
        """The raw key (quotes included) of a member ``"key":`` starting at ``pos``."""
        if pos >= self.n or self.text[pos] != '"' or not self._is_member(pos):
            return None
        return self.text[pos : self._strict_string(pos)]

    def _next_member(self, pos: int) -> int:
        """The next ``"key":`` at or after ``pos``, or -1; each quote is tried once."""
        text = self.text
        quote = text.find('"', pos)
        while quote >= 0:
            self.steps += 1
            end = self._strict_string(quote)
            if end >= 0 and self._next_char(end) == ":":
                return quote
            # A string that closes may be followed by a key opening at its closing quote;
            # a string that fails cannot be opened again before its failure point.
            quote = text.find('"', end - 1 if end >= 0 else max(quote + 1, self._strict_dead[1]))
        return -1

    # --------------------------------------------------------------- helpers

    def _stray_end(self, pos: int) -> int:
        """Where text that is not a value ends: the next bracket outside a string."""
        text = self.text
        # Like an item, stray text never runs across the next item's signature.
        bound = min(self._anchor_at_or_after(pos + 1), self.n)
        end = pos
        while True:
            self.steps += 1
            end = self._skip(end, bound)
            if end >= bound or text[end] != '"':
                break
            after, kind = self._lenient_string(end, bound)
            end = bound if kind is _CUT else after if kind is _STRING else end + 1
        return max(pos + 1, end)

    def _inner_goes_on(self, closer: int, inner: str) -> bool:
        """After a mismatched closer: does the open inner container visibly continue?

        ``["a"}, "b"]``: a comma then another array element, so the ``}`` was stray.
        ``["a", "b"}, {...``: a comma then an object, so the ``]`` was missing.
        A ``]`` that meets an open object always closes it (a ``}`` was missing).
        """
        text, n = self.text, self.n
        pos = lexis.skip_ws(text, closer + 1)
        if pos >= n or text[pos] != ",":
            return False
        pos = lexis.skip_ws(text, pos + 1)
        if pos >= n:
            return False
        # Only an array visibly goes on. After `]` met an open object, a member could
        # belong to either object, and a missing `}` is far likelier than a stray `]`.
        member = text[pos] == '"' and self._is_member(pos)
        return inner == "[" and text[pos] != "{" and not member

    def _starts_another_item(self, anchor: int, stack: list[str], start: int) -> bool:
        """Is this signature, met as a bracket inside the item opening at ``start``, a
        new item?

        Yes where the grammar allows no value there (an object is open and the ``{``
        does not follow a ``:``); directly inside an array-shaped candidate, when the
        list's items are objects (that candidate is a damaged item already), unless
        that array is well formed (then it is one value, as a strict reading has it);
        and in laid-out output where it opens its own line no deeper than the list's
        items do: a nested object would be indented further.
        """
        if stack[-1] == "{" and self._prev_char(anchor) != ":":
            return True
        if stack == ["["] and not self._well_formed_array(start):
            return True
        indent = self._line_indent(anchor)
        return (
            self._items_indent is not None and indent is not None and indent <= self._items_indent
        )

    def _well_formed_array(self, start: int) -> bool:
        """Whether the array opening at ``start`` closes well formed, no dead-quote
        region inside it: asked once per array-shaped candidate, so the work stays
        linear."""
        known = self._arrays_checked.get(start)
        if known is None:
            # A check that fails may have read to the end of the text: charged that much,
            # so that a chain of unclosed arrays costs linear work (then they are cut).
            if self._array_budget < self.n - start:
                known = False
            else:
                matched = speedups.match_container(self.text, start, self.n)
                self._array_budget -= (self.n if matched is None else matched[0]) - start
                known = matched is not None and not self._dead_overlaps(start, matched[0])
            self._arrays_checked[start] = known
        return known

    def _line_indent(self, pos: int) -> int | None:
        """The indentation of ``pos`` if only spaces or tabs precede it on its line."""
        text = self.text
        back = pos
        while back > 0 and text[back - 1] in " \t":
            back -= 1
        if back == 0 or text[back - 1] in "\r\n":
            return pos - back
        return None

    def _list_goes_on(self, bracket: int) -> bool:
        """Is this ``]`` between items not where the list can end?

        Only asked while item signatures lie ahead. In laid-out output the list's
        own ``]`` starts its line, shallower than the items. Otherwise a list ends
        at the end of the text (a bare array) or before ``}`` or ``, "key":``
        (inside an envelope). Anything else means the ``]`` came from a damaged item.
        """
        if self._anchor_at_or_after(bracket) > self.n:
            return False
        if self._items_indent is not None:
            indent = self._line_indent(bracket)
            if indent is None or indent >= self._items_indent:
                return True  # the list's own `]` opens its line, shallower than its items
        text, n = self.text, self.n
        nxt = lexis.skip_ws(text, bracket + 1)
        if not self.path:
            return nxt < n
        if nxt < n and text[nxt] == "}":
            return False
        if nxt < n and text[nxt] == ",":
            member = lexis.skip_ws(text, nxt + 1)
            return not (member < n and text[member] == '"' and self._is_member(member))
        return True

    def _item_follows(self, pos: int) -> bool:
        """After a closer: does an object start next? Then the closer was stray.

        Looks past one comma and at most three more stray closers (``]}, {``): a bound,
        so that a long run of closers costs linear work.
        """
        text, n = self.text, self.n
        pos = lexis.skip_ws(text, pos)
        for _ in range(3):
            if pos < n and text[pos] in "}]":
                pos = lexis.skip_ws(text, pos + 1)
        if pos < n and text[pos] == ",":
            pos = lexis.skip_ws(text, pos + 1)
        return pos < n and text[pos] == "{"

    def _next_char(self, pos: int) -> str:
        pos = lexis.skip_ws(self.text, pos)
        return self.text[pos] if pos < self.n else ""

    def _prev_char(self, pos: int) -> str:
        pos = lexis.last_non_ws(self.text, pos)
        return self.text[pos] if pos >= 0 else ""

    def _anomaly(self, kind: AnomalyKind, start: int, end: int) -> None:
        self.anomalies.append(Anomaly(kind=kind, span=Span(start=start, end=end)))


def _trim_end(text: str, start: int, end: int) -> int:
    while end > start + 1 and text[end - 1] in " \t\n\r,":
        end -= 1
    return end


def _decode_key(raw: str) -> str:
    """The key a well-formed string ``raw`` (quotes included) spells."""
    if "\\" not in raw:
        return raw[1:-1]  # no escape: the text between the quotes is the key
    decoded: str = json.loads(raw)
    return decoded


def _preview(token: str, limit: int = 40) -> str:
    return repr(token if len(token) <= limit else token[:limit] + "...")
