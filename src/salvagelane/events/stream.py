"""The publisher: one ``subscribe(callback, event_types)``, one ``publish(event)``.

Subscribers are called in the publishing thread, in the order they subscribed, while the
publisher waits: an event reaches its log line with the run's bound fields, and a
subscriber sees the events of one run in order. A subscriber must be quick. One that
raises is reported (``event.subscriber_failed``, through the log, never as an event) and
the others still get the event: a broken consumer never fails a run.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from salvagelane.events.kinds import Event
from salvagelane.logs import get_logger

Subscriber = Callable[[Event], None]
FailureHook = Callable[[Event, Subscriber, Exception], None]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Subscription:
    callback: Subscriber
    types: tuple[type[Event], ...]


class Subscription:
    """What :meth:`EventStream.subscribe` returns: ``unsubscribe()`` ends it."""

    def __init__(self, stream: EventStream, entry: _Subscription):
        self._stream = stream
        self._entry = entry

    def unsubscribe(self) -> None:
        self._stream._remove(self._entry)


def _report_failure(event: Event, subscriber: Subscriber, exc: Exception) -> None:
    get_logger("salvagelane.events").error(
        "event.subscriber_failed",
        event_name=event.name,
        subscriber=getattr(subscriber, "__qualname__", repr(subscriber)),
        exc_info=exc,
    )


class EventStream:
    """Fans each published event out to the subscribers of its type (thread-safe)."""

    def __init__(self, *, on_failure: FailureHook = _report_failure):
        # Replaced whole, never mutated: publish reads it without taking the lock.
        self._subscriptions: tuple[_Subscription, ...] = ()
        self._lock = threading.Lock()
        self._on_failure = on_failure

    def subscribe(
        self, callback: Subscriber, event_types: Iterable[type[Event]] | None = None
    ) -> Subscription:
        """Call ``callback`` with every event of ``event_types`` (their subclasses
        included), or with every event when None."""
        types = (Event,) if event_types is None else tuple(event_types)
        if not types:
            raise ValueError("event_types: expected at least one event type, got none")
        entry = _Subscription(callback=callback, types=types)
        with self._lock:
            self._subscriptions = (*self._subscriptions, entry)
        return Subscription(self, entry)

    def _remove(self, entry: _Subscription) -> None:
        with self._lock:
            self._subscriptions = tuple(s for s in self._subscriptions if s is not entry)

    def publish(self, event: Event) -> None:
        """Give ``event`` to each subscriber of its type; never raises for one of them."""
        for subscription in self._subscriptions:
            if not isinstance(event, subscription.types):
                continue
            try:
                subscription.callback(event)
            except Exception as exc:
                # The hook itself must not fail the run either.
                with contextlib.suppress(Exception):
                    self._on_failure(event, subscription.callback, exc)


def logged_stream() -> EventStream:
    """A stream whose events are logged (:func:`salvagelane.events.log.log_event`): the
    default of every publisher, so a fact is logged whoever wired the runtime."""
    from salvagelane.events.log import log_event

    stream = EventStream()
    stream.subscribe(log_event)
    return stream
