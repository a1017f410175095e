"""How a ``serve`` node serves: its settings, one object the command line takes its
option defaults from (a light module: ``serve --help`` loads no scheduler)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

DEFAULT_QUEUE_STALL_SECONDS = 300.0
"""How long queued runs may wait with no worker consuming the task queue before they
count as stalled (``serve``, ``health`` and the metrics: ``--queue-stall-after``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeSettings:
    """How a node serves. ``standby``: wait for the leader lock (PostgreSQL) rather than
    refuse to start when another node holds it (SQLite: one node only)."""

    instructions_dir: Path
    standby: bool = True
    poll_seconds: float = 5.0
    shutdown_timeout_seconds: float = 30.0
    heartbeat_seconds: float = 15.0
    stale_after_seconds: float = 60.0
    max_workers: int = 4
    look_back: timedelta = timedelta(days=7)
    queue_stall_seconds: float = DEFAULT_QUEUE_STALL_SECONDS
    """Queued runs waiting this long with no worker consuming the task queue: a
    ``--dispatch queue`` leader warns, an in-process one settles them (docs/adr/0013)."""

    def problem(self) -> str | None:
        """What is unusable about these settings, or None."""
        if min(self.poll_seconds, self.heartbeat_seconds, self.stale_after_seconds) <= 0:
            return "poll, heartbeat and stale-after seconds must be positive"
        if self.shutdown_timeout_seconds < 0:
            return "the shutdown timeout must not be negative"
        if self.stale_after_seconds < 2 * self.heartbeat_seconds:
            # A live run beats every heartbeat_seconds; a threshold closer than two beats
            # would take one slow database write for a dead process.
            return (
                f"stale-after ({self.stale_after_seconds:g} s) must be at least twice the "
                f"heartbeat ({self.heartbeat_seconds:g} s)"
            )
        if not 0 < self.queue_stall_seconds < float("inf"):
            return "queue stall seconds must be positive and finite"
        if self.max_workers < 1:
            return "max workers must be at least 1"
        return None


DEFAULT_SETTINGS = ServeSettings(instructions_dir=Path("instructions"))
"""The defaults, as ``salvagelane serve`` shows them in its help."""
