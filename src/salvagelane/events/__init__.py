"""Run events: one stream of what happens to fires, runs, deliveries and nodes.

The runtime publishes each fact once, as a frozen event (:mod:`.kinds`), to an
:class:`~.stream.EventStream`; the structured logs (:func:`.log.log_event`), the
Prometheus metrics (:mod:`salvagelane.runtime.metrics`) and whatever else needs the same
facts subscribe to it. A subscriber that fails is reported and skipped: it never fails the
run that published the event (ADR 0019).
"""

from __future__ import annotations

from salvagelane.events.kinds import EVENT_TYPES, Event
from salvagelane.events.stream import EventStream, Subscription, logged_stream

__all__ = ["EVENT_TYPES", "Event", "EventStream", "Subscription", "logged_stream"]
