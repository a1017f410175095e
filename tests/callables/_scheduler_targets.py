"""Functions the scheduler tests name as ``_scheduler_targets:<function>``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One call of a target: what it was given and when it ran (monotonic seconds)."""

    instruction_id: str
    scheduled_for: str
    started: float
    ended: float


calls: list[Call] = []
"""Every call a function here finished, in order (cleared by the tests)."""

_lock = threading.Lock()
running = 0
most_running = 0
"""The most calls that ran at the same time."""


def reset() -> None:
    global running, most_running
    with _lock:
        calls.clear()
        running = 0
        most_running = 0


def _record(instruction_id: str, scheduled_for: str, seconds: float) -> None:
    global running, most_running
    started = time.monotonic()
    with _lock:
        running += 1
        most_running = max(most_running, running)
    try:
        time.sleep(seconds)
    finally:
        with _lock:
            running -= 1
            calls.append(
                Call(
                    instruction_id=instruction_id,
                    scheduled_for=scheduled_for,
                    started=started,
                    ended=time.monotonic(),
                )
            )


def record(*, instruction_id: str, scheduled_for: str) -> None:
    _record(instruction_id, scheduled_for, 0.0)


def slow(*, instruction_id: str, scheduled_for: str) -> None:
    """Takes 2.5 s: longer than the one second between fires."""
    _record(instruction_id, scheduled_for, 2.5)
