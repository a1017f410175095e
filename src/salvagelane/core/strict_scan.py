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

import re

from salvagelane.core import lexis, speedups
from salvagelane.core.records import Span, new_span
from salvagelane.core.scan_values import (
    Anomaly,
    AnomalyKind,
    Closure,
    ItemsPath,
    ScanResult,
    new_candidate,
    new_envelope_field,
    new_scan_result,
)

__all__ = ["scan_strict", "scan_wrapped"]

# What the text around a wrapped report may not hold: anything the lenient scan could
# take for structure (a root, an object outside the report, a string).
_STRUCTURE = re.compile(r'[{}\[\]"]')


def scan_strict(
    text: str,
    items_path: ItemsPath,
    *,
    offset: int = 0,
    anomalies: tuple[Anomaly, ...] = (),
) -> ScanResult | None:
    """What :func:`salvagelane.core.scanner.scan` finds in ``text``, when ``text`` is
    proven one strict JSON document holding a list at ``items_path``; else None.
    ``offset`` is added to every span: where ``text`` starts in a longer output; the
    result carries ``anomalies`` (the text around it)."""
    strict_items = speedups.strict_items
    if strict_items is None:
        return None
    if offset:
        # Spaces in front, which a strict document may have: every span comes out in
        # the output's own offsets, made by the compiled builder (a Python closure adding
        # the offset cost as much as the strict pass itself on a wrapped report).
        text = " " * offset + text
    span = new_span
    found = strict_items(text, items_path, span, new_candidate, Closure.CLOSED)
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
                span(members[k + 3], members[k + 4]),
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
        span(root_start, root_end),
        span(list_start, list_end),
        True,  # container_closed
        candidates,
        envelope,
        False,  # truncated
        anomalies,
        1 + len(candidates) + len(envelope),  # steps
    )


def scan_wrapped(text: str, items_path: ItemsPath) -> tuple[ScanResult, Span] | None:
    """A strict report wrapped in prose or a code fence, read by the strict pass: what
    the scanner finds in ``text``, and the span of the report; else None.

    Only when the text around the report holds nothing the scanner could take for
    structure (no bracket, brace or quote): the scanner's answer is then the report's
    own, shifted, with the leading and trailing text noted.
    """
    opener, closer = ("{", "}") if items_path else ("[", "]")
    start = text.find(opener)
    end = text.rfind(closer) + 1
    if start < 0 or end <= start:
        return None
    before, after = text[:start], text[end:]
    if not (before.strip(lexis.WHITESPACE) or after.strip(lexis.WHITESPACE)):
        return None  # not wrapped: scan_strict's case
    if _STRUCTURE.search(before) or _STRUCTURE.search(after):
        return None
    anomalies = []
    if before.strip(lexis.WHITESPACE):
        anomalies.append(Anomaly(kind=AnomalyKind.LEADING_TEXT, span=new_span(0, start)))
    if after.strip(lexis.WHITESPACE):
        anomalies.append(Anomaly(kind=AnomalyKind.TRAILING_TEXT, span=new_span(end, len(text))))
    inner = scan_strict(text[start:end], items_path, offset=start, anomalies=tuple(anomalies))
    if inner is None:
        return None
    return inner, new_span(start, end)
