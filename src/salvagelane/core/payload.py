"""The report payload a sink receives: one shape, whoever builds it.

The store builds it from a stored report (:meth:`Store.get_report_payload`), and
``salvagelane try`` from a salvage it stores nowhere, to show what each sink would
receive. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class PayloadItem(Protocol):
    """A kept item as the payload carries it."""

    @property
    def data(self) -> Any: ...

    @property
    def origin(self) -> str: ...

    @property
    def repairs(self) -> Sequence[Any] | None: ...


def report_payload(
    *,
    run_id: str | None,
    instruction: str,
    status: str,
    partial: bool,
    finish_reason: str | None,
    counts: Mapping[str, Any],
    envelope: Any,
    items: Sequence[PayloadItem],
) -> dict[str, Any]:
    """What a consumer of a report receives: the envelope and the kept items in order.
    ``run_id`` is None only for a dry run, which has no run."""
    payload: dict[str, Any] = {
        "run_id": run_id,
        "instruction": instruction,
        "status": status,
        "partial": partial,
        "finish_reason": finish_reason,
        "counts": counts,
        "envelope": envelope,
        "items": [item.data for item in items],
        # Parallel to items: an operator's correction is never passed off as the
        # model's, even in a report whose status an approval made ok.
        "item_origins": [item.origin for item in items],
    }
    if any(item.repairs for item in items):
        # Nor is a repaired item passed off as written; only a report holding one
        # carries the list, so every other payload is as it was.
        payload["item_repairs"] = [item.repairs or [] for item in items]
    return payload
