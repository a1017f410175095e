"""``salvagelane serve``: the long-running scheduler node.

One node leads at a time (:mod:`salvagelane.runtime.leadership`); the others stand by
and poll the lock. The leader schedules every instruction definition, and on taking the
lead it first settles what happened while nobody led (:mod:`.fire_planner`): stale runs
are marked interrupted and retried once within grace, the newest unrun fire is caught up,
older ones are recorded missed. Each fire claims its run before it runs
(:mod:`.fire_runner`), so a duplicate does nothing but publish ``fire.duplicate``.

With a :class:`Dispatch` (``serve --dispatch queue``, docs/adr/0013) the leader executes
nothing itself: each fire, catch-up and retry is claimed ``queued`` and handed to the
task queue in the same transaction, and ``salvagelane worker`` processes run it.

Stopping (SIGTERM/SIGINT) ends new fires at once, lets runs in flight finish for up to
the shutdown timeout, then marks those still going ``interrupted``. SIGHUP reloads the
definitions; a definition that no longer loads is reported and its previous version kept.
This module is the coordinator: it owns the definitions and wires the parts together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from salvagelane.definitions import Instruction
from salvagelane.definitions.directory import DefinitionSet, load_definitions, require_loadable
from salvagelane.errors import ConfigurationError, SalvagelaneError
from salvagelane.events import EventStream, logged_stream
from salvagelane.events.kinds import (
    DefinitionInvalid,
    DefinitionsReloaded,
    DefinitionsReloadFailed,
    FireDropped,
    RedeliveryFailed,
    ShutdownWaiting,
)
from salvagelane.runtime.delivery import redeliver_due, sinks_from_definitions
from salvagelane.runtime.executor import ConnectorFactory, SinkFactory, mark_abandoned
from salvagelane.runtime.fire_planner import FirePlanner
from salvagelane.runtime.fire_runner import Dispatch, Fire, FireRunner
from salvagelane.runtime.leadership import Gate, LeaderLoop
from salvagelane.runtime.notifications import NotificationsFor, Notifier
from salvagelane.runtime.scheduler import CronScheduler, ScheduleRow, schedule_table
from salvagelane.runtime.settings import ServeSettings
from salvagelane.store import LeaderLock, Store
from salvagelane.vocabulary import Clock, Trigger, utc_now

__all__ = [
    "TARGET",
    "DefinitionSet",
    "Dispatch",
    "Fire",
    "LeaderLock",
    "ServeSettings",
    "Service",
    "fire",
]

TARGET = "salvagelane.runtime.service:fire"
"""The textual job reference every scheduled job names."""

Announce = Callable[[str], None]
RenderSchedule = Callable[[Sequence[ScheduleRow]], str]
"""How the leader's banner shows the next fires (the command line's table)."""


# --- the job function ------------------------------------------------------------------------

_active: Service | None = None
_active_guard = threading.Lock()


SWEEP_SECONDS = 300.0
"""How often the leader looks for notifications a killed process left unwritten."""


def fire(
    *,
    instruction_id: str,
    scheduled_for: str,
    trigger: str = Trigger.SCHEDULE,
    retry_of: str | None = None,
) -> None:
    """The job function (named textually by :data:`TARGET`): run one fire on the
    service of this process."""
    service = _active
    moment = datetime.fromisoformat(scheduled_for)
    if service is None:
        # No service, so no stream of its own: the fact still reaches the log.
        logged_stream().publish(
            FireDropped(
                instruction_id=instruction_id,
                scheduled_for=moment,
                trigger=Trigger(trigger),
                retry_of=retry_of,
                reason="no service is running",
            )
        )
        return
    service.fire(instruction_id, moment, trigger=Trigger(trigger), retry_of=retry_of)


# --- the service -----------------------------------------------------------------------------


class Service:
    """One scheduler node. :meth:`serve` blocks until :meth:`request_stop`.

    ``connector_for`` and ``sinks_for`` build what each run calls (as for
    :class:`~salvagelane.runtime.executor.Executor`); ``announce`` prints human lines (the
    schedule table, standby and stop notices), the table as ``render_schedule`` lays it
    out (without it the leader's banner only counts the instructions); ``clock`` is the
    wall clock; ``events`` gets every fact of the node and of its runs (None: a stream
    that logs them).
    """

    def __init__(
        self,
        settings: ServeSettings,
        *,
        store: Store,
        lock: LeaderLock,
        connector_for: ConnectorFactory,
        sinks_for: SinkFactory,
        announce: Announce = lambda line: None,
        render_schedule: RenderSchedule | None = None,
        clock: Clock = utc_now,
        events: EventStream | None = None,
        dispatch: Dispatch | None = None,
        notifications_for: NotificationsFor | None = None,
    ) -> None:
        if problem := settings.problem():
            raise ConfigurationError(f"serve: {problem}")
        self._settings = settings
        self._store = store
        self._sinks_for = sinks_for
        self._announce = announce
        self._render_schedule = render_schedule
        self._clock = clock
        self._events = events or logged_stream()  # fires, and each run's events
        self._definitions: Mapping[str, Instruction] = {}
        self._scheduler: CronScheduler | None = None
        self._gate = Gate()
        self._loop = LeaderLoop(
            settings, lock=lock, gate=self._gate, events=self._events, announce=announce
        )
        self._planner = FirePlanner(
            settings,
            store=store,
            definitions=lambda: self._definitions,
            clock=clock,
            events=self._events,
            announce=announce,
            dispatch=dispatch,
        )
        self._runner = FireRunner(
            settings,
            store=store,
            definitions=lambda: self._definitions,
            connector_for=connector_for,
            sinks_for=sinks_for,
            gate=self._gate,
            clock=clock,
            events=self._events,
            dispatch=dispatch,
        )
        # The definitions' notify: sent as the runs' events arrive, retried with the
        # deliveries, and swept for what a killed process left unwritten.
        self._notifications_for = notifications_for
        self._notifier: Notifier | None = None
        self._swept_at: datetime | None = None
        if notifications_for is not None:
            self._notifier = Notifier(
                store,
                definitions=lambda: self._definitions,
                notifications_for=notifications_for,
                clock=clock,
                events=self._events,
            )
            self._notifier.subscribe(self._events)
        self.abandoned_runs: tuple[str, ...] = ()
        """Runs still executing when the node stopped (marked interrupted)."""
        self._redelivery: threading.Thread | None = None
        self.unfinished_threads = 0
        """Fire or delivery threads still working when the node stopped (they may still
        use the HTTP client: the process should exit without closing it under them)."""

    # --- control, from signal handlers ----------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Stop: no new fires; runs in flight get the shutdown timeout. Signal-safe."""
        self._loop.request_stop(reason)

    def request_reload(self) -> None:
        """Reload the definitions at the next chance. Signal-safe."""
        self._loop.request_reload()

    @property
    def in_flight(self) -> dict[str, str]:
        """Runs executing now: run id -> instruction id."""
        return self._runner.in_flight

    # --- the main loop --------------------------------------------------------------------

    def load(self) -> None:
        """Load the definitions (first start); ConfigurationError when none loads."""
        found = load_definitions(self._settings.instructions_dir)
        self._report_problems(found)
        require_loadable(found, self._settings.instructions_dir)
        self._definitions = found.instructions

    def serve(self) -> None:
        """Stand by until leading, lead until stopped (or the lead is lost), repeat."""
        global _active
        with _active_guard:
            if _active is not None:
                raise SalvagelaneError("another salvagelane service is running in this process")
            _active = self
        try:
            if not self._definitions:
                self.load()
            self._loop.run(self)
        finally:
            with _active_guard:
                _active = None

    # --- the lead (LeadHooks) -------------------------------------------------------------

    def instruction_count(self) -> int:
        return len(self._definitions)

    def begin_lead(self) -> None:
        scheduler = CronScheduler(
            target=TARGET, max_workers=self._settings.max_workers, on_skipped=self._planner.skipped
        )
        for instruction in self._definitions.values():
            scheduler.add_instruction(instruction)
        self._scheduler = scheduler
        self._planner.begin_lead()
        started = self._clock()
        scheduler.start()
        # After start(): the scheduler owns fires from now on, catch-up the ones up to
        # now; one at the boundary is claimed by whichever comes first.
        now = self._clock()
        self._submit(self.recover(now))
        self._submit(self.catch_up(now, scheduler_since=started))
        banner = f"leader: scheduling {len(self._definitions)} instruction(s)"
        if self._render_schedule is not None:
            rows = schedule_table(self._definitions.values(), now)
            banner += "; next fires:\n" + self._render_schedule(rows)
        self._announce(banner)

    def poll(self) -> None:
        now = self._clock()
        self._submit(self.recover(now))
        self.settle(now)
        self._redeliver_in_background()

    def end_lead(self, *, lost: bool) -> int:
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=False)
        timeout = self._settings.shutdown_timeout_seconds
        stop_reason = self._loop.stop_reason
        reason = "the scheduler lock was lost" if lost else f"serve stopped ({stop_reason})"
        waiting = self.in_flight
        if waiting:
            self._events.publish(
                ShutdownWaiting(runs=tuple(sorted(waiting)), timeout_seconds=timeout)
            )
            self._announce(
                f"stopping: waiting up to {timeout:g} s for {len(waiting)} run(s) to finish"
            )
        began = time.monotonic()
        self._gate.wait_for_fires(timeout)
        redelivery = self._redelivery
        if redelivery is not None:
            redelivery.join(max(0.0, timeout - (time.monotonic() - began)))
        abandoned = self.in_flight
        mark_abandoned(self._store, abandoned, reason=reason, timeout=timeout, now=self._clock())
        self.abandoned_runs = tuple(sorted(abandoned))
        self.unfinished_threads = self._gate.active + int(
            redelivery is not None and redelivery.is_alive()
        )
        if not lost:
            # Still the leader: no fire due by now may be left without an outcome. (A
            # node that lost the lock leaves that to the node that took it.)
            self._planner.settle_before(
                self._clock(), f"serve stopped ({stop_reason}) before it ran"
            )
        return len(abandoned)

    def reload(self) -> None:
        self._reload()

    @property
    def definitions(self) -> Mapping[str, Instruction]:
        """The definitions this node serves now (the last good load of each)."""
        return self._definitions

    def redeliver(self) -> None:
        """One pass over the deliveries that are due: failed ones after their backoff,
        pending ones whose process died once their lease ended; and, every
        :data:`SWEEP_SECONDS`, the notifications a killed process left unwritten. Never
        raises."""
        now = self._clock()
        try:
            if self._notifier is not None and (
                self._swept_at is None or (now - self._swept_at).total_seconds() >= SWEEP_SECONDS
            ):
                self._swept_at = now
                self._notifier.sweep(now)
            redeliver_due(
                self._store,
                sinks_for_run=sinks_from_definitions(
                    self._definitions, self._sinks_for, self._notifications_for
                ),
                now=now,
                clock=self._clock,
                events=self._events,
            )
        except SalvagelaneError as exc:
            self._events.publish(RedeliveryFailed(exception=exc))

    def _redeliver_in_background(self) -> None:
        # A thread of its own: a slow sink must not hold up the poll loop that notices
        # dead runs and settles fires. One pass at a time.
        if self._redelivery is not None and self._redelivery.is_alive():
            return
        self._redelivery = threading.Thread(target=self.redeliver, name="redeliver", daemon=True)
        self._redelivery.start()

    # --- the fires ------------------------------------------------------------------------

    def recover(self, now: datetime) -> list[Fire]:
        """Mark runs with a stale heartbeat interrupted; return the retries to run: each
        interrupted scheduled run whose fire is within grace, once."""
        return self._planner.recover(now)

    def catch_up(self, now: datetime, *, scheduler_since: datetime | None = None) -> list[Fire]:
        """Settle each instruction's fires up to ``now`` that have no run row: the newest
        fire, when unrun and within grace, is returned to run once as a catch-up; the
        other unrun ones are recorded as missed."""
        return self._planner.catch_up(now, scheduler_since=scheduler_since)

    def settle(self, now: datetime) -> None:
        """Record as missed every fire whose misfire grace has passed without a run row."""
        self._planner.settle(now)

    def fire(
        self,
        instruction_id: str,
        scheduled_for: datetime,
        *,
        trigger: Trigger = Trigger.SCHEDULE,
        retry_of: str | None = None,
    ) -> None:
        """Claim and run one fire (in a worker thread). Never raises: a fire that fails
        is recorded on its run and published; the scheduler goes on."""
        self._runner.fire(instruction_id, scheduled_for, trigger=trigger, retry_of=retry_of)

    def _submit(self, fires: Sequence[Fire]) -> None:
        scheduler = self._scheduler
        if scheduler is None:
            raise SalvagelaneError("cannot submit fires: this node does not lead")
        for one in fires:
            scheduler.run_now(
                one.name,
                instruction_id=one.instruction_id,
                scheduled_for=one.scheduled_for.isoformat(),
                trigger=one.trigger.value,
                retry_of=one.retry_of,
            )

    # --- reload ---------------------------------------------------------------------------

    def _reload(self) -> None:
        try:
            found = load_definitions(self._settings.instructions_dir, self._definitions)
        except ConfigurationError as exc:
            self._events.publish(DefinitionsReloadFailed(error=str(exc)))
            self._announce(f"reload failed, keeping every definition: {exc}")
            return
        self._report_problems(found)
        before = self._definitions
        after = found.instructions
        # Jobs look their definition up when they fire, so only a new schedule needs a
        # new job; every other change takes effect at the next fire.
        changed = [
            i for i in after.values() if i.id not in before or before[i.id].schedule != i.schedule
        ]
        updated = [
            i.id
            for i in after.values()
            if i.id in before and before[i.id].definition_sha256 != i.definition_sha256
        ]
        removed = sorted(set(before) - set(after))
        self._definitions = after
        scheduler = self._scheduler
        # What this reload scheduled, said once for the log and the console: a node that
        # does not lead (standing by, or reloading just before it takes the lead)
        # schedules nothing here; the lead schedules every instruction when it starts.
        rescheduled: list[str] = []
        if scheduler is not None:
            now = self._clock()
            for instruction in changed:
                scheduler.add_instruction(instruction)
                rescheduled.append(instruction.id)
                schedule = instruction.schedule
                since = self._store.register_schedule(
                    instruction.id, cron=schedule.cron, timezone=schedule.timezone, now=now
                )
                # The new schedule's fires are due from `since` on; none before.
                self._planner.rescheduled(instruction.id, since)
            for instruction_id in removed:
                scheduler.remove_instruction(instruction_id)
                self._planner.removed(instruction_id)
        kept = list(found.kept)
        self._events.publish(
            DefinitionsReloaded(
                instructions=tuple(sorted(after)),
                scheduled=tuple(sorted(after)) if scheduler is not None else (),
                rescheduled=tuple(sorted(rescheduled)),
                updated=tuple(sorted(updated)),
                removed=tuple(removed),
                kept_previous=tuple(kept),
            )
        )
        counts = f"{len(updated)} changed, "
        if scheduler is not None:
            counts += f"{len(rescheduled)} (re)scheduled, "
        counts += f"{len(removed)} removed, {len(kept)} kept at their previous version"
        self._announce(
            f"reloaded: {len(after)} instruction(s); {counts}"
            + ("" if scheduler is not None else "; scheduled when this node leads")
        )

    def _report_problems(self, found: DefinitionSet) -> None:
        for problem in found.problems:
            self._events.publish(DefinitionInvalid(error=problem))
            self._announce(f"invalid definition: {problem}")
