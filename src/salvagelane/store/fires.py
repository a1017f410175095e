"""The bookkeeping of scheduled fires: claims, missed fires, retries, schedules.

Reached through :attr:`Store.fires <salvagelane.store.Store.fires>` (and the
:class:`~salvagelane.store.Store` methods of the same names). A fire is claimed by
inserting its run row: the unique index on (instruction_id, scheduled_for,
fire_attempt) lets exactly one of any number of concurrent inserts commit, from any
process, so a fire runs once, is retried once when interrupted, or is recorded
``missed`` once. Every method is one transaction.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from salvagelane.errors import DuplicateFireError, StoreError
from salvagelane.store._rows import (
    Transactions,
    insert_definition,
    interrupt,
    last_sign_of_life,
    new_id,
    summaries,
)
from salvagelane.store.models import FIRE_CONSTRAINT, RunRow, ScheduleStateRow
from salvagelane.store.values import DefinitionRecord, RunSummary
from salvagelane.vocabulary import RunStatus, Trigger


class FireLedger:
    """The scheduled fires of instructions, on the store's database."""

    def __init__(self, transaction: Transactions, url: str) -> None:
        self._transaction = transaction
        self._url = url

    # --- claims -----------------------------------------------------------------------------

    def insert_run(
        self,
        run: RunRow,
        operation: str,
        *,
        definition: DefinitionRecord | None = None,
        now: datetime | None = None,
    ) -> None:
        """Insert ``run`` (and the ``definition`` version it uses, unless stored already);
        DuplicateFireError when its fire already has a row: the insert is the claim."""
        try:
            with self._transaction(operation) as session:
                if definition is not None:
                    assert now is not None
                    insert_definition(session, definition, now)
                session.add(run)
        except StoreError as exc:
            if run.scheduled_for is not None and is_fire_conflict(exc.__cause__):
                raise DuplicateFireError(
                    instruction_id=run.instruction_id,
                    scheduled_for=run.scheduled_for,
                    where=self._url,
                ) from exc.__cause__
            raise

    def record_missed(
        self,
        *,
        instruction_id: str,
        definition_sha256: str,
        scheduled_for: datetime,
        now: datetime,
        reason: str,
    ) -> str | None:
        """Record a scheduled fire that will not be run, as a ``missed`` run; returns its id.

        None when that fire already has a row (it ran, runs, or was recorded as missed by
        another node): recording a miss claims the fire just as starting a run does.
        """
        run_id = new_id()
        run = RunRow(
            id=run_id,
            instruction_id=instruction_id,
            definition_sha256=definition_sha256,
            trigger=Trigger.SCHEDULE,
            scheduled_for=scheduled_for,
            fire_attempt=1,
            status=RunStatus.MISSED,
            created_at=now,
            started_at=now,
            finished_at=now,
            heartbeat_at=None,
            error=f"missed: should have fired at {scheduled_for.isoformat()}; {reason}",
        )
        try:
            self.insert_run(run, f"record a missed fire of {instruction_id}")
        except DuplicateFireError:
            return None
        return run_id

    def reclaim_stale_fire(
        self, instruction_id: str, scheduled_for: datetime, *, stale_before: datetime, now: datetime
    ) -> RunSummary | None:
        """Settle a fire whose claim may belong to a dead process, for a command that finds
        the fire already claimed (``run --scheduled-for`` without ``serve``).

        A run of the fire still ``running`` whose heartbeat is older than ``stale_before``
        is marked ``interrupted``, as a ``serve`` leader would. Returns the fire's first
        run when it is now interrupted and nobody has claimed its one retry yet: the
        caller claims that retry (a concurrent claimer makes it a DuplicateFireError).
        None when there is nothing to take over.
        """
        of_fire = (RunRow.instruction_id == instruction_id, RunRow.scheduled_for == scheduled_for)
        with self._transaction(f"take over the {instruction_id} fire") as session:
            stale = session.scalars(
                sa.select(RunRow)
                .where(
                    *of_fire,
                    RunRow.status == RunStatus.RUNNING,
                    last_sign_of_life() < stale_before,
                )
                .with_for_update()
            )
            for run in list(stale):
                interrupt(run, now=now, noticed=" (noticed by the next claim of the same fire)")
            session.flush()
            runs = list(
                session.scalars(sa.select(RunRow).where(*of_fire).order_by(RunRow.fire_attempt))
            )
            if (
                len(runs) != 1
                or runs[0].status != RunStatus.INTERRUPTED
                or runs[0].fire_attempt != 1
            ):
                return None
            (first,) = summaries(session, runs)
            return first

    # --- reads ------------------------------------------------------------------------------

    def has_sign_of_life(self, run_id: str, *, since: datetime) -> bool:
        """Whether run ``run_id`` had a heartbeat (or started) at or after ``since``."""
        with self._transaction(f"read the heartbeat of run {run_id}") as session:
            moment = session.scalar(sa.select(last_sign_of_life()).where(RunRow.id == run_id))
        return moment is not None and moment >= since

    def fire_attempt_of(self, run_id: str) -> int:
        """The ``fire_attempt`` of run ``run_id`` (1 for a run that retries nothing, and
        for an id not stored); a retry of it takes the next one, so two claims of the
        same retry collide on the one-run-per-fire index."""
        with self._transaction(f"read the fire attempt of run {run_id}") as session:
            attempt = session.scalar(sa.select(RunRow.fire_attempt).where(RunRow.id == run_id))
        return 1 if attempt is None else attempt

    def runs_for_fire(self, instruction_id: str, scheduled_for: datetime) -> list[RunSummary]:
        """The runs that claimed this fire (the fire, then its retry), in that order."""
        stmt = (
            sa.select(RunRow)
            .where(RunRow.instruction_id == instruction_id, RunRow.scheduled_for == scheduled_for)
            .order_by(RunRow.fire_attempt)
        )
        with self._transaction(f"read the runs of a fire of {instruction_id}") as session:
            return summaries(session, list(session.scalars(stmt)))

    def unretried_interrupted_fires(self, *, since: datetime) -> list[RunSummary]:
        """Interrupted runs of scheduled fires at or after ``since`` that no run retries
        yet (and that are not retries themselves), oldest fire first."""
        retried = sa.select(RunRow.retry_of).where(RunRow.retry_of.is_not(None))
        stmt = (
            sa.select(RunRow)
            .where(
                RunRow.status == RunStatus.INTERRUPTED,
                RunRow.scheduled_for.is_not(None),
                RunRow.scheduled_for >= since,
                RunRow.fire_attempt == 1,
                RunRow.id.not_in(retried),
            )
            .order_by(RunRow.scheduled_for, RunRow.id)
        )
        with self._transaction("list interrupted fires") as session:
            return summaries(session, list(session.scalars(stmt)))

    def recorded_fires(
        self, instruction_id: str, *, start: datetime, end: datetime
    ) -> set[datetime]:
        """The fire times in ``[start, end]`` of ``instruction_id`` that have a run row (any
        status, missed ones included): the fires that have an outcome."""
        stmt = (
            sa.select(RunRow.scheduled_for)
            .where(
                RunRow.instruction_id == instruction_id,
                RunRow.scheduled_for >= start,
                RunRow.scheduled_for <= end,
            )
            .distinct()
        )
        with self._transaction(f"read the recorded fires of {instruction_id}") as session:
            return {moment for moment in session.scalars(stmt) if moment is not None}

    # --- schedules --------------------------------------------------------------------------

    def register_schedule(
        self, instruction_id: str, *, cron: str, timezone: str, now: datetime
    ) -> datetime:
        """Remember that ``instruction_id`` is scheduled with ``cron`` in ``timezone``;
        returns since when: ``now`` for a new or changed schedule, else the stored moment."""
        with self._transaction(f"register the schedule of {instruction_id}") as session:
            state = session.get(ScheduleStateRow, instruction_id, with_for_update=True)
            if state is None:
                state = ScheduleStateRow(
                    instruction_id=instruction_id,
                    cron=cron,
                    timezone=timezone,
                    effective_since=now,
                    updated_at=now,
                )
                session.add(state)
            elif (state.cron, state.timezone) != (cron, timezone):
                state.cron, state.timezone, state.effective_since = cron, timezone, now
            state.updated_at = now
            return state.effective_since


def is_fire_conflict(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a violation of the one-run-per-fire index (and no other)."""
    if not isinstance(exc, sa.exc.IntegrityError):
        return False
    # psycopg names the violated constraint (or unique index); SQLite names its columns.
    diag = getattr(exc.orig, "diag", None)
    if diag is not None:
        return getattr(diag, "constraint_name", None) == FIRE_CONSTRAINT
    return "UNIQUE constraint failed: runs.instruction_id, runs.scheduled_for" in str(exc.orig)
