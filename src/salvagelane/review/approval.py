"""Approving a quarantined item: the operator's corrected item, judged by the guardrails.

The workflow behind ``salvagelane quarantine approve``. The corrected JSON goes through
the same guardrails as model output (the core's ``check_item``), with the version of the
definition the item's run was made with, or the current one with ``use_current``. An
item that passes is appended to the run's report and the quarantined one is marked
approved; one that does not changes nothing but the audit trail. Either way the answer
is a value (:class:`Approved` or :class:`Refused`) for the caller to show.

The store records (:mod:`salvagelane.store.quarantine_lane`); this module decides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from salvagelane.core import AcceptedItem, QuarantinedItem, SalvagePolicy, check_item
from salvagelane.core.records import CorrectionSignal
from salvagelane.definitions import salvage_policy_for
from salvagelane.errors import InputError, not_utf8
from salvagelane.events import EventStream, logged_stream
from salvagelane.events.kinds import ItemReviewed, ItemsRejected
from salvagelane.review.run_definitions import choose_definition
from salvagelane.store import (
    ApprovalView,
    BulkSelection,
    InputDigest,
    QuarantineDetail,
    QuarantineFilter,
    QuarantineView,
    ReportItemRecord,
    Store,
)
from salvagelane.store.quarantine_lane import INPUT_HEAD_BYTES, require_pending, require_report
from salvagelane.vocabulary import ItemOrigin

_CHUNK = 1 << 16


@dataclass(frozen=True, kw_only=True, slots=True)
class OperatorInput:
    """The operator's corrected item as read: its ``text`` (None when it is over the byte
    cap, so it was never held in memory whole) and its bounded digest for the audit
    trail."""

    text: str | None
    digest: InputDigest


@dataclass(frozen=True, kw_only=True, slots=True)
class Approved:
    """The item passed the guardrails: ``approval`` says where it went in the report."""

    approval: ApprovalView


@dataclass(frozen=True, kw_only=True, slots=True)
class Refused:
    """The guardrails refused the corrected item (``reason``, ``signal``): only the audit
    trail changed."""

    quarantine_id: int
    reason: str
    signal: CorrectionSignal

    @property
    def message(self) -> str:
        return self.signal.message(self.reason)

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, **self.signal.to_json(), "message": self.message}


ReadCorrected = Callable[[QuarantineDetail, int], OperatorInput]
"""Reads the operator's corrected item for a pending item (its detail, to start an editor
from) under a byte cap: :func:`read_bounded` on a file, stdin or an editor's text."""


def read_bounded(stream: BinaryIO, cap: int) -> OperatorInput:
    """Read ``stream`` to its end, hashing all of it but holding at most ``cap`` bytes:
    an input over the cap comes back without text, only its size, hash and first bytes.
    InputError when what is held is not UTF-8 text."""
    digest = hashlib.sha256()
    kept = bytearray()
    size = 0
    over = False
    while chunk := stream.read(_CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if not over:
            kept += chunk
            if len(kept) > cap:
                over = True
                del kept[INPUT_HEAD_BYTES:]
    head = bytes(kept[:INPUT_HEAD_BYTES])
    text = None
    if not over:
        try:
            text = bytes(kept).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text: {not_utf8(exc)}") from exc
    return OperatorInput(
        text=text,
        digest=InputDigest(
            size=size,
            sha256=digest.hexdigest(),
            head=head.decode("utf-8", "replace"),
            clipped=size > len(head),
        ),
    )


def approve_quarantined(
    store: Store,
    quarantine_id: int,
    *,
    read_corrected: ReadCorrected,
    instructions_dir: Path,
    use_current: bool,
    actor: str,
    note: str | None,
    tell: Callable[[str], None] = lambda text: None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    events: EventStream | None = None,
) -> Approved | Refused:
    """Approve quarantined item ``quarantine_id`` with the corrected item
    ``read_corrected`` reads, if the guardrails take it.

    The item must be pending and its run must have a report (ReviewStateError, before
    anything is read: the operator spends no time in an editor for nothing). The
    definition is the run's stored version, or with ``use_current`` the one in
    ``instructions_dir``; ``tell`` hears what that changed. The audit trail records
    ``actor`` and ``note`` either way, and ``events`` hears the decision.
    """
    stream = events or logged_stream()
    detail = store.quarantine.get_quarantine(quarantine_id)
    require_pending(detail, "approve")
    require_report(detail)
    assert detail.report_items is not None  # require_report
    # The stored id is data: looked up among the operator's definitions, never a path.
    chosen = choose_definition(
        store,
        detail.run_id,
        detail.instruction_id,
        instructions_dir,
        use_current=use_current,
        where=f"quarantined item #{quarantine_id}: instruction",
    )
    if chosen.note is not None:
        tell(chosen.note)
    policy = salvage_policy_for(chosen.instruction, trusted=chosen.trusted)
    given = read_corrected(detail, policy.guardrails.max_bytes)
    verdict = _judge(given, detail, policy)
    now = clock()
    if isinstance(verdict, Refused):
        store.quarantine.record_refused_approval(
            quarantine_id,
            received=given.digest,
            error=verdict.to_json(),
            actor=actor,
            note=note,
            now=now,
        )
        stream.publish(
            ItemReviewed(
                quarantine_id=quarantine_id, run_id=detail.run_id, action="refused", actor=actor
            )
        )
        return verdict
    approval = store.quarantine.approve_quarantined(
        quarantine_id,
        item=ReportItemRecord(
            source_index=detail.source_index,
            data=verdict.data,
            span_start=None,  # the operator's text, not a span of the model's output
            span_end=None,
            coercions=[c.to_json() for c in verdict.coercions] or None,
            origin=ItemOrigin.OPERATOR,
            repairs=[r.to_json() for r in verdict.repairs] or None,
        ),
        expected_items=detail.report_items,
        actor=actor,
        note=note,
        now=now,
        audit={
            "definition_sha256": chosen.definition_sha256,
            "definition_version": chosen.version,
            "use_current": use_current,
        },
    )
    stream.publish(
        ItemReviewed(
            quarantine_id=quarantine_id, run_id=detail.run_id, action="approved", actor=actor
        )
    )
    return Approved(approval=approval)


def _judge(
    given: OperatorInput, detail: QuarantineDetail, policy: SalvagePolicy
) -> AcceptedItem | Refused:
    """The guardrails' verdict on the operator's item, as on a model's: an input over the
    byte cap is refused unread, as model output over it is never scanned."""
    cap = policy.guardrails.max_bytes
    if given.text is None:
        signal = CorrectionSignal(
            code="oversize",
            path="$",
            expected=f"at most {cap} bytes (the instruction's max_output_bytes)",
            received=f"{given.digest.size} bytes",
            detail=(
                f"not parsed; the audit trail keeps its size, SHA-256 and first "
                f"{INPUT_HEAD_BYTES} bytes"
            ),
        )
        return Refused(quarantine_id=detail.id, reason="oversize", signal=signal)
    assert detail.report_items is not None  # require_report
    verdict = check_item(
        given.text, policy, kept=detail.report_items, index=detail.source_index or 0
    )
    if isinstance(verdict, QuarantinedItem):
        return Refused(quarantine_id=detail.id, reason=str(verdict.reason), signal=verdict.error)
    return verdict


def reject_quarantined(
    store: Store,
    quarantine_id: int,
    *,
    actor: str,
    note: str,
    now: datetime,
    events: EventStream | None = None,
) -> QuarantineView:
    """Reject pending item ``quarantine_id`` (``quarantine reject``, the page's reject):
    it stays out of the report; the audit trail and ``events`` record who and why."""
    held = store.quarantine.reject_quarantined(quarantine_id, actor=actor, note=note, now=now)
    (events or logged_stream()).publish(
        ItemReviewed(quarantine_id=held.id, run_id=held.run_id, action="rejected", actor=actor)
    )
    return held


def reject_matching(
    store: Store,
    pending: QuarantineFilter,
    *,
    actor: str,
    note: str,
    now: datetime,
    confirmed: BulkSelection,
    events: EventStream | None = None,
) -> list[int]:
    """Reject the pending items ``pending`` matches, exactly those ``confirmed`` counted
    (ReviewStateError when they changed since); returns their ids."""
    rejected = store.quarantine.reject_matching(
        pending, actor=actor, note=note, now=now, confirmed=confirmed
    )
    if rejected:
        (events or logged_stream()).publish(
            ItemsRejected(quarantine_ids=tuple(rejected), actor=actor)
        )
    return rejected
