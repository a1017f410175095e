"""The store: runs, attempts, reports and the quarantine lane, on SQLite or PostgreSQL.

Every public method is one short transaction of its own and returns dataclasses from
:mod:`salvagelane.store.values`. Database errors are translated into StoreError here,
once; an unknown id is a NotFoundError.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from salvagelane.core.payload import report_payload
from salvagelane.errors import NotFoundError, OutdatedDatabaseError, StoreError
from salvagelane.store._rows import (
    attempt_view,
    bound_raw,
    close_run,
    columns_of,
    deliveries_of,
    get_run,
    insert_definition,
    interrupt,
    last_sign_of_life,
    new_id,
    report_view,
    running_run,
    summaries,
    summary,
    view,
)
from salvagelane.store.deliveries import DeliveryOutbox, enqueue
from salvagelane.store.engine import (
    connect,
    database_url,
    head_revision,
    make_engine,
    masked_url,
    opening_errors,
    revision_of,
    store_errors,
    unknown_revision,
    upgrade_connection,
)
from salvagelane.store.evaluations import Evaluations
from salvagelane.store.figures import figures_of
from salvagelane.store.fires import FireLedger
from salvagelane.store.health import HealthReader
from salvagelane.store.models import (
    AttemptRow,
    DefinitionVersionRow,
    QuarantinedItemRow,
    ReportItemRow,
    ReportRow,
    RunRow,
)
from salvagelane.store.quarantine_lane import QuarantineLane
from salvagelane.store.queued import QueuedRuns
from salvagelane.store.spend import SpendReader
from salvagelane.store.spool import Imported, SpooledAttempt
from salvagelane.store.state import StateReader
from salvagelane.store.values import (
    ClaimedDelivery,
    DefinitionRecord,
    PendingDelivery,
    QuarantineRecord,
    QuarantineView,
    ReportRecord,
    RunDetail,
    RunSummary,
    SinkDeliveryView,
)
from salvagelane.vocabulary import FAILURE_STATUSES, FINAL_RUN_STATUSES, RunStatus, Trigger

MIN_PREFIX = 8
"""The shortest run id prefix accepted, like git's abbreviated hashes."""


class Store:
    """Persistence for salvagelane. Open with :meth:`open`; close, or use as a context manager."""

    def __init__(self, engine: Engine, *, url: str | None = None) -> None:
        """Use :meth:`open`, which also checks the schema revision. ``url``: the database
        as the caller named it (default: the engine's URL, which for a read-only SQLite
        file is a ``file:`` URI)."""
        self._engine = engine
        self._url = sa.make_url(url) if url is not None else engine.url
        # expire_on_commit=False: rows stay readable while they are turned into records.
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str, *, auto_upgrade: bool = True, read_only: bool = False) -> Store:
        """Connect to ``url`` and make sure its schema is the one this code expects.

        A SQLite database without any table (a new file) is migrated to head when
        ``auto_upgrade`` is true. Any other database not at head is refused: migrating a
        shared database is the operator's decision (``salvagelane db upgrade``).

        ``read_only``: a store for commands that only read. It creates no file (a missing
        SQLite file is DatabaseOpenError), migrates nothing (a database not at head is
        OutdatedDatabaseError) and every transaction is read-only.
        """
        normalised = database_url(url)
        store = cls(make_engine(normalised, read_only=read_only), url=normalised)
        try:
            store._check_schema(auto_upgrade=auto_upgrade and not read_only)
        except BaseException:
            store.close()
            raise
        return store

    def _check_schema(self, *, auto_upgrade: bool) -> None:
        head = head_revision()
        with (
            connect(self._engine) as connection,
            opening_errors(self._url, "check the schema revision"),
            connection.begin(),
        ):
            current = revision_of(connection)
            fresh = (
                current is None
                and connection.dialect.name == "sqlite"
                and not sa.inspect(connection).get_table_names()
            )
            if fresh and auto_upgrade:
                upgrade_connection(connection)
                return
        if (newer := unknown_revision(self._url, current)) is not None:
            raise newer
        if current != head:
            raise OutdatedDatabaseError(
                f"{self.url}: the database schema is at revision {current or '(none)'}, "
                f"this salvagelane needs {head}: run `salvagelane db upgrade`"
            )

    @property
    def url(self) -> str:
        """The database URL, password masked."""
        return masked_url(self._url)

    @property
    def identity(self) -> str:
        """This database as a spool file names it: the URL without password or options, a
        SQLite file by its absolute path."""
        url = self._url.set(query={})
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            url = url.set(database=str(Path(url.database or "").resolve()))
        return masked_url(url)

    @property
    def quarantine(self) -> QuarantineLane:
        """The operator review lane of the quarantine, on this store's database."""
        return QuarantineLane(self._transaction, self.url)

    @property
    def deliveries(self) -> DeliveryOutbox:
        """The delivery outbox: claiming and recording deliveries of reports to sinks."""
        return DeliveryOutbox(self._transaction, self.url)

    @property
    def evals(self) -> Evaluations:
        """Stored evaluations (``salvagelane eval``)."""
        return Evaluations(self._transaction, self.url)

    @property
    def fires(self) -> FireLedger:
        """The bookkeeping of scheduled fires: missed fires, retries, schedules."""
        return FireLedger(self._transaction, self.url)

    @property
    def queued(self) -> QueuedRuns:
        """The runs of the task queue: claimed with their job, taken by one worker."""
        return QueuedRuns(self._transaction, self.url)

    @property
    def health(self) -> HealthReader:
        """Run health per instruction: streaks, rates, reasons and tokens over time."""
        return HealthReader(self._transaction, self.url)

    @property
    def spend(self) -> SpendReader:
        """What an instruction's runs spent (tokens per model) over a span of fire times."""
        return SpendReader(self._transaction)

    @property
    def state(self) -> StateReader:
        """What the database holds now, counted (runs by status, the pending quarantine,
        open deliveries, queue depth): what the metrics gauges show."""
        return StateReader(self._transaction)

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[Session]:
        """A session in one transaction: committed at the end, rolled back on any error."""
        with store_errors(self._url, operation), self._sessions.begin() as session:
            yield session

    # --- writes -----------------------------------------------------------------------------

    def start_run(
        self,
        *,
        instruction_id: str,
        definition_sha256: str,
        trigger: Trigger,
        scheduled_for: datetime | None,
        now: datetime,
        retry_of: str | None = None,
        definition: DefinitionRecord | None = None,
        forced: bool = False,
    ) -> str:
        """Record a new run as ``running``; returns its id.

        With ``scheduled_for`` the insert claims that fire: DuplicateFireError when it
        already has a run. ``retry_of`` names a run of the same fire that this one repeats
        (an interrupted one, or one ``backfill --reprocess`` runs again); the retry takes
        the next ``fire_attempt`` after it and is claimed the same way, so each run of a
        fire is retried once.
        ``definition`` is the version of the definition the run uses: stored with the
        run, in the same transaction, unless that version is stored already. ``forced``:
        ``scheduled_for`` is not a fire time of the schedule, and the operator said so.
        """
        _check_vocabulary("trigger", trigger, frozenset(Trigger))
        if retry_of is not None and scheduled_for is None:
            raise ValueError("retry_of: only a scheduled fire is retried; pass its scheduled_for")
        if forced and scheduled_for is None:
            raise ValueError("forced: only a run with a scheduled_for forces its fire time")
        if definition is not None and definition.definition_sha256 != definition_sha256:
            raise ValueError("definition: its definition_sha256 is not the run's")
        run_id = new_id()
        run = RunRow(
            id=run_id,
            instruction_id=instruction_id,
            definition_sha256=definition_sha256,
            definition_version=None if definition is None else definition.sha256,
            trigger=Trigger(trigger),
            scheduled_for=scheduled_for,
            fire_attempt=1 if retry_of is None else self.fires.fire_attempt_of(retry_of) + 1,
            retry_of=retry_of,
            status=RunStatus.RUNNING,
            created_at=now,
            started_at=now,
            heartbeat_at=now,
            forced=forced,
        )
        self.fires.insert_run(
            run, f"start a run of {instruction_id}", definition=definition, now=now
        )
        return run_id

    def record_missed(
        self,
        *,
        instruction_id: str,
        definition_sha256: str,
        scheduled_for: datetime,
        now: datetime,
        reason: str,
    ) -> str | None:
        """See :meth:`FireLedger.record_missed`."""
        return self.fires.record_missed(
            instruction_id=instruction_id,
            definition_sha256=definition_sha256,
            scheduled_for=scheduled_for,
            now=now,
            reason=reason,
        )

    def keep_definition(self, definition: DefinitionRecord, *, now: datetime) -> None:
        """Store a version of a definition on its own, unless it is stored already
        (``start_run`` does this with the run; this is for imports and tests)."""
        with self._transaction(f"keep a definition of {definition.instruction_id}") as session:
            insert_definition(session, definition, now)

    def get_definition(self, run_id: str) -> DefinitionRecord | None:
        """The stored version of the definition run ``run_id`` (or a unique prefix) used;
        None when the run has none (stored before 0006, or a missed fire)."""
        with self._transaction(f"read the definition of run {run_id}") as session:
            run = self._resolve(session, run_id)
            if run.definition_version is None:
                return None
            row = session.get(DefinitionVersionRow, run.definition_version)
            if row is None:
                raise NotFoundError(
                    f"{self.url}: run {run.id} names definition version "
                    f"{run.definition_version[:12]}, which the database does not hold"
                )
            return DefinitionRecord(
                sha256=row.sha256,
                instruction_id=row.instruction_id,
                definition_sha256=row.definition_sha256,
                content=row.content,
            )

    def mark_interrupted(self, run_id: str, *, now: datetime, error: str) -> bool:
        """End ``run_id`` as ``interrupted`` if it is still running (a process shutting down
        gives up on it); True when it did, False when the run had already ended.

        Its attempts and their raw outputs stay.
        """
        with self._transaction(f"mark run {run_id} interrupted") as session:
            run = get_run(session, run_id, for_update=True)
            if run.status != RunStatus.RUNNING:
                return False
            close_run(run, status=RunStatus.INTERRUPTED, finished_at=now, error=error)
            return True

    def interrupt_stale_runs(self, *, stale_before: datetime, now: datetime) -> list[RunSummary]:
        """End as ``interrupted`` every run still ``running`` whose last heartbeat (or start,
        without one) is older than ``stale_before``: the process running it stopped.

        Returns those runs (as now stored), oldest first. Their attempts and raw outputs
        stay. A run that heartbeats concurrently is re-checked under its row lock
        (PostgreSQL) or waits for this transaction (SQLite), so a live run is not taken.
        """
        stmt = (
            sa.select(RunRow)
            .where(RunRow.status == RunStatus.RUNNING, last_sign_of_life() < stale_before)
            .order_by(RunRow.created_at, RunRow.id)
            .with_for_update()
        )
        with self._transaction("interrupt stale runs") as session:
            stale = list(session.scalars(stmt))
            for run in stale:
                interrupt(run, now=now)
            session.flush()
            return summaries(session, stale)

    def reclaim_stale_fire(
        self, instruction_id: str, scheduled_for: datetime, *, stale_before: datetime, now: datetime
    ) -> RunSummary | None:
        """See :meth:`FireLedger.reclaim_stale_fire`."""
        return self.fires.reclaim_stale_fire(
            instruction_id, scheduled_for, stale_before=stale_before, now=now
        )

    def add_attempt(
        self,
        run_id: str,
        *,
        number: int,
        started_at: datetime,
        request: Mapping[str, Any],
        raw_output: str | None,
        finish_reason: str | None,
        native_finish_reason: str | None,
        usage: Mapping[str, Any] | None,
        model: str | None,
        request_id: str | None,
        latency_seconds: float | None,
        http_status: int | None,
        provider_error: str | None,
        stream_error: str | None,
        finished_at: datetime | None,
        max_raw_bytes: int | None = None,
    ) -> str:
        """Store a model call, committed at once: the raw output is safe before parsing.

        An output over ``max_raw_bytes`` (the definition's ``max_output_bytes``) is stored
        clipped to its first ``max_raw_bytes`` bytes; its full length and SHA-256 are
        stored with every output.
        """
        attempt_id = new_id()
        raw = None if raw_output is None else bound_raw(raw_output, max_raw_bytes)
        with self._transaction(f"add attempt {number} to run {run_id}") as session:
            get_run(session, run_id)
            session.add(
                AttemptRow(
                    id=attempt_id,
                    run_id=run_id,
                    number=number,
                    started_at=started_at,
                    finished_at=finished_at,
                    request=request,
                    raw_output=None if raw is None else raw.data,
                    raw_length=None if raw is None else raw.length,
                    raw_sha256=None if raw is None else raw.sha256,
                    finish_reason=finish_reason,
                    native_finish_reason=native_finish_reason,
                    usage=usage,
                    model=model,
                    request_id=request_id,
                    latency_seconds=latency_seconds,
                    http_status=http_status,
                    provider_error=provider_error,
                    stream_error=stream_error,
                )
            )
        return attempt_id

    def import_spooled_attempt(self, entry: SpooledAttempt) -> Imported:
        """Add a spooled attempt to its run, whatever the run's status, committed.

        Idempotent: when the run already holds an attempt of that number the file's import
        committed before (ALREADY_STORED) or another attempt took the number (CONFLICT);
        nothing is written either way. NO_RUN when this database has no such run.
        """
        operation = f"import spooled attempt {entry.number} of run {entry.run_id}"
        try:
            with self._transaction(operation) as session:
                if session.get(RunRow, entry.run_id) is None:
                    return Imported.NO_RUN
                stored = _attempt_numbered(session, entry.run_id, entry.number)
                if stored is not None:
                    return _compare_spooled(stored, entry)
                session.add(AttemptRow(id=new_id(), **columns_of(entry, omit={"database"})))
                return Imported.IMPORTED
        except StoreError as exc:
            # Two importers racing (PostgreSQL): the loser finds the winner's row.
            if not isinstance(exc.__cause__, sa.exc.IntegrityError):
                raise
            with self._transaction(operation) as session:
                stored = _attempt_numbered(session, entry.run_id, entry.number)
                if stored is None:
                    raise
                return _compare_spooled(stored, entry)

    def set_attempt_outcome(self, attempt_id: str, outcome: Mapping[str, Any]) -> None:
        """Attach the salvage outcome (counts, status) to an attempt."""
        with self._transaction(f"set the outcome of attempt {attempt_id}") as session:
            attempt = session.get(AttemptRow, attempt_id)
            if attempt is None:
                raise NotFoundError(f"{self.url}: no attempt with id {attempt_id}")
            attempt.outcome = outcome

    def heartbeat(self, run_id: str, now: datetime) -> bool:
        """Record that the process executing ``run_id`` is alive. False (nothing written)
        when the run has ended meanwhile, e.g. another node marked it interrupted: its
        recorded end stays as it is."""
        with self._transaction(f"heartbeat run {run_id}") as session:
            run = get_run(session, run_id, for_update=True)
            if run.status != RunStatus.RUNNING:
                return False
            run.heartbeat_at = now
            return True

    def finish_run(
        self,
        run_id: str,
        *,
        status: RunStatus,
        finished_at: datetime,
        error: str | None,
        report: ReportRecord | None,
        quarantined: Sequence[QuarantineRecord],
        deliveries: Sequence[PendingDelivery] = (),
    ) -> list[ClaimedDelivery]:
        """Write the report, its items, the quarantined items and the final status at once.

        One transaction: if any of it fails, none of it is written, the run stays
        ``running`` and StoreError is raised. The attempts (with their raw output) were
        committed earlier and stay. ``deliveries`` are written ``pending`` with the report
        (so a crash before they are delivered leaves them due, never forgotten) and
        returned claimed by the caller, which delivers them next.
        """
        _check_vocabulary("status", status, FINAL_RUN_STATUSES)
        if deliveries and report is None:
            raise ValueError("deliveries: a run without a report has nothing to deliver")
        with self._transaction(f"finish run {run_id}") as session:
            run = running_run(session, run_id)
            own_attempts = set(
                session.scalars(sa.select(AttemptRow.id).where(AttemptRow.run_id == run_id))
            )
            named = {record.attempt_id for record in quarantined}
            if report is not None:
                named.add(report.attempt_id)
            if stray := sorted(named - own_attempts):
                raise NotFoundError(f"{self.url}: run {run_id} has no attempt {', '.join(stray)}")
            if report is not None:
                _add_report(session, run_id, report, created_at=finished_at)
            session.add_all(
                QuarantinedItemRow(run_id=run_id, created_at=finished_at, **columns_of(record))
                for record in quarantined
            )
            run.best_attempt_id = None if report is None else report.attempt_id
            close_run(run, status=RunStatus(status), finished_at=finished_at, error=error)
            return enqueue(session, run, deliveries, at=finished_at)

    def fail_run(
        self,
        run_id: str,
        *,
        finished_at: datetime,
        error: str,
        status: RunStatus = RunStatus.FAILED,
    ) -> None:
        """End a run that produced no report (``failed``, ``interrupted`` by a crash, or
        ``cancelled`` at the operator's request)."""
        _check_vocabulary("status", status, FAILURE_STATUSES | {RunStatus.CANCELLED})
        with self._transaction(f"fail run {run_id}") as session:
            close_run(
                running_run(session, run_id),
                status=RunStatus(status),
                finished_at=finished_at,
                error=error,
            )

    # --- reads ------------------------------------------------------------------------------

    def runs_for_fire(self, instruction_id: str, scheduled_for: datetime) -> list[RunSummary]:
        """See :meth:`FireLedger.runs_for_fire`."""
        return self.fires.runs_for_fire(instruction_id, scheduled_for)

    def unretried_interrupted_fires(self, *, since: datetime) -> list[RunSummary]:
        """See :meth:`FireLedger.unretried_interrupted_fires`."""
        return self.fires.unretried_interrupted_fires(since=since)

    def register_schedule(
        self, instruction_id: str, *, cron: str, timezone: str, now: datetime
    ) -> datetime:
        """See :meth:`FireLedger.register_schedule`."""
        return self.fires.register_schedule(instruction_id, cron=cron, timezone=timezone, now=now)

    def recorded_fires(
        self, instruction_id: str, *, start: datetime, end: datetime
    ) -> set[datetime]:
        """See :meth:`FireLedger.recorded_fires`."""
        return self.fires.recorded_fires(instruction_id, start=start, end=end)

    def list_runs(
        self,
        *,
        instruction_id: str | None = None,
        limit: int = 20,
        ended: RunStatus | None = None,
        trigger: Trigger | None = None,
        offset: int = 0,
        since: datetime | None = None,
    ) -> list[RunSummary]:
        """The latest ``limit`` runs, newest first (past ``offset`` of them), optionally of
        one instruction, one trigger, ended with one status (the status the run ended
        with: a review may since have made a partial report ok), or created at or after
        ``since``."""
        stmt = (
            sa.select(RunRow)
            .order_by(RunRow.created_at.desc(), RunRow.id.desc())
            .limit(limit)
            .offset(offset)
        )
        if instruction_id is not None:
            stmt = stmt.where(RunRow.instruction_id == instruction_id)
        if ended is not None:
            stmt = stmt.where(RunRow.status == ended)
        if trigger is not None:
            stmt = stmt.where(RunRow.trigger == trigger)
        if since is not None:
            stmt = stmt.where(RunRow.created_at >= since)
        with self._transaction("list runs") as session:
            return summaries(session, list(session.scalars(stmt)))

    def instruction_ids(self) -> list[str]:
        """The ids of the instructions that have stored runs, sorted."""
        stmt = sa.select(RunRow.instruction_id).distinct().order_by(RunRow.instruction_id)
        with self._transaction("list instruction ids") as session:
            return list(session.scalars(stmt))

    def get_run(self, run_id: str) -> RunDetail:
        """Everything stored about a run. ``run_id`` may be a unique prefix (8+ characters)."""
        with self._transaction(f"read run {run_id}") as session:
            run = self._resolve(session, run_id)
            figures = figures_of(session, [run])[run.id]
            attempts = [
                attempt_view(row)
                for row in session.scalars(
                    sa.select(AttemptRow)
                    .where(AttemptRow.run_id == run.id)
                    .order_by(AttemptRow.number)
                )
            ]
            numbers = {attempt.id: attempt.number for attempt in attempts}
            quarantined = session.scalars(
                sa.select(QuarantinedItemRow)
                .where(QuarantinedItemRow.run_id == run.id)
                .order_by(QuarantinedItemRow.id)
            )
            return view(
                RunDetail,
                run,
                **columns_of(summary(run, figures)),
                attempts=attempts,
                report=report_view(session, run.id, figures),
                quarantined=[
                    view(QuarantineView, row, attempt_number=numbers[row.attempt_id])
                    for row in quarantined
                ],
                deliveries=[view(SinkDeliveryView, row) for row in deliveries_of(session, run.id)],
            )

    def get_report_payload(self, run_id: str) -> dict[str, Any]:
        """What a consumer of the report receives: the envelope and the kept items in order.

        ``run_id`` may be a unique prefix. NotFoundError when the run has no report.
        """
        with self._transaction(f"read the report of run {run_id}") as session:
            run = self._resolve(session, run_id)
            report = report_view(session, run.id, figures_of(session, [run])[run.id])
            if report is None:
                raise NotFoundError(f"{self.url}: run {run.id} has no report (it is {run.status})")
            return report_payload(
                run_id=run.id,
                instruction=run.instruction_id,
                status=report.status,
                partial=report.partial,
                finish_reason=report.finish_reason,
                counts=report.counts,
                envelope=report.envelope,
                items=report.items,
            )

    def _resolve(self, session: Session, run_id: str) -> RunRow:
        """The run whose id is ``run_id`` or starts with it (at least MIN_PREFIX characters)."""
        prefix = run_id.strip().lower()
        if len(prefix) < MIN_PREFIX:
            raise NotFoundError(
                f"{self.url}: run id {run_id!r} is too short: give at least {MIN_PREFIX} characters"
            )
        matches = list(
            session.scalars(
                sa.select(RunRow).where(RunRow.id.startswith(prefix, autoescape=True)).limit(2)
            )
        )
        if not matches:
            raise NotFoundError(f"{self.url}: no run with id {run_id!r}")
        if len(matches) > 1:
            raise NotFoundError(
                f"{self.url}: run id prefix {run_id!r} is ambiguous "
                f"({matches[0].id}, {matches[1].id}, ...): give more characters"
            )
        return matches[0]


# --- helpers ------------------------------------------------------------------------------------


def _check_vocabulary(field: str, value: str, allowed: frozenset[str]) -> None:
    # Callers pass StrEnum members or plain strings; a typo must not reach the database.
    if value not in allowed:
        raise ValueError(f"{field} {value!r}: expected one of {', '.join(sorted(allowed))}")


def _attempt_numbered(session: Session, run_id: str, number: int) -> AttemptRow | None:
    return session.scalars(
        sa.select(AttemptRow).where(AttemptRow.run_id == run_id, AttemptRow.number == number)
    ).one_or_none()


def _compare_spooled(stored: AttemptRow, entry: SpooledAttempt) -> Imported:
    same = (
        stored.raw_output == entry.raw_output
        and stored.raw_length == entry.raw_length
        and stored.raw_sha256 == entry.raw_sha256
        and stored.provider_error == entry.provider_error
    )
    return Imported.ALREADY_STORED if same else Imported.CONFLICT


def _add_report(
    session: Session, run_id: str, report: ReportRecord, *, created_at: datetime
) -> None:
    report_id = new_id()
    session.add(
        ReportRow(
            id=report_id, run_id=run_id, created_at=created_at, **columns_of(report, omit={"items"})
        )
    )
    # Without relationships the unit of work does not order inserts across tables: the
    # report row must exist before its items reference it.
    session.flush()
    session.add_all(
        ReportItemRow(
            report_id=report_id,
            position=position,
            coercions=None if item.coercions is None else list(item.coercions),
            repairs=None if item.repairs is None else list(item.repairs),
            **columns_of(item, omit={"coercions", "repairs"}),
        )
        for position, item in enumerate(report.items)
    )
