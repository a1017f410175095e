"""Placement: an item candidate is accepted only where it is certainly at the items' depth.

Damage that puts quotes out of step (a dropped or extra quote, a lost escape) can end
an item early in the scanner's reading: the rest of that item, nested objects with the
items' own keys among them, then lies between the items and looks like more items.
A sub-finding of a damaged finding accepted as a ranked finding is a wrong item in the
report, worse than a lost one (ADR 0002, "Placement").

The check reads the brackets a second way, ignoring quotes altogether (the *raw*
reading), from each candidate that may be out of step: one that did not close cleanly,
or whose raw brackets do not balance. While the raw reading keeps that candidate open,
the candidates after it form a *run*. If text between the items then closes what the
candidate left open (stray ``]``/``}`` the scanner stepped over, or the list's own
``]`` followed by more items), the raw reading was the right one: the run's candidates
were nested in the damaged one and are quarantined, never accepted. A run that the
list simply ends keeps its items: the imbalance was brackets inside strings.

Linear: each character is counted once, with ``str.count`` over spans and gaps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from salvagelane.core import lexis
from salvagelane.core.scan_values import Candidate, Closure

_OPENERS = ("{", "[")
_CLOSERS = ("}", "]")


def raw_balance(text: str, start: int, end: int) -> int:
    """Openers minus closers in ``text[start:end]``, quotes ignored."""
    if end <= start:
        return 0
    opened = sum(text.count(c, start, end) for c in _OPENERS)
    return opened - sum(text.count(c, start, end) for c in _CLOSERS)


def _suspect(text: str, candidate: Candidate) -> bool:
    if candidate.closure is Closure.TRUNCATED:
        return False  # nothing follows a cut: there is no run to place
    if candidate.stray or candidate.closure is not Closure.CLOSED:
        return True
    # Closed with brackets that do not balance quote-blind: brackets in its strings
    # (`"{": null`) if it is JSON, which costs nothing; quotes out of step if not.
    return raw_balance(text, candidate.span.start, candidate.span.end) != 0 and not _is_json(
        candidate.span.text(text)
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ListBounds:
    """Where the scanner's reading put the items list and the report around it."""

    start: int  # the list's `[`
    close: int  # the list's `]`, or the end of the text if it never closed
    first_end: int  # where the list first ended: before the report's end if items went on
    report_end: int  # the end of the report (root object or array)
    enclosing: int  # the list and the objects around it: their closers end the report


def _closers_after(text: str, end: int, bounds: ListBounds) -> int:
    """Closers after the last candidate of a run beyond those the report needs.

    In the list (up to its `]`) every closer counts, and so does any after the
    report; the report's own closing text in between is read as the scanner read it,
    so a bracket in an envelope string (`"summary": "}]"`) counts for nothing.
    """
    if end >= bounds.report_end:  # items after the report: the list's real end is still due
        return _outside_balance(text, end, len(text)) + bounds.enclosing
    return raw_balance(text, end, bounds.close) + _outside_balance(
        text, max(end, bounds.report_end), len(text)
    )


_STRING = re.compile('"' + lexis.STRING_BODY + '"')


def _outside_balance(text: str, start: int, end: int) -> int:
    """The balance of text after the report: the lower of the quote-blind count and the
    count outside well-formed strings, so that openers in strings (`"tags": ["{"]`)
    cannot hide closers either way."""
    if end <= start:
        return 0
    outside = _STRING.sub("", text[start:end])
    return min(raw_balance(text, start, end), raw_balance(outside, 0, len(outside)))


def _gap_balance(text: str, start: int, end: int, bounds: ListBounds) -> int:
    """The raw balance of the text between two candidates.

    A gap that holds the end of the report (items went on after it) counts the report's
    own closing text as the scanner read it: the list's `]` and the closers of the
    objects around it, whatever brackets the envelope's strings hold (`"tags": ["{"]`).
    """
    if start <= bounds.first_end < bounds.report_end <= end:
        return (
            raw_balance(text, start, bounds.first_end)
            - bounds.enclosing
            + _outside_balance(text, bounds.report_end, end)
        )
    return raw_balance(text, start, end)


def place(text: str, candidates: Sequence[Candidate], bounds: ListBounds) -> tuple[Candidate, ...]:
    """Candidates with every one that cannot be placed at the items' depth marked BROKEN.

    ``candidates`` are in text order.
    """
    placed = list(candidates)
    _unplace_values(text, placed, bounds.start)
    _unplace_cut_short(text, placed)
    index = 0
    while index < len(placed):
        head = placed[index]
        index += 1
        if not _suspect(text, head):
            continue
        balance = raw_balance(text, head.span.start, head.span.end)
        if balance <= 0:
            if head.closure is Closure.BROKEN and not head.stray:
                _unplace_before_closers(text, placed, index, head, bounds)
            continue
        members: list[int] = []
        previous_end = head.span.end
        while index < len(placed) and balance > 0:
            candidate = placed[index]
            # A gap may hold the list's `]` when items went on after the report: that
            # `]` closed the damaged item, like a stray closer.
            gap = _gap_balance(text, previous_end, candidate.span.start, bounds)
            if gap < 0:
                _unplace(placed, members, head)  # closers of the damaged item follow them
            balance += gap
            if balance <= 0 or candidate.closure is Closure.TRUNCATED:
                break
            members.append(index)
            if candidate.closure is not Closure.CLOSED:
                # A closed candidate's brackets matched outside its strings: a bracket
                # inside one of them ("x}") is text, and counts for nothing.
                balance += raw_balance(text, candidate.span.start, candidate.span.end)
            previous_end = candidate.span.end
            index += 1
        else:
            if _closers_after(text, previous_end, bounds) < 0:
                _unplace(placed, members, head)
    _unplace_before_stray_closers(text, placed, bounds)
    return tuple(placed)


def _unplace_before_stray_closers(text: str, placed: list[Candidate], bounds: ListBounds) -> None:
    """Clean items that closers follow, after damage earlier in the list.

    The raw count cannot always tell (brackets inside strings, ``"x}"``, count too), but
    closers the scanner stepped over right after an item are the end of something that
    opened before it. Once an item before it is damaged, that something may be the
    damaged item: the clean items since the damage may all have been nested in it, and
    are quarantined. Without earlier damage, a stray closer after an item is a typo and
    the item keeps its place.
    """
    damaged = -1  # the latest damaged candidate so far
    parsed_up_to = 0  # candidates before this one were tried as JSON: each at most once
    for index, candidate in enumerate(placed):
        if candidate.stray or candidate.closure is not Closure.CLOSED:
            if candidate.closure is not Closure.TRUNCATED:
                damaged = index
            continue
        if index + 1 < len(placed):
            closers = _gap_balance(text, candidate.span.end, placed[index + 1].span.start, bounds)
        else:
            closers = _closers_after(text, candidate.span.end, bounds)
        if closers >= 0:
            continue
        # Quotes out of step can leave a damaged item that the scan read as closed:
        # it is damaged all the same if its text is not JSON.
        parsed_up_to = max(parsed_up_to, damaged + 1)
        while parsed_up_to < index:
            if not _is_json(placed[parsed_up_to].span.text(text)):
                damaged = parsed_up_to
            parsed_up_to += 1
        if damaged < 0:
            continue
        head = placed[damaged]
        for member in range(damaged + 1, index + 1):
            placed[member] = _unplaced(placed[member], head)
        damaged = index


def _is_json(span_text: str) -> bool:
    try:
        json.loads(span_text)
    except (ValueError, RecursionError):
        return False
    return True


def _unplace_before_closers(
    text: str, placed: list[Candidate], index: int, head: Candidate, bounds: ListBounds
) -> None:
    """After an item damaged out of step whose raw brackets seem to balance.

    Brackets inside its strings (``"x}"``) can hide containers it left open, so the
    balance proves nothing. Closers between the next items (stray ``]}`` the scanner
    stepped over) are then the damaged item's own: the clean items before them were
    nested in it. Only the clean run right after the item is looked at.
    """
    members: list[int] = []
    previous_end = head.span.end
    while index < len(placed):
        candidate = placed[index]
        if raw_balance(text, previous_end, candidate.span.start) < 0:
            break
        if candidate.closure is not Closure.CLOSED or raw_balance(
            text, candidate.span.start, candidate.span.end
        ):
            return  # damaged too: placed from its own reading
        members.append(index)
        previous_end = candidate.span.end
        index += 1
    else:
        if _closers_after(text, previous_end, bounds) >= 0:
            return
    _unplace(placed, members, head)


def _unplace(placed: list[Candidate], members: list[int], head: Candidate) -> None:
    for member in members:
        placed[member] = _unplaced(placed[member], head)
    members.clear()


def _unplace_values(text: str, placed: list[Candidate], list_start: int) -> None:
    """Candidates where only a nested value can stand: after a member's ``:``, or
    after a ``[`` that is not the list's own (and their siblings after a comma)."""
    in_array = False
    previous_end = -1
    for index, candidate in enumerate(placed):
        at = lexis.last_non_ws(text, candidate.span.start)
        before = text[at] if at >= 0 else ""
        sibling = in_array and not text[previous_end : candidate.span.start].strip(" \t\r\n,")
        in_array = sibling or (before == "[" and at != list_start)
        previous_end = candidate.span.end
        if before == ":" or in_array:
            placed[index] = _unplaced(placed[index], None)


def _unplace_cut_short(text: str, placed: list[Candidate]) -> None:
    """Items that stray text follows with no comma between: the item may have ended early.

    An extra quote can end an item's last string before its real end (``"x"}"}`` for
    ``"x}"}``, ``"ab"}c", "d": 1}`` for ``"ab}c", "d": 1}``): what the scan closes is
    valid JSON, but not the model's item, and the rest of it is the stray text after
    it, holding the string's other quote or the item's own closers. Stray text with
    neither (a word: ``{"a": 1} oops``) cannot be the rest of an item.
    """
    for index in range(len(placed) - 1):
        candidate, following = placed[index], placed[index + 1]
        # The rest of the item is stray text, or starts as a string of its own (`","`).
        if not (
            (following.stray or text.startswith('"', following.span.start))
            and candidate.closure is Closure.CLOSED
            and not candidate.stray
            and not text[candidate.span.end : following.span.start].strip(lexis.WHITESPACE)
        ):
            continue
        start, end = following.span.start, following.span.end
        if '"' in text[start:end] or raw_balance(text, start, end) < 0:
            placed[index] = replace(
                candidate,
                closure=Closure.BROKEN,
                defect=(
                    "may have ended early: text that is not an item follows it "
                    f"at offset {following.span.start}, with no comma between"
                ),
            )


def _unplaced(candidate: Candidate, damaged: Candidate | None) -> Candidate:
    if candidate.closure is not Closure.CLOSED or candidate.stray:
        return candidate  # quarantined anyway, with its own defect
    return replace(
        candidate,
        closure=Closure.BROKEN,
        defect=(
            "cannot be placed at the items' depth: it stands where only a nested value can"
            if damaged is None
            else "cannot be placed at the items' depth: it may be nested in the damaged "
            f"item at offset {damaged.span.start}"
        ),
    )
