"""One run of one instruction: claim, the attempts, the report, the deliveries.

The order is the contract: the raw output of every attempt is committed to the
database before it is parsed (:mod:`salvagelane.runtime.attempt_loop`), so a crash or a
bug in salvage can never lose what the model said; the report, its items and the
quarantine (:mod:`salvagelane.runtime.run_records`) are then written in one transaction,
so a failure there leaves no half-written report (the run stays ``running`` until the
scheduler marks it interrupted). Sinks run last and can only record their own failure:
they never touch the stored report. Each delivery is written ``pending`` with the report
(see :mod:`salvagelane.runtime.delivery`), so a process that dies while delivering leaves
it due, never silently undelivered. What happens is published as run events.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from salvagelane.connectors import Connector, build_connector
from salvagelane.context_sources import reference_time
from salvagelane.definitions import (
    DefinitionSnapshot,
    Instruction,
    snapshot_for_run,
    with_snapshot,
)
from salvagelane.definitions.snapshot import without_secrets
from salvagelane.errors import (
    AttemptNotStoredError,
    DefinitionError,
    NotFoundError,
    SalvagelaneError,
    StoreError,
)
from salvagelane.events import EventStream, logged_stream
from salvagelane.events.kinds import (
    DefinitionNotStored,
    FailureNotRecorded,
    HeartbeatMissed,
    InterruptNotRecorded,
    ReaskSettled,
    RunCancelled,
    RunCrashed,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
)
from salvagelane.logs import bound, scrub_text
from salvagelane.runtime import run_records
from salvagelane.runtime.attempt_loop import (
    AttemptLoop,
    BudgetReached,
    CancelRequested,
    StopRequest,
)
from salvagelane.runtime.budget import Exhausted, budget_check
from salvagelane.runtime.delivery import (
    DEFAULT_POLICY,
    DeliveryPolicy,
    deliver_claimed,
    pending_deliveries,
)
from salvagelane.runtime.plan import build_run_sinks
from salvagelane.runtime.run_records import RunOutcome, StoredAttempt
from salvagelane.sinks import Sink, build_sinks, run_address
from salvagelane.store import ClaimedDelivery, DefinitionRecord, Store
from salvagelane.store.spool import Spool
from salvagelane.vocabulary import Clock, RunStatus, Trigger, utc_now

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ClaimObserver",
    "ConnectorFactory",
    "Executor",
    "RunOutcome",
    "SinkFactory",
    "StopRequest",
    "connector_factory",
    "mark_abandoned",
    "sinks_factory",
]

ConnectorFactory = Callable[[Instruction], Connector]
SinkFactory = Callable[[Instruction], Sequence[Sink]]
ClaimObserver = Callable[[str], None]
"""Told the run id as soon as a run has claimed its fire (``serve`` tracks runs in flight)."""


def mark_abandoned(
    store: Store,
    abandoned: Mapping[str, str],
    *,
    reason: str,
    timeout: float,
    now: datetime,
    events: EventStream | None = None,
) -> None:
    """Mark runs still going at a shutdown timeout (run id -> instruction) interrupted.

    ``serve`` and ``worker`` stop alike: the raw outputs stored so far stay, and a
    scheduled run's fire gets its one retry from the leader.
    """
    stream = events or logged_stream()
    for run_id, instruction_id in sorted(abandoned.items()):
        try:
            marked = store.mark_interrupted(
                run_id,
                now=now,
                error=(
                    f"interrupted: {reason} and the run did not finish within the "
                    f"{timeout:g} s shutdown timeout; its raw outputs so far are kept"
                ),
            )
        except SalvagelaneError as exc:
            stream.publish(
                InterruptNotRecorded(run_id=run_id, instruction_id=instruction_id, exception=exc)
            )
            continue
        if marked:
            stream.publish(
                RunInterrupted(
                    run_id=run_id, instruction_id=instruction_id, reason="shutdown timeout"
                )
            )


def connector_factory(client: httpx.Client, *, replay: Path | None = None) -> ConnectorFactory:
    """Each instruction's connector over ``client``, bounded by its schedule's deadline;
    with ``replay`` (``run --replay``) the fixture answers whatever the definition names."""

    def connector_for(instruction: Instruction) -> Connector:
        return build_connector(
            instruction.connector,
            client=client,
            deadline_seconds=instruction.schedule.deadline_seconds,
            replay=replay,
        )

    return connector_for


def sinks_factory(client: httpx.Client) -> SinkFactory:
    """Each instruction's sinks, its webhooks posting over ``client``."""

    def sinks_for(instruction: Instruction) -> Sequence[Sink]:
        return build_sinks(instruction.sinks, client=client)

    return sinks_for


@dataclasses.dataclass(kw_only=True, slots=True)
class _RunState:
    run_id: str
    attempts: list[StoredAttempt] = dataclasses.field(default_factory=list)
    deadline_passed: bool = False
    # The day the run's budget counts (its fire time, or its start when unscheduled).
    day_of: datetime | None = None
    trigger: Trigger = Trigger.MANUAL
    budget_stop: Exhausted | None = None
    sinks: tuple[Sink, ...] = ()
    claims: list[ClaimedDelivery] = dataclasses.field(default_factory=list)


class Executor:
    """Runs instructions against a store. Connectors and sinks come from factories so
    the CLI, the scheduler and tests choose them (a replay fixture, a local server);
    what happens is published to ``events`` (by default: logged)."""

    def __init__(
        self,
        store: Store,
        *,
        connector_for: ConnectorFactory,
        sinks_for: SinkFactory = lambda instruction: (),
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        heartbeat_seconds: float = 15.0,
        on_claimed: ClaimObserver | None = None,
        spool: Spool | None = None,
        delivery_policy: DeliveryPolicy = DEFAULT_POLICY,
        should_stop: StopRequest | None = None,
        events: EventStream | None = None,
        stop_poll_seconds: float = 1.0,
    ):
        self._store = store
        self._should_stop = should_stop
        # How often a model call in flight asks should_stop (a cancel cuts the call).
        self._stop_poll_seconds = stop_poll_seconds
        self._events = events or logged_stream()
        # Where an attempt goes when the database refuses it; by default the spool
        # directory the environment names for this database.
        self._spool = spool
        self._delivery_policy = delivery_policy
        self._on_claimed = on_claimed
        self._connector_for = connector_for
        self._sinks_for = sinks_for
        self._clock = clock
        self._monotonic = monotonic
        self._heartbeat_seconds = heartbeat_seconds

    def run(
        self,
        instruction: Instruction,
        *,
        trigger: Trigger = Trigger.MANUAL,
        scheduled_for: datetime | None = None,
        retry_of: str | None = None,
        forced: bool = False,
        queued_run: str | None = None,
    ) -> RunOutcome:
        """One run, from render to delivery. Returns how it ended.

        ``queued_run``: the id of a run a ``serve --dispatch queue`` leader claimed
        ``queued``; the run takes it (RunTakenError when another worker has, or it was
        cancelled) instead of claiming a fire (``trigger``, ``scheduled_for`` and
        ``retry_of`` are then the queued run's own, for the events).

        With ``scheduled_for`` the run first claims that fire (``retry_of``: the one retry
        of an interrupted run of it): DuplicateFireError, before anything else is
        written, when it is already claimed. ``forced`` records that ``scheduled_for`` is
        not a fire time of the schedule (the caller checked, the operator insisted).

        The definition's version (its text and the files it names, read now) is stored
        with the run, and the run reads those files from it: what the store keeps is what
        the run used. Raises when the database fails or on a bug: the run is then
        recorded ``failed`` if the database still answers, and stays ``running``
        otherwise; its raw outputs are stored either way.
        """
        started = self._clock()
        began = self._monotonic()
        unreadable: DefinitionError | None = None
        snapshot: DefinitionSnapshot | None = None
        try:
            snapshot = snapshot_for_run(instruction)
        except DefinitionError as exc:
            unreadable = exc  # the run is recorded failed with it, once it is claimed
        record = self._definition_record(instruction, snapshot)
        if queued_run is not None:
            run_id = self._store.queued.take(
                queued_run,
                now=started,
                definition_sha256=instruction.definition_sha256,
                definition=record,
            ).id
        else:
            run_id = self._store.start_run(
                instruction_id=instruction.id,
                definition_sha256=instruction.definition_sha256,
                trigger=trigger,
                scheduled_for=scheduled_for,
                now=started,
                retry_of=retry_of,
                definition=record,
                forced=forced,
            )
        if self._on_claimed is not None:
            self._on_claimed(run_id)
        state = _RunState(run_id=run_id, day_of=scheduled_for or started, trigger=trigger)
        with bound(run_id=run_id, instruction=instruction.id):
            self._events.publish(
                RunStarted(
                    run_id=run_id,
                    instruction_id=instruction.id,
                    trigger=trigger,
                    scheduled_for=scheduled_for,
                    started_at=started,
                    retry_of=retry_of,
                )
            )
            try:
                with (
                    self._heartbeat(run_id, instruction.id),
                    reference_time(scheduled_for or started),
                ):
                    state.sinks = build_run_sinks(instruction, self._sinks_for)
                    if unreadable is not None:
                        raise unreadable
                    assert snapshot is not None
                    outcome = self._execute(with_snapshot(instruction, snapshot), state)
            except DefinitionError as exc:
                outcome = self._fail(instruction, state, f"definition: {exc}")
            except BudgetReached as exc:
                outcome = self._fail(instruction, state, exc.exhausted.message(instruction.id))
            except CancelRequested:
                outcome = self._fail(
                    instruction,
                    state,
                    f"cancelled: the operator asked the run to stop (salvagelane runs cancel); "
                    f"it stopped after {len(state.attempts)} attempt(s), whose raw outputs "
                    "are kept",
                    status=RunStatus.CANCELLED,
                )
            except AttemptNotStoredError as exc:
                # The database refused an attempt: its output is in the spool file the
                # error names. Say so on the run if the database takes that much.
                try:
                    self._store.fail_run(
                        run_id, finished_at=self._clock(), error=scrub_text(str(exc))
                    )
                except (StoreError, NotFoundError) as also:
                    self._events.publish(
                        FailureNotRecorded(
                            run_id=run_id, instruction_id=instruction.id, error=str(also)
                        )
                    )
                raise
            except Exception as exc:
                # A bug must not leave the run looking alive: record it, then let it surface.
                self._events.publish(
                    RunCrashed(
                        run_id=run_id,
                        instruction_id=instruction.id,
                        error_type=type(exc).__name__,
                        exception=exc,
                    )
                )
                error = scrub_text(f"internal error: {type(exc).__name__}: {exc}")
                self._store.fail_run(run_id, finished_at=self._clock(), error=error)
                self._events.publish(
                    RunFinished(
                        run_id=run_id,
                        instruction_id=instruction.id,
                        status=RunStatus.FAILED,
                        seconds=self._monotonic() - began,
                        kept=0,
                        quarantined=0,
                        attempts=len(state.attempts),
                        error=error,
                    )
                )
                raise
            if state.claims:
                outcome = self._deliver(state, outcome)
            self._events.publish(
                RunFinished(
                    run_id=run_id,
                    instruction_id=instruction.id,
                    status=outcome.status,
                    seconds=self._monotonic() - began,
                    kept=outcome.kept,
                    quarantined=outcome.quarantined_total,
                    by_reason=outcome.quarantined,
                    folded=outcome.folded,
                    finish_reason=outcome.finish_reason,
                    attempts=outcome.attempts,
                    error=outcome.error,
                )
            )
            return outcome

    def _definition_record(
        self, instruction: Instruction, snapshot: DefinitionSnapshot | None
    ) -> DefinitionRecord | None:
        """The definition's version as stored with the run: without a secret (a URL's
        credentials); none when a secret could not be taken out (the run reads the files
        as they are either way)."""
        if snapshot is None:
            return None
        kept = without_secrets(snapshot, instruction.definition)
        if kept is None:
            self._events.publish(
                DefinitionNotStored(
                    instruction=instruction.id,
                    reason="a credential in a URL of the definition could not be redacted",
                )
            )
            return None
        return DefinitionRecord(
            sha256=kept.sha256,
            instruction_id=instruction.id,
            definition_sha256=instruction.definition_sha256,
            content=kept.to_json(),
        )

    @contextmanager
    def _heartbeat(self, run_id: str, instruction_id: str) -> Iterator[None]:
        """Beat while the run executes, so a scheduler can tell a live run from one whose
        process died (the beats stop) without guessing from its age."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self._heartbeat_seconds):
                try:
                    self._store.heartbeat(run_id, self._clock())
                except Exception as exc:  # a missed beat must never fail the run itself
                    self._events.publish(
                        HeartbeatMissed(run_id=run_id, instruction_id=instruction_id, exception=exc)
                    )

        thread = threading.Thread(target=beat, name=f"heartbeat-{run_id[:8]}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    # --- the attempts and the report --------------------------------------------------------

    def _execute(self, instruction: Instruction, state: _RunState) -> RunOutcome:
        loop = AttemptLoop(
            self._store,
            run_id=state.run_id,
            instruction=instruction,
            connector=self._connector_for(instruction),
            events=self._events,
            attempts=state.attempts,
            clock=self._clock,
            monotonic=self._monotonic,
            spool_for=self._spool_for,
            should_stop=self._should_stop,
            stop_poll_seconds=self._stop_poll_seconds,
            budget=budget_check(
                self._store, instruction, state.day_of or self._clock(), trigger=state.trigger
            ),
        )
        state.deadline_passed = loop.run()
        state.budget_stop = loop.budget_stop
        return self._persist(instruction, state)

    def _spool_for(self) -> Spool:
        if self._spool is None:
            from salvagelane import environment

            self._spool = Spool(environment.spool_dir(self._store.url))
        return self._spool

    def _persist(self, instruction: Instruction, state: _RunState) -> RunOutcome:
        # Through the module's name: the crash tests replace what it builds.
        settlement = run_records.settle(
            instruction, state.attempts, deadline_passed=state.deadline_passed
        )
        if state.budget_stop is not None and settlement.status is RunStatus.FAILED:
            # The retry the budget stopped might have saved the run: say so first.
            made = len(state.attempts)
            settlement = dataclasses.replace(
                settlement,
                error=f"{state.budget_stop.message(instruction.id, attempts_made=made)}; "
                f"the attempt(s) made ended: {settlement.error or 'no attempt was made'}",
            )
        if settlement.report is None:
            return self._fail(instruction, state, settlement.error or "no attempt was made")
        finished_at = self._clock()
        state.claims = self._store.finish_run(
            state.run_id,
            status=settlement.status,
            finished_at=finished_at,
            error=settlement.error,
            report=settlement.report,
            quarantined=list(settlement.quarantined),
            deliveries=pending_deliveries(
                state.sinks,
                now=finished_at,
                policy=self._delivery_policy,
                address=run_address(state.run_id, instruction.id),
            ),
        )
        if settlement.reask is not None and settlement.follow_up is not None:
            mended = settlement.reask.counts()
            self._events.publish(
                ReaskSettled(
                    run_id=state.run_id,
                    instruction_id=instruction.id,
                    attempt=settlement.follow_up.number,
                    asked=mended["asked"],
                    accepted=mended["accepted"],
                    still_quarantined=mended["still_quarantined"],
                    extra=mended["extra"],
                )
            )
        return run_records.reported_outcome(
            state.run_id, instruction, settlement, attempts=len(state.attempts)
        )

    def _fail(
        self,
        instruction: Instruction,
        state: _RunState,
        error: str,
        *,
        status: RunStatus = RunStatus.FAILED,
    ) -> RunOutcome:
        error = scrub_text(error)
        self._store.fail_run(state.run_id, finished_at=self._clock(), error=error, status=status)
        ended = RunCancelled if status is RunStatus.CANCELLED else RunFailed
        self._events.publish(ended(run_id=state.run_id, instruction_id=instruction.id, error=error))
        return run_records.failed_outcome(
            state.run_id, instruction.id, state.attempts, error, status=status
        )

    # --- delivery -------------------------------------------------------------------------

    def _deliver(self, state: _RunState, outcome: RunOutcome) -> RunOutcome:
        """Send the report to the deliveries written with it, which this process holds."""
        payload = self._store.get_report_payload(state.run_id)
        deliveries = deliver_claimed(
            self._store,
            zip(state.claims, state.sinks, strict=True),
            payload,
            clock=self._clock,
            policy=self._delivery_policy,
            events=self._events,
        )
        return dataclasses.replace(outcome, deliveries=deliveries)
