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
from salvagelane.core.records import new_span
from salvagelane.core.scan_values import (
    Closure,
    ItemsPath,
    ScanResult,
    new_candidate,
    new_envelope_field,
    new_scan_result,
)

__all__ = ["scan_strict"]


def scan_strict(text: str, items_path: ItemsPath) -> ScanResult | None:
    """What :func:`salvagelane.core.scanner.scan` finds in ``text``, when ``text`` is
    proven one strict JSON document holding a list at ``items_path``; else None."""
    strict_items = speedups.strict_items
    if strict_items is None:
        return None
    found = strict_items(text, items_path, new_span, new_candidate, Closure.CLOSED)
    if found is None:
        return None
    root_start, root_end, list_start, list_end, candidates, members = found
    closed = Closure.CLOSED
    # A member's key has no escape (the document would not be proven strict): the text
    # between its quotes is the key.
    envelope = tuple(
        [
            new_envelope_field(
                (*items_path[: members[k]], text[members[k + 1] + 1 : members[k + 2] - 1]),
                new_span(members[k + 3], members[k + 4]),
                closed,
                members[k + 5],
                "",
                "",
            )
            for k in range(0, len(members), 6)
        ]
    )
    return new_scan_result(
        items_path,
        new_span(root_start, root_end),
        new_span(list_start, list_end),
        True,  # container_closed
        candidates,
        envelope,
        False,  # truncated
        (),  # anomalies
        1 + len(candidates) + len(envelope),  # steps
    )
