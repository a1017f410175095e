"""One fire: claim its run and run it through the Executor (or enqueue it through the
dispatch), one run of an instruction at a time, with the runs in flight kept for a stop.

Every fire claims (instruction, fire time) in the database before it runs, so a
duplicate (another node, a catch-up racing the scheduler, an external ``run
--scheduled-for``) does nothing but publish ``fire.duplicate``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypedDict

from salvagelane.definitions import Instruction
from salvagelane.errors import DuplicateFireError, SalvagelaneError
from salvagelane.events import EventStream
from salvagelane.events.kinds import (
    FireClaimed,
    FireCrashed,
    FireDuplicate,
    FireNotQueued,
    FireReceived,
    FireSkipped,
    FireUnknown,
)
from salvagelane.logs import bound
from salvagelane.runtime.executor import ConnectorFactory, Executor, SinkFactory
from salvagelane.runtime.leadership import Gate
from salvagelane.runtime.settings import ServeSettings
from salvagelane.store import Store
from salvagelane.vocabulary import Clock, Trigger

Definitions = Callable[[], Mapping[str, Instruction]]
"""The definitions as they stand now (a reload replaces them)."""


class Dispatch(Protocol):
    """Where a leader sends fires instead of running them (``serve --dispatch queue``:
    :class:`salvagelane.runtime.dispatch.QueueDispatch`)."""

    def enqueue(
        self,
        instruction: Instruction,
        *,
        scheduled_for: datetime,
        trigger: Trigger,
        retry_of: str | None,
        now: datetime,
    ) -> str:
        """Claim the fire and enqueue its run in one transaction; returns the run id
        (DuplicateFireError when the fire is claimed already)."""
        ...

    def release_interrupted(self) -> object:
        """Free what the runs just marked interrupted still hold in the queue."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Fire:
    """A run the leader asks for outside the cron jobs: a catch-up or a retry."""

    instruction_id: str
    scheduled_for: datetime
    trigger: Trigger
    retry_of: str | None = None

    @property
    def name(self) -> str:
        kind = "retry" if self.retry_of else self.trigger
        return f"{kind}:{self.instruction_id}:{self.scheduled_for.isoformat()}"


class FireFields(TypedDict):
    """The fields every event about one fire carries."""

    instruction_id: str
    scheduled_for: datetime
    trigger: Trigger
    retry_of: str | None


class FireRunner:
    """Runs fires (each in the scheduler's worker thread that calls :meth:`fire`)."""

    def __init__(
        self,
        settings: ServeSettings,
        *,
        store: Store,
        definitions: Definitions,
        connector_for: ConnectorFactory,
        sinks_for: SinkFactory,
        gate: Gate,
        clock: Clock,
        events: EventStream,
        dispatch: Dispatch | None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._definitions = definitions
        self._connector_for = connector_for
        self._sinks_for = sinks_for
        self._gate = gate
        self._clock = clock
        self._events = events
        self._dispatch = dispatch
        self._guard = threading.Lock()
        self._in_flight: dict[str, str] = {}  # run id -> instruction id
        self._instruction_locks: dict[str, threading.Lock] = {}

    @property
    def in_flight(self) -> dict[str, str]:
        """Runs executing now: run id -> instruction id."""
        with self._guard:
            return dict(self._in_flight)

    def fire(
        self,
        instruction_id: str,
        scheduled_for: datetime,
        *,
        trigger: Trigger = Trigger.SCHEDULE,
        retry_of: str | None = None,
    ) -> None:
        """Claim and run one fire (in a worker thread). Never raises: a fire that fails
        is recorded on its run and logged; the scheduler goes on."""
        with bound(instruction=instruction_id):
            fields = FireFields(
                instruction_id=instruction_id,
                scheduled_for=scheduled_for,
                trigger=trigger,
                retry_of=retry_of,
            )
            instruction = self._definitions().get(instruction_id)
            if instruction is None:
                self._events.publish(FireUnknown(**fields))
                return
            self._events.publish(FireReceived(**fields))
            if self._dispatch is not None:
                self._enqueue(self._dispatch, instruction, scheduled_for, trigger, retry_of, fields)
                return
            # The gate is passed once the instruction's lock is held: a fire that waited
            # for the instruction's previous run through a stop (or a lost lead) stays
            # unclaimed, and the settlement at the stop, or the next leader's catch-up,
            # gives it its outcome.
            with self._instruction_lock(instruction_id), self._gate.passing() as open_:
                if not open_:
                    self._events.publish(FireSkipped(reason="not leading", **fields))
                    return
                self._run(instruction, scheduled_for, trigger, retry_of, fields)

    def _run(
        self,
        instruction: Instruction,
        scheduled_for: datetime,
        trigger: Trigger,
        retry_of: str | None,
        fields: FireFields,
    ) -> None:
        claimed: list[str] = []

        def on_claimed(run_id: str) -> None:
            claimed.append(run_id)
            with self._guard:
                self._in_flight[run_id] = instruction.id
            self._events.publish(FireClaimed(run_id=run_id, **fields))

        executor = Executor(
            self._store,
            connector_for=self._connector_for,
            sinks_for=self._sinks_for,
            heartbeat_seconds=self._settings.heartbeat_seconds,
            on_claimed=on_claimed,
            events=self._events,
        )
        try:
            executor.run(
                instruction, trigger=trigger, scheduled_for=scheduled_for, retry_of=retry_of
            )
        except DuplicateFireError:
            self._events.publish(FireDuplicate(**fields))
        except Exception as exc:
            # Recorded on the run by the executor where the database allowed; the
            # scheduler thread must survive it.
            self._events.publish(FireCrashed(exception=exc, **fields))
        finally:
            with self._guard:
                for run_id in claimed:
                    self._in_flight.pop(run_id, None)

    def _enqueue(
        self,
        dispatch: Dispatch,
        instruction: Instruction,
        scheduled_for: datetime,
        trigger: Trigger,
        retry_of: str | None,
        fields: FireFields,
    ) -> None:
        # The queue keeps one run of an instruction at a time (across workers): no
        # instruction lock here, a fire is claimed as soon as it comes.
        if self._gate.shut:
            self._events.publish(FireSkipped(reason="not leading", **fields))
            return
        try:
            run_id = dispatch.enqueue(
                instruction,
                scheduled_for=scheduled_for,
                trigger=trigger,
                retry_of=retry_of,
                now=self._clock(),
            )
        except DuplicateFireError:
            self._events.publish(FireDuplicate(**fields))
        except SalvagelaneError as exc:
            # Claim and job rolled back together: the fire is unclaimed, and settling
            # (or the next leader's catch-up) gives it its outcome.
            self._events.publish(FireNotQueued(exception=exc, **fields))
        else:
            self._events.publish(FireClaimed(run_id=run_id, queued=True, **fields))

    @contextmanager
    def _instruction_lock(self, instruction_id: str) -> Iterator[None]:
        # One run of an instruction at a time, whether the scheduler, a catch-up or a
        # retry started it (APScheduler's max_instances only sees its own job).
        with self._guard:
            lock = self._instruction_locks.setdefault(instruction_id, threading.Lock())
        with lock:
            yield

    # --- reload ---------------------------------------------------------------------------
