"""Asking again for the rejected items only, and joining the answer to the report.

Pure. A run whose answer holds good items and a few rejected ones may send one
follow-up request (definition ``retry.on: [quarantined]``) that lists only the rejected
items, each with its number and correction signal, and asks for those items again, in
that order. The answer is salvaged with the same scanner and guardrails as any answer;
:func:`merge_reask` then pairs its candidates with the asked items by position: the
first candidate of the answer is the first asked item, and so on. An accepted answer
takes its asked item's place in the report, marked as re-asked; a rejected or missing
one leaves the original quarantined, with both signals. An answer with another number
of items than asked is not paired at all: which is which cannot be told, so nothing of
it is joined (docs/adr/0023-per-item-reask.md).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from salvagelane.core.canonical import canonical_sha256
from salvagelane.core.numbering import item_label, item_number
from salvagelane.core.records import (
    AcceptedItem,
    QuarantinedItem,
    Reason,
    SalvageResult,
)

REASKABLE = frozenset(
    {
        Reason.TOO_DEEP,
        Reason.TOO_LONG,
        Reason.TRUNCATED,
        Reason.MALFORMED,
        Reason.NOT_OBJECT,
        Reason.SCHEMA,
        Reason.ALLOW_LIST,
    }
)
"""The reasons a re-ask may name. Never ``over_limit`` (the item cap, not the item, was
the problem: asking again would break the cap again) nor ``oversize`` (nothing was read)."""

DEFAULT_REASONS = REASKABLE - {Reason.TRUNCATED}
"""The reasons re-asked when a definition names none: a truncated item is the whole
answer's problem, which ``retry.on: [truncated]`` answers with a bigger budget."""

MAX_ITEM_CHARS = 2000
"""How much of a rejected item's text the follow-up quotes (the model cannot fix an item
it cannot see; the quote is bounded so a flood is not sent back)."""

MAX_ASKED = 20
"""At most this many items are re-asked in one follow-up; the rest stay quarantined."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Reasked:
    """An asked item the follow-up answer gave back and the guardrails accepted.

    ``asked`` is the original item's index (the slot it fills in the report); ``item``
    is the answer's candidate, its ``index`` and ``span`` in the follow-up's output."""

    asked: int
    item: AcceptedItem


@dataclass(frozen=True, kw_only=True, slots=True)
class StillRejected:
    """An asked item the follow-up did not mend: ``answer`` is its counterpart's
    rejection in the follow-up's output, None when the answer held no counterpart
    (``unanswered`` says why)."""

    original: QuarantinedItem
    answer: QuarantinedItem | None = None
    unanswered: str | None = None

    def signals(self) -> list[dict[str, str]]:
        """The follow-up's signal, as stored beside the original's."""
        if self.answer is not None:
            return [
                {
                    "reason": str(self.answer.reason),
                    **self.answer.error.to_json(),
                    "message": self.answer.message,
                }
            ]
        return [{"reason": "unanswered", "message": self.unanswered or "no answer"}]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReaskMerge:
    """The report's result once the follow-up is joined to it.

    ``result`` is the original result with the re-asked items among its items (in the
    original order, each at its asked index) and only the still-rejected items in its
    quarantine: its status and counts are the report's. ``extra`` lists the answer's
    candidates past the asked ones (their indices in the follow-up's output)."""

    result: SalvageResult
    asked: tuple[int, ...]
    accepted: tuple[Reasked, ...]
    still: tuple[StillRejected, ...]
    extra: tuple[int, ...] = ()

    def counts(self) -> dict[str, int]:
        return {
            "asked": len(self.asked),
            "accepted": len(self.accepted),
            "still_quarantined": len(self.still),
            "extra": len(self.extra),
        }

    def reasked_index(self, index: int) -> Reasked | None:
        return next((r for r in self.accepted if r.asked == index), None)


def follow_up_label(request: Any) -> str | None:
    """``follow-up for item(s) 7, 9 of #1`` for an attempt whose stored request asked
    again for rejected items (its ``reask``), None for any other attempt."""
    asked = request.get("reask") if isinstance(request, Mapping) else None
    if not isinstance(asked, Mapping):
        return None
    indices = [i for i in asked.get("items") or () if isinstance(i, int) and i >= 0]
    numbers = ", ".join(str(item_number(i)) for i in indices)
    return f"follow-up for item(s) {numbers} of #{asked.get('of_attempt')}"


def items_to_reask(
    result: SalvageResult, *, reasons: Collection[Reason] = DEFAULT_REASONS
) -> tuple[QuarantinedItem, ...]:
    """The rejected items of ``result`` a follow-up asks for, in output order: those
    with an index and a reason in ``reasons`` (never over_limit or oversize). None when
    nothing was accepted (the whole answer failed: that is a whole retry's business) or
    when every such item is ``truncated`` (the cut is the problem, not the items)."""
    if not result.items:
        return ()
    chosen = tuple(
        item
        for item in result.quarantined
        if item.index is not None and item.reason in reasons and item.reason in REASKABLE
    )
    if all(item.reason is Reason.TRUNCATED for item in chosen):
        return ()
    return chosen[:MAX_ASKED]


def reask_prompt(asked: Sequence[QuarantinedItem], *, raw: str) -> str:
    """The note that follows the user prompt in the follow-up request: which items were
    rejected, why (path, expected, received), their text as the model wrote it (quoted
    as a JSON string, bounded), and that only those items are wanted, in that order."""
    count = len(asked)
    lines = [
        f"Your previous answer was accepted except for {count} item(s), listed below with "
        "what was wrong. Answer again with one JSON report of the same shape whose items "
        f"list holds exactly {count} item(s): these items, corrected, in this order. Do "
        "not repeat the other items; they were accepted.",
    ]
    for position, item in enumerate(asked, start=1):
        assert item.index is not None
        signal = item.error
        lines.append(
            f"{position}. {item_label(item.index)} of your previous answer: {item.reason} at "
            f"{signal.path}: expected {signal.expected}, received {_short(signal.received)}"
        )
        text = item.span.text(raw)
        if len(text) > MAX_ITEM_CHARS:
            text = text[:MAX_ITEM_CHARS] + " [cut]"
        lines.append(f"   its text was (as a JSON string): {json.dumps(text)}")
    return "\n".join(lines)


def merge_reask(
    base: SalvageResult,
    asked: Sequence[QuarantinedItem | None],
    answer: SalvageResult | None,
    *,
    unanswered: str = "the follow-up request failed",
) -> ReaskMerge:
    """Join the follow-up's ``answer`` (None: the call failed) to ``base``: see the
    module docstring. ``asked`` are the items the follow-up listed, in its order; None
    holds the place of one that ``base`` no longer rejects (a replay with another
    definition), whose answer is not joined."""
    by_position: dict[int, AcceptedItem | QuarantinedItem] = {}
    extra: list[int] = []
    no_pair = unanswered if answer is None else "the follow-up answer held no such item"
    whole: QuarantinedItem | None = None
    if answer is not None:
        candidates: list[AcceptedItem | QuarantinedItem] = [*answer.items, *answer.quarantined]
        for candidate in candidates:
            if candidate.index is None:
                whole = candidate  # oversize, or no list of items: the whole answer
            else:
                by_position[candidate.index] = candidate
        counted = len(by_position) + answer.folded_total
        if whole is None and counted != len(asked):
            # Another count than asked: which answer is which item cannot be told (a
            # model that repeats the whole report would pass its first item off as the
            # asked one), so none is joined.
            extra = sorted(by_position)
            by_position = {}
            no_pair = (
                f"the follow-up answered {counted} item(s) for the {len(asked)} asked: which "
                "is which cannot be told, so none was joined"
            )
    kept = {canonical_sha256(item.data) for item in base.items}
    accepted: list[Reasked] = []
    still: list[StillRejected] = []
    for position, original in enumerate(asked):
        if original is None or original.index is None:
            continue
        found = by_position.get(position)
        if isinstance(found, AcceptedItem) and canonical_sha256(found.data) in kept:
            repeated = "the follow-up answered with an item the report already holds"
            still.append(StillRejected(original=original, unanswered=repeated))
        elif isinstance(found, AcceptedItem):
            accepted.append(Reasked(asked=original.index, item=found))
        elif isinstance(found, QuarantinedItem):
            still.append(StillRejected(original=original, answer=found))
        elif whole is not None:
            still.append(StillRejected(original=original, answer=whole))
        else:
            still.append(StillRejected(original=original, unanswered=no_pair))
    mended = {r.asked for r in accepted}
    items = sorted(
        (
            *base.items,
            *(replace(r.item, index=r.asked) for r in accepted),
        ),
        key=lambda item: item.index,
    )
    result = replace(
        base,
        items=tuple(items),
        quarantined=tuple(q for q in base.quarantined if q.index not in mended),
    )
    return ReaskMerge(
        result=result,
        asked=tuple(q.index for q in asked if q is not None and q.index is not None),
        accepted=tuple(accepted),
        still=tuple(still),
        extra=tuple(sorted(extra)),
    )


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
