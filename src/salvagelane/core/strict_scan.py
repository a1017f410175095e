"""The scan of a report that is one strict JSON document, taken from one compiled pass.

Most model output is valid, and for valid output the scanner's recovery has nothing
to do. The compiled strict check, which proves a text is one RFC 8259 document with
unique keys, can note on the way where the items array at the path is, each element's
span and depth, and each envelope member (docs/adr/0016-strict-document-fast-path.md):
one pass then gives both the verdict and the scan. Its answer is the scanner's, and
the tests require that on every strict document they generate; any doubt (a document
not proven strict, a path it does not hold, no compiled pass) answers None, and the
scanner runs.
"""

from __future__ import annotations

from salvagelane.core import speedups
from salvagelane.core.records import Span, new_span
from salvagelane.core.scan_values import (
    Closure,
    EnvelopeField,
    ItemsPath,
    ScanResult,
    new_candidate,
)

__all__ = ["scan_strict"]


def scan_strict(text: str, items_path: ItemsPath) -> ScanResult | None:
    """What :func:`salvagelane.core.scanner.scan` finds in ``text``, when ``text`` is
    proven one strict JSON document holding a list at ``items_path``; else None."""
    strict_items = speedups.strict_items
    if strict_items is None:
        return None
    found = strict_items(text, items_path)
    if found is None:
        return None
    root_start, root_end, list_start, list_end, items, members = found
    closed = Closure.CLOSED
    candidates = tuple(
        new_candidate(k // 3, new_span(items[k], items[k + 1]), closed, items[k + 2], "", False)
        for k in range(0, len(items), 3)
    )
    # A member's key has no escape (the document would not be proven strict): the text
    # between its quotes is the key.
    envelope = tuple(
        EnvelopeField(
            path=(*items_path[: members[k]], text[members[k + 1] + 1 : members[k + 2] - 1]),
            span=new_span(members[k + 3], members[k + 4]),
            closure=closed,
            depth=members[k + 5],
        )
        for k in range(0, len(members), 6)
    )
    return ScanResult(
        items_path=items_path,
        root=Span(start=root_start, end=root_end),
        container=Span(start=list_start, end=list_end),
        container_closed=True,
        candidates=candidates,
        envelope=envelope,
        truncated=False,
        anomalies=(),
        steps=1 + len(candidates) + len(envelope),
    )
