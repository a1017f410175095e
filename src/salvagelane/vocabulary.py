"""The words the store, the executor, the scheduler and the command line share, defined once.

A bottom-layer module: it imports nothing of salvagelane, so the command line can
offer these values (``--status``) without importing the store. Each closed set of words
is a StrEnum (like rq's ``JobStatus``): a member is the string the database stores, so
it compares equal to it, formats as it and is written as it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum


class Trigger(StrEnum):
    """What started a run."""

    MANUAL = "manual"
    SCHEDULE = "schedule"
    CATCH_UP = "catch_up"
    REPLAY = "replay"
    BACKFILL = "backfill"
    """A past fire run by ``salvagelane backfill``: it has a fire time, but it is not the
    schedule running (not a scheduled run for the clean streak, the gate or the fire lag)."""


class RunStatus(StrEnum):
    """Where a run stands. ``running`` until it ends, then one of the others."""

    QUEUED = "queued"
    """Claimed by a ``serve --dispatch queue`` leader and waiting in the task queue for a
    ``salvagelane worker`` (docs/adr/0013); a worker takes it by making it ``running``."""
    RUNNING = "running"
    OK = "ok"
    PARTIAL = "partial"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    MISSED = "missed"
    """A scheduled fire that was never run (no node was up, or it was too late to catch
    up); its row has trigger ``schedule``, ``finished_at`` and an ``error`` saying when it
    should have fired and why it was not run."""
    CANCELLED = "cancelled"
    """Stopped by ``salvagelane runs cancel``: before a worker took it (queued), or at the
    running run's next check point (its raw outputs so far are kept)."""


FINAL_RUN_STATUSES = frozenset(
    {RunStatus.OK, RunStatus.PARTIAL, RunStatus.FAILED, RunStatus.INTERRUPTED}
)
"""The statuses a run that was started ends with."""
FAILURE_STATUSES = frozenset({RunStatus.FAILED, RunStatus.INTERRUPTED})
"""The statuses of a started run that ended without a report."""


class NotifyOn(StrEnum):
    """What a notification is sent on (a definition's ``notify[].on``)."""

    FAILED = "failed"
    PARTIAL = "partial"
    MISSED = "missed"
    INTERRUPTED = "interrupted"
    STREAK_BROKEN = "streak_broken"
    STREAK_RESTORED = "streak_restored"


class OutputCut(StrEnum):
    """Why a run's chosen output counts as cut off: no review undoes it."""

    TRUNCATED = "truncated"
    STREAM = "stream"
    """The stream broke off."""
    ENVELOPE = "envelope"
    """Part of the envelope (the document around the items) was damaged."""


class ReviewStatus(StrEnum):
    """Where a quarantined item stands in review."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    """A reject of an attempt that was not chosen for its run's report: never reviewed."""
    REASKED = "reasked"
    """Mended by a follow-up request (``retry.on: [quarantined]``): the re-asked item is
    in the report, marked ``reask``; the record's ``resolution`` links to it."""


OUT_OF_THE_LANE = (ReviewStatus.SUPERSEDED, ReviewStatus.REASKED)
"""Records that never enter review: listed and counted only when asked for by status."""


class ReviewAction(StrEnum):
    """What an entry of a quarantined item's audit trail records."""

    APPROVE = "approve"
    APPROVE_REFUSED = "approve_refused"
    REJECT = "reject"
    NOTE = "note"
    BULK_REJECT = "bulk_reject"


class DeliveryStatus(StrEnum):
    """Where a delivery of a report to one sink stands."""

    PENDING = "pending"
    """Written with the report, not delivered yet (a try may be under way)."""
    DELIVERED = "delivered"
    FAILED = "failed"
    """The latest try failed (``next_attempt_at`` says when the next is due, None when it
    was given up)."""


OPEN_DELIVERY_STATUSES = (DeliveryStatus.PENDING, DeliveryStatus.FAILED)
"""The statuses of a delivery that has not delivered its report (yet)."""


class ItemOrigin(StrEnum):
    """Who put an item into a report."""

    MODEL = "model"
    OPERATOR = "operator"
    """Approved from the quarantine: never passed off as the model's."""
    REASK = "reask"
    """Given back by a follow-up request for a rejected item: the model's, but not of the
    report's own answer (its span is in ``attempt``'s output)."""


Clock = Callable[[], datetime]
"""Where the I/O shell reads the time (tests pass a fixed or stepping one)."""


def utc_now() -> datetime:
    """The default :data:`Clock`: the current time, timezone-aware in UTC."""
    return datetime.now(UTC)
