"""Leading: stand by until the scheduler lock is ours, lead until stopped or the lock is
lost, step down, repeat; and the gate every fire passes before it claims.

One node leads at a time (see :mod:`salvagelane.store.leadership`); the others stand by
and poll the lock. What a lead does (schedule, settle the past, run fires) is the
:class:`LeadHooks`' business: this module only decides when a lead begins, polls and ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from salvagelane.events import EventStream
from salvagelane.events.kinds import LeaderAcquired, LeaderLost, LeaderReleased, LeaderStandby
from salvagelane.runtime.settings import ServeSettings
from salvagelane.store import LeaderLock

Announce = Callable[[str], None]


class Gate:
    """The gate every fire passes before it claims: closed while the node does not lead
    (or is stopping), so a fire thread left over from a lead cannot start a run after it.
    Counts the fires past it, so that a step-down can wait for them."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._guard = threading.Lock()
        self._fires_done = threading.Condition(self._guard)
        self._closed = False
        self._active = 0

    def open(self) -> None:
        with self._guard:
            self._closed = False

    def close(self) -> None:
        with self._guard:
            self._closed = True

    @property
    def shut(self) -> bool:
        """Closed, or the node is stopping: no fire may claim now."""
        with self._guard:
            return self._closed or self.stopping.is_set()

    @property
    def active(self) -> int:
        """Fires past the gate and not done yet."""
        with self._guard:
            return self._active

    @contextmanager
    def passing(self) -> Iterator[bool]:
        """Pass the gate: yields whether it was open (the fire then counts as active
        until the block ends)."""
        with self._guard:
            shut = self._closed or self.stopping.is_set()
            if not shut:
                self._active += 1
        try:
            yield not shut
        finally:
            if not shut:
                with self._fires_done:
                    self._active -= 1
                    self._fires_done.notify_all()

    def wait_for_fires(self, timeout: float) -> None:
        """Until every fire past the gate is done, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._fires_done:
            while self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._fires_done.wait(left)


class LeadHooks(Protocol):
    """What a node does as it leads (:class:`salvagelane.runtime.service.Service`)."""

    def instruction_count(self) -> int:
        """How many instructions the lead schedules."""
        ...

    def begin_lead(self) -> None:
        """The lead began: schedule, and settle what happened while nobody led."""
        ...

    def poll(self) -> None:
        """One poll interval of the lead passed."""
        ...

    def end_lead(self, *, lost: bool) -> int:
        """The lead ends (the gate is closed already); returns how many runs were
        abandoned. The lock is released after it."""
        ...

    def reload(self) -> None:
        """Read the definitions again."""
        ...


@dataclass(kw_only=True, slots=True)
class _Flags:
    """What signal handlers ask for; the main loop acts on it."""

    wake: threading.Event = field(default_factory=threading.Event)
    stop_reason: str | None = None
    reload: bool = False


class LeaderLoop:
    """Stand by until leading, lead until stopped (or the lead is lost), repeat."""

    def __init__(
        self,
        settings: ServeSettings,
        *,
        lock: LeaderLock,
        gate: Gate,
        events: EventStream,
        announce: Announce,
    ) -> None:
        self._settings = settings
        self._lock = lock
        self._gate = gate
        self._events = events
        self._announce = announce
        self._flags = _Flags()

    # --- control, from signal handlers ----------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Stop: no new fires; runs in flight get the shutdown timeout. Signal-safe."""
        self._flags.stop_reason = self._flags.stop_reason or reason
        self._gate.stopping.set()
        self._flags.wake.set()

    def request_reload(self) -> None:
        """Reload the definitions at the next chance. Signal-safe."""
        self._flags.reload = True
        self._flags.wake.set()

    @property
    def stop_reason(self) -> str:
        return self._flags.stop_reason or "stop requested"

    # --- the loop -------------------------------------------------------------------------

    def run(self, node: LeadHooks) -> None:
        """Until stopped: lead whenever the lock can be taken, else stand by."""
        if not self._settings.standby:
            self._lock.acquire()  # refuses, with the lock's own explanation
        standing_by = False
        while not self._gate.stopping.is_set():
            if self._lock.try_acquire():
                if standing_by:
                    # The files may have changed while this node waited.
                    standing_by = False
                    node.reload()
                self._lead(node)
                continue
            if not standing_by:
                standing_by = True
                self._events.publish(LeaderStandby(poll_seconds=self._settings.poll_seconds))
                self._announce(
                    "standby: another node leads; taking over when it stops "
                    f"(checking every {self._settings.poll_seconds:g} s)"
                )
            self._wait(node)

    def _wait(self, node: LeadHooks) -> None:
        self._flags.wake.wait(self._settings.poll_seconds)
        self._flags.wake.clear()
        if self._flags.reload and not self._gate.stopping.is_set():
            self._flags.reload = False
            node.reload()

    def _lead(self, node: LeadHooks) -> None:
        self._events.publish(LeaderAcquired(instructions=node.instruction_count()))
        self._gate.open()
        lost = False
        try:
            node.begin_lead()
            while True:
                self._wait(node)
                if self._gate.stopping.is_set():
                    break
                if not self._lock.is_held():
                    lost = True
                    self._events.publish(LeaderLost())
                    self._announce("lost the scheduler lock (database connection?): standing by")
                    break
                node.poll()
        finally:
            self._gate.close()
            abandoned = node.end_lead(lost=lost)
            self._lock.release()
            self._events.publish(LeaderReleased(abandoned_runs=abandoned))
