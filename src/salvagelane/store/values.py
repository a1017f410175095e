"""Values that cross the store boundary: what callers write, and what reads return.

All are frozen, keyword-only, slotted dataclasses. Reads return these (never ORM
objects), so callers never hold a session or trigger a lazy load after it closed.
JSON columns come back as plain ``dict``/``list`` values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from salvagelane.errors import NotFoundError
from salvagelane.vocabulary import (
    DeliveryStatus,
    ItemOrigin,
    OutputCut,
    ReviewAction,
    ReviewStatus,
    RunStatus,
    Trigger,
)

if TYPE_CHECKING:
    from salvagelane.core.records import JSONValue

# --- written by callers ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportItemRecord:
    """A kept item; its position in the report is its index in ``ReportRecord.items``."""

    source_index: int | None
    data: JSONValue
    span_start: int | None
    span_end: int | None
    coercions: Sequence[JSONValue] | None = None
    origin: ItemOrigin = ItemOrigin.MODEL
    repairs: Sequence[JSONValue] | None = None  # lossless repairs: never passed off as original
    # The attempt whose output holds the span when it is not the report's (a re-asked item).
    attempt: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportRecord:
    """The report of a run, salvaged from the output of attempt ``attempt_id``."""

    attempt_id: str
    envelope: JSONValue
    partial: bool
    status: RunStatus
    document_valid: bool
    truncated: bool
    finish_reason: str | None
    counts: Mapping[str, JSONValue]
    items: Sequence[ReportItemRecord]


@dataclass(frozen=True, kw_only=True, slots=True)
class QuarantineRecord:
    """A rejected candidate of one attempt.

    ``review_status`` is ``pending`` for the chosen attempt's items and ``superseded``
    for those of attempts that were not chosen.
    """

    attempt_id: str
    instruction_id: str
    source_index: int | None
    reason: str
    error: Mapping[str, JSONValue]
    span_start: int | None
    span_end: int | None
    snippet: str | None
    sha256: str | None
    repaired: JSONValue
    provenance: Mapping[str, JSONValue]
    review_status: ReviewStatus = ReviewStatus.PENDING
    # How the item left the queue without a review (a follow-up mended it): a link.
    resolution: Mapping[str, JSONValue] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class DefinitionRecord:
    """A definition as a run used it: ``content`` is the snapshot's JSON (see
    :class:`salvagelane.definitions.DefinitionSnapshot`), ``sha256`` the version it names.
    Read back, it is data from the database: check ``sha256`` against the content."""

    sha256: str
    instruction_id: str
    definition_sha256: str
    content: Mapping[str, JSONValue]


# --- returned by reads ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """One line of ``list_runs``. The figures (``status``, ``partial``, ``kept_count``,
    ``operator_approved``, ``quarantined_count`` and ``quarantined_by_reason``,
    ``candidates``, ``output_cut``, ``finish_reason``, ``native_finish_reason``) are the
    ones every view shows, defined once in :mod:`salvagelane.store.figures`: kept counts
    the report's items, an operator's included; quarantined counts the chosen attempt's
    items still held back (pending or rejected), ``folded`` of them counted only.
    ``scheduled_for`` is the fire a scheduled run claimed (None for manual runs);
    ``fire_attempt`` is 2 for the one retry of an interrupted fire, named by ``retry_of``;
    ``forced``: ``scheduled_for`` is not a fire time of the schedule (``run --force``)."""

    id: str
    instruction_id: str
    trigger: Trigger
    scheduled_for: datetime | None
    fire_attempt: int
    retry_of: str | None
    status: RunStatus
    created_at: datetime
    finished_at: datetime | None
    kept_count: int
    quarantined_count: int
    finish_reason: str | None
    sink_status: DeliveryStatus | None
    partial: bool
    candidates: int
    operator_approved: int
    quarantined_by_reason: Mapping[str, int]
    output_cut: tuple[OutputCut, ...]
    native_finish_reason: str | None
    forced: bool = False
    # Of kept_count, the items a follow-up request mended (origin reask).
    reasked: int = 0
    # Of quarantined_count, the candidates past guardrails.max_quarantined: counted by
    # reason, with no stored record (the raw output still holds them).
    folded: int = 0
    folded_by_reason: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptView:
    """A stored model call. ``raw_output`` is the model's text exactly as received, or its
    beginning when the output was over the cap (see :attr:`clipped`)."""

    id: str
    run_id: str
    number: int
    started_at: datetime
    finished_at: datetime | None
    request: Mapping[str, JSONValue]
    raw_output: str | None
    finish_reason: str | None
    native_finish_reason: str | None
    usage: Mapping[str, JSONValue] | None
    model: str | None
    request_id: str | None
    latency_seconds: float | None
    http_status: int | None
    provider_error: str | None
    stream_error: str | None
    outcome: Mapping[str, JSONValue] | None
    # The output as received (bytes, SHA-256), and how many of its bytes are stored:
    # fewer when it was over the definition's max_output_bytes. None for attempts
    # without output, and for lengths and hashes of attempts stored before 0005.
    raw_length: int | None = None
    raw_sha256: str | None = None
    stored_length: int | None = None

    @property
    def clipped(self) -> bool:
        """Whether only the first ``stored_length`` of ``raw_length`` bytes are stored."""
        return (
            self.raw_length is not None
            and self.stored_length is not None
            and self.stored_length < self.raw_length
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportItemView:
    position: int
    source_index: int | None
    data: JSONValue
    span_start: int | None
    span_end: int | None
    coercions: list[JSONValue] | None
    origin: ItemOrigin
    repairs: list[JSONValue] | None = None
    attempt: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportView:
    id: str
    attempt_id: str
    envelope: JSONValue
    partial: bool
    status: RunStatus
    document_valid: bool
    truncated: bool
    finish_reason: str | None
    counts: Mapping[str, JSONValue]
    created_at: datetime
    items: list[ReportItemView]


@dataclass(frozen=True, kw_only=True, slots=True)
class QuarantineView:
    """A stored quarantined item. ``snippet`` shows NUL as U+2400 (see ``raw_output``)."""

    id: int
    run_id: str
    attempt_id: str
    attempt_number: int
    instruction_id: str
    source_index: int | None
    reason: str
    error: Mapping[str, JSONValue]
    span_start: int | None
    span_end: int | None
    snippet: str | None
    sha256: str | None
    repaired: JSONValue
    provenance: Mapping[str, JSONValue]
    review_status: ReviewStatus
    created_at: datetime
    reviewed_at: datetime | None
    reviewed_by: str | None
    review_note: str | None
    resolution: Mapping[str, JSONValue] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class QuarantineFilter:
    """Which quarantined items ``list_quarantine`` and ``reject_matching`` take.

    ``review_status`` None means every item but the superseded and reasked ones
    (:data:`~salvagelane.vocabulary.OUT_OF_THE_LANE`). ``since`` keeps
    items created at or after it. ``through_id`` keeps items whose id is at most it (a
    bulk action bounded by the list it confirmed). ``limit`` None: no limit; ``offset``
    skips that many of the newest first (a page of the review page's queue).
    """

    instruction_id: str | None = None
    reason: str | None = None
    review_status: ReviewStatus | None = None
    since: datetime | None = None
    through_id: int | None = None
    limit: int | None = None
    offset: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkSelection:
    """The items a bulk action's confirmation showed, as a few values a form can carry:
    the highest id of the list (new items come after it), how many, and a digest of the
    ids (any other change, such as an item approved meanwhile, shows in it)."""

    through_id: int
    count: int
    digest: str

    @classmethod
    def of(cls, ids: Iterable[int]) -> BulkSelection:
        chosen = sorted(set(ids))
        text = ",".join(str(ident) for ident in chosen)
        return cls(
            through_id=chosen[-1] if chosen else 0,
            count=len(chosen),
            digest=hashlib.sha256(text.encode("ascii")).hexdigest(),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class QuarantineReviewView:
    """One entry of an item's audit trail. ``before``/``after``: the values the action
    changed; ``error``: the correction signal of a refused approval."""

    id: int
    quarantine_id: int
    action: ReviewAction
    actor: str
    at: datetime
    note: str | None
    before: JSONValue
    after: JSONValue
    error: JSONValue


@dataclass(frozen=True, kw_only=True, slots=True)
class QuarantineDetail(QuarantineView):
    """Everything about one quarantined item, for review.

    ``raw_before`` / ``raw_span`` / ``raw_after``: the attempt's raw output around the
    item's span (``context_chars`` each side at most); None when the attempt stored no
    output or the item has no span. ``report_items`` counts the items of the run's report
    (None: the run has no report); ``reviews`` is the audit trail, oldest first.
    """

    run_status: RunStatus
    raw_before: str | None
    raw_span: str | None
    raw_after: str | None
    report_id: str | None
    report_attempt_id: str | None
    report_items: int | None
    reviews: list[QuarantineReviewView]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReviewedItem:
    """A reviewed (approved or rejected) quarantined item, as a dataset line needs it.

    ``raw_span`` is the item's span of its attempt's raw output, None when the attempt
    stored no output, the item has no span, or the stored output was clipped before the
    span's end (the ``snippet`` of ``item`` is then what there is). ``definition_version``
    names the stored version of the definition its run used (None: not kept).
    ``decision`` is the audit row that decided it (the last approve, reject or bulk
    reject); None only for an item decided without one.
    """

    item: QuarantineView
    raw_span: str | None
    definition_version: str | None
    decision: QuarantineReviewView | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalView:
    """What an approval changed: the item's place in the report, and the report and its run
    after it (``run``: the run's summary as ``list_runs`` now shows it; ``status``,
    ``partial``, ``items`` and ``counts`` are the report's, the same figures)."""

    quarantine_id: int
    run_id: str
    report_id: str
    position: int
    items: int
    counts: Mapping[str, JSONValue]
    partial: bool
    status: RunStatus
    run: RunSummary


@dataclass(frozen=True, kw_only=True, slots=True)
class InputDigest:
    """What the audit trail keeps of an operator's input to a refused approval: its size
    in bytes, its SHA-256 and its first bytes (``head``, decoded as UTF-8 with invalid
    bytes replaced; ``clipped`` when there was more), never the whole of it."""

    size: int
    sha256: str
    head: str
    clipped: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingDelivery:
    """A delivery to write ``pending`` with a report: to the sink ``kind`` at ``target``.
    ``next_attempt_at`` ends the lease of the process that delivers it now: if that
    process dies, the delivery becomes due then."""

    kind: str
    target: str
    next_attempt_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryRun:
    """The run a delivery belongs to, as much as choosing its sinks needs."""

    id: str
    instruction_id: str
    definition_sha256: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimedDelivery:
    """A delivery this process has claimed: its try number ``attempts`` is leased to it.
    Its result is recorded only while no other process has claimed it since."""

    id: int
    run: DeliveryRun
    kind: str
    target: str
    attempts: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SinkDeliveryView:
    """A delivery of a run's report to one sink target (one row of the outbox).

    ``attempts`` counts the tries started; ``attempted_at`` is when the latest started
    (for ``pending``) or ended; ``next_attempt_at`` is when it is due again (None:
    delivered, or given up)."""

    id: int
    run_id: str
    target: str
    kind: str
    status: DeliveryStatus
    error: str | None
    attempted_at: datetime
    attempts: int
    next_attempt_at: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenDelivery:
    """An undelivered report's delivery (``pending`` or ``failed``) and its run."""

    delivery: SinkDeliveryView
    run: DeliveryRun


@dataclass(frozen=True, kw_only=True, slots=True)
class RunDetail(RunSummary):
    """Everything stored about one run: its summary plus attempts, report and quarantine.
    ``definition_version`` names the stored version of the definition it used (None for
    runs stored before it was kept, and for missed fires)."""

    definition_sha256: str
    definition_version: str | None
    started_at: datetime
    heartbeat_at: datetime | None
    error: str | None
    best_attempt_id: str | None
    attempts: list[AttemptView]
    report: ReportView | None
    quarantined: list[QuarantineView]
    deliveries: list[SinkDeliveryView]

    def attempt(self, number: int) -> AttemptView:
        """Attempt ``number`` (1-based) of this run."""
        for attempt in self.attempts:
            if attempt.number == number:
                return attempt
        numbers = ", ".join(str(a.number) for a in self.attempts) or "none"
        raise NotFoundError(
            f"run {self.id}: no attempt {number}: expected one of its attempts ({numbers})"
        )
