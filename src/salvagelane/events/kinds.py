"""The events: frozen facts about fires, runs, deliveries and nodes, one class each.

``name`` is the event's stable name (the log line's ``event``: consumers filter on it).
Fields are plain values; ``exception`` (where there is one) is the error that caused the
event, for the log's traceback, never compared. Times are aware datetimes; the log renders
them in ISO 8601 UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from salvagelane.vocabulary import RunStatus, Trigger

LAGGED_TRIGGERS = frozenset({Trigger.SCHEDULE, Trigger.CATCH_UP})
"""The triggers of a run that has a fire time to be late for."""


def fire_lag_seconds(
    *,
    trigger: Trigger,
    scheduled_for: datetime | None,
    started_at: datetime,
    retry_of: str | None,
) -> float | None:
    """How late a run started for its fire (start minus fire time, never below 0), or
    None when it has no fire to be late for: manual and replay runs, and the retry of an
    interrupted run, whose lateness is mostly the first run's duration."""
    if trigger not in LAGGED_TRIGGERS or scheduled_for is None or retry_of is not None:
        return None
    return max(0.0, (started_at - scheduled_for).total_seconds())


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """Something that happened, published once through an EventStream. ``exception``:
    the error that caused it, if one did (the log prints its traceback)."""

    name: ClassVar[str] = "event"
    exception: BaseException | None = field(default=None, compare=False, repr=False)


# --- a run ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RunEvent(Event):
    """Something that happened to one run of one instruction."""

    run_id: str
    instruction_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted(RunEvent):
    """A run claimed its fire (or took its queued run, or, unscheduled, started)."""

    name: ClassVar[str] = "run.started"
    trigger: Trigger
    scheduled_for: datetime | None
    started_at: datetime
    retry_of: str | None

    @property
    def fire_lag_seconds(self) -> float | None:
        """How late the run started for its fire (see :func:`fire_lag_seconds`)."""
        return fire_lag_seconds(
            trigger=self.trigger,
            scheduled_for=self.scheduled_for,
            started_at=self.started_at,
            retry_of=self.retry_of,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCalled(RunEvent):
    """One call of the model ended: ``outcome`` ``ok``, ``error`` or ``cancelled``;
    ``error_kind`` the provider's HTTP status, ``no_response`` or ``connector``; the
    tokens as the provider reported them (0 when it did not)."""

    name: ClassVar[str] = "model.called"
    attempt: int
    seconds: float
    outcome: str
    error_kind: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    """What the call cost by the definition's price table (``currency``); None without
    one, or for a call that failed."""
    currency: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptStored(RunEvent):
    """An attempt's raw output is committed (before anything parses it)."""

    name: ClassVar[str] = "attempt.stored"
    attempt: int
    chars: int
    over_cap: bool
    finish_reason: str
    native_finish_reason: str | None
    http_status: int | None
    stream_error: str | None
    redactions: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderFailed(RunEvent):
    """A model call ended without a completion; the failed call is stored."""

    name: ClassVar[str] = "attempt.provider_error"
    attempt: int
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptCut(RunEvent):
    """A model call was cut by a cancel; the cut call is stored."""

    name: ClassVar[str] = "attempt.cut"
    attempt: int
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptSpooled(RunEvent):
    """The database refused an attempt: it went to the spool file."""

    name: ClassVar[str] = "attempt.spooled"
    attempt: int
    error: str
    spool_file: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptLost(RunEvent):
    """The database refused an attempt and the spool did too: its output is lost."""

    name: ClassVar[str] = "attempt.not_stored"
    attempt: int
    error: str
    spool_error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptSalvaged(RunEvent):
    """An attempt's output went through the scanner and the guardrails."""

    name: ClassVar[str] = "attempt.salvaged"
    attempt: int
    status: str
    accepted: int
    quarantined: int
    folded: int
    truncated: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryAsked(RunEvent):
    """The run asks the model again after ``attempt``, for ``cause`` (a RetryCause);
    for ``quarantined``, a follow-up for ``items`` rejected items only."""

    name: ClassVar[str] = "attempt.retry"
    attempt: int
    cause: str
    max_output_tokens: int | None = None
    items: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReaskSettled(RunEvent):
    """The follow-up (``attempt``) for a run's rejected items was joined to its report:
    of ``asked`` items, ``accepted`` joined it, ``still_quarantined`` stay in review."""

    name: ClassVar[str] = "attempt.reask_settled"
    attempt: int
    asked: int
    accepted: int
    still_quarantined: int
    extra: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadlinePassed(RunEvent):
    """The run's deadline passed: it asks no more; the attempts stored still count."""

    name: ClassVar[str] = "run.deadline"
    attempts: int
    deadline_seconds: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelSeen(RunEvent):
    """A check point saw the operator's cancel (``runs cancel``)."""

    name: ClassVar[str] = "run.cancel_seen"


@dataclass(frozen=True, kw_only=True, slots=True)
class CallCutRequested(RunEvent):
    """A cancel arrived while the model call was in flight: the call is being cut."""

    name: ClassVar[str] = "run.call_cut"


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelCheckFailed(RunEvent):
    """Asking whether the run was cancelled failed; the call goes on."""

    name: ClassVar[str] = "run.cancel_check_failed"


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatMissed(RunEvent):
    """A heartbeat could not be written; the run goes on."""

    name: ClassVar[str] = "run.heartbeat_failed"


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetExhausted(RunEvent):
    """The instruction's daily budget was reached before model call ``attempt``: the call
    was not made (``limit_kind`` ``tokens`` or ``cost``; ``spent`` and ``limit`` in
    tokens or in ``currency``; ``day`` in ``timezone``, the schedule's)."""

    name: ClassVar[str] = "run.budget_exhausted"
    attempt: int
    limit_kind: str
    spent: float
    limit: float
    day: str
    timezone: str
    currency: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFailed(RunEvent):
    """The run ended ``failed`` (or, queued, was refused) with ``error``."""

    name: ClassVar[str] = "run.failed"
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCancelled(RunEvent):
    """The run ended ``cancelled`` at a check point."""

    name: ClassVar[str] = "run.cancelled"
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureNotRecorded(RunEvent):
    """The run's failure could not be written to the database."""

    name: ClassVar[str] = "run.fail_not_recorded"
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCrashed(RunEvent):
    """A bug ended the run (recorded ``failed`` where the database allowed)."""

    name: ClassVar[str] = "run.crashed"
    error_type: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished(RunEvent):
    """A run ended with ``status`` after ``seconds``: ``kept`` items, ``quarantined``
    held back (``by_reason``), ``folded`` of them past the quarantine bound."""

    name: ClassVar[str] = "run.finished"
    status: RunStatus
    seconds: float
    kept: int
    quarantined: int
    by_reason: Mapping[str, int] = field(default_factory=dict)
    folded: Mapping[str, int] = field(default_factory=dict)
    finish_reason: str | None = None
    attempts: int = 0
    error: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunInterrupted(RunEvent):
    """A run was marked ``interrupted``: its process died (no heartbeat) or it was still
    going at a shutdown timeout."""

    name: ClassVar[str] = "run.interrupted"
    reason: str
    scheduled_for: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class InterruptNotRecorded(RunEvent):
    """A run could not be marked interrupted."""

    name: ClassVar[str] = "run.interrupt_failed"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSettled(RunEvent):
    """A queued run no worker will take ended ``interrupted``."""

    name: ClassVar[str] = "run.settled"
    job_id: int | None
    status: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class QueuedRunUnknown(Event):
    """A job named a run the database does not hold."""

    name: ClassVar[str] = "run.unknown"
    run_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class QueuedRunNotTaken(Event):
    """A worker did not take a queued run: it had left ``queued``."""

    name: ClassVar[str] = "run.not_taken"
    run_id: str
    status: str


@dataclass(frozen=True, kw_only=True, slots=True)
class JobCrashed(Event):
    """A bug ended a queue job outside its run."""

    name: ClassVar[str] = "job.crashed"
    run_id: str


# --- a fire -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class FireEvent(Event):
    """Something that happened to one fire (an instruction at a fire time)."""

    instruction_id: str
    scheduled_for: datetime | None
    trigger: Trigger | None = None
    retry_of: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class FireReceived(FireEvent):
    """A fire reached the service (the scheduler, a catch-up, a retry), before it claims
    its run: a duplicate fire is counted too."""

    name: ClassVar[str] = "fire"


@dataclass(frozen=True, kw_only=True, slots=True)
class FireDropped(FireEvent):
    """A fire arrived with no service running in this process."""

    name: ClassVar[str] = "fire.dropped"
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class FireUnknown(FireEvent):
    """A fire of an instruction this node has no definition of."""

    name: ClassVar[str] = "fire.unknown"


@dataclass(frozen=True, kw_only=True, slots=True)
class FireSkipped(FireEvent):
    """A fire left unclaimed (the node stopped leading while it waited)."""

    name: ClassVar[str] = "fire.skipped"
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class FireClaimed(FireEvent):
    """A fire claimed its run (``queued``: and enqueued its job)."""

    name: ClassVar[str] = "fire.claimed"
    run_id: str
    queued: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class FireDuplicate(FireEvent):
    """A fire already claimed: nothing was written."""

    name: ClassVar[str] = "fire.duplicate"


@dataclass(frozen=True, kw_only=True, slots=True)
class FireCrashed(FireEvent):
    """A bug ended a fire's run; the scheduler goes on."""

    name: ClassVar[str] = "fire.crashed"


@dataclass(frozen=True, kw_only=True, slots=True)
class FireNotQueued(FireEvent):
    """A fire's claim and job rolled back together: it stays unclaimed."""

    name: ClassVar[str] = "fire.not_queued"


@dataclass(frozen=True, kw_only=True, slots=True)
class FireRetryPlanned(FireEvent):
    """The one retry of an interrupted scheduled run's fire."""

    name: ClassVar[str] = "fire.retry"


@dataclass(frozen=True, kw_only=True, slots=True)
class FireCaughtUp(FireEvent):
    """The newest fire missed while no node led, run now."""

    name: ClassVar[str] = "fire.catch_up"


@dataclass(frozen=True, kw_only=True, slots=True)
class FireMissed(FireEvent):
    """A fire time passed without a run: recorded ``missed`` with ``reason``."""

    name: ClassVar[str] = "fire.missed"
    run_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class MissedNotRecorded(Event):
    """Missed fires of an instruction could not be recorded."""

    name: ClassVar[str] = "fire.missed_not_recorded"
    instruction_id: str


# --- a delivery -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryEvent(Event):
    """One try of a stored report's delivery to one sink."""

    run_id: str
    target: str
    kind: str
    attempt: int


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryDone(DeliveryEvent):
    """The sink took the report."""

    name: ClassVar[str] = "sink.delivered"


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryFailed(DeliveryEvent):
    """The sink refused or failed; retried at ``next_attempt_at`` (None: no more)."""

    name: ClassVar[str] = "sink.failed"
    error: str
    next_attempt_at: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryOvertaken(DeliveryEvent):
    """The try's lease ran out and another process took the delivery over."""

    name: ClassVar[str] = "sink.overtaken"
    error: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryGivenUp(DeliveryEvent):
    """A delivery had all its tries: it is given up."""

    name: ClassVar[str] = "sink.given_up"
    error: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class RedeliveryFailed(Event):
    """A pass over the due deliveries failed; the next pass tries again."""

    name: ClassVar[str] = "delivery.redeliver_failed"


# --- a review ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemReviewed(Event):
    """An operator acted on a quarantined item: ``approved`` (the corrected item joined
    the report), ``refused`` (the guardrails refused the correction; it stays pending)
    or ``rejected``."""

    name: ClassVar[str] = "review.recorded"
    quarantine_id: int
    run_id: str
    action: str
    actor: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemsRejected(Event):
    """An operator rejected the pending items a filter matched, confirmed as counted."""

    name: ClassVar[str] = "review.bulk_rejected"
    quarantine_ids: tuple[int, ...]
    actor: str


# --- a node -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaderStandby(Event):
    """Another node leads: this one stands by."""

    name: ClassVar[str] = "leader.standby"
    poll_seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaderAcquired(Event):
    """This node leads: it schedules ``instructions`` instructions."""

    name: ClassVar[str] = "leader.acquired"
    instructions: int


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaderLost(Event):
    """This node lost the scheduler lock (a database connection?)."""

    name: ClassVar[str] = "leader.lost"


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaderReleased(Event):
    """This node stopped leading; ``abandoned_runs`` were marked interrupted."""

    name: ClassVar[str] = "leader.released"
    abandoned_runs: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ShutdownWaiting(Event):
    """A stop waits up to ``timeout_seconds`` for the runs in flight."""

    name: ClassVar[str] = "shutdown.waiting"
    runs: tuple[str, ...]
    timeout_seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class DefinitionNotStored(Event):
    """A run's definition is not stored with it (a credential could not be redacted)."""

    name: ClassVar[str] = "definition.not_stored"
    instruction: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DefinitionInvalid(Event):
    """A definition of the instructions directory is unusable; the others serve."""

    name: ClassVar[str] = "definition.invalid"
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DefinitionsReloadFailed(Event):
    """Reading the definitions again failed: every definition is kept."""

    name: ClassVar[str] = "definitions.reload_failed"
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DefinitionsReloaded(Event):
    """The definitions were read again (SIGHUP)."""

    name: ClassVar[str] = "definitions.reloaded"
    instructions: tuple[str, ...]
    scheduled: tuple[str, ...]
    rescheduled: tuple[str, ...]
    updated: tuple[str, ...]
    removed: tuple[str, ...]
    kept_previous: tuple[str, ...] = ()
    """Definitions that no longer load, kept at their previous version."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueSchemaInstalled(Event):
    """The task queue's tables were installed."""

    name: ClassVar[str] = "queue.schema_installed"


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueJobReleased(Event):
    """A job whose run was marked interrupted was finished in the queue."""

    name: ClassVar[str] = "queue.job_released"
    job_id: int


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueStalled(Event):
    """Runs wait in the queue and no worker takes them."""

    name: ClassVar[str] = "queue.stalled"
    queued: int
    oldest_queued_at: datetime | None
    waited_seconds: float
    live_workers: int
    stall_after_seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueResumed(Event):
    """A stalled queue is consumed again."""

    name: ClassVar[str] = "queue.resumed"
    queued: int
    live_workers: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueCheckFailed(Event):
    """A check of the queue failed (``check``: settle, watch, release, abort); the
    next poll tries again."""

    name: ClassVar[str] = "queue.check_failed"
    check: str


EVENT_TYPES: tuple[type[Event], ...] = tuple(
    kind
    for kind in list(globals().values())
    if isinstance(kind, type)
    and issubclass(kind, Event)
    and kind is not Event
    and "name" in vars(kind)
)
"""Every event a stream can carry: the classes that name themselves, in this module's
order (the module's globals hold the slotted classes, not the ones they replaced)."""
