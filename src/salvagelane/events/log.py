"""The structured log as a subscriber of the event stream: one line per event.

The line's ``event`` is the event's name; its fields are the event's, with
``instruction_id`` as ``instruction`` (the name every other line uses), times in ISO 8601
UTC, words as text, and an event's exception as the line's traceback. The level says how
much an operator should care, per event type (:data:`LEVELS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from salvagelane.events import kinds
from salvagelane.events.kinds import Event
from salvagelane.logs import get_logger

_DEBUG, _INFO, _WARNING, _ERROR = "debug", "info", "warning", "error"

LEVELS: Mapping[type[Event], str] = {
    kinds.RunStarted: _INFO,
    kinds.ModelCalled: _DEBUG,
    kinds.AttemptStored: _INFO,
    kinds.ProviderFailed: _WARNING,
    kinds.AttemptCut: _INFO,
    kinds.AttemptSpooled: _ERROR,
    kinds.AttemptLost: _ERROR,
    kinds.AttemptSalvaged: _INFO,
    kinds.RetryAsked: _INFO,
    kinds.ReaskSettled: _INFO,
    kinds.DeadlinePassed: _WARNING,
    kinds.CancelSeen: _INFO,
    kinds.CallCutRequested: _INFO,
    kinds.CancelCheckFailed: _WARNING,
    kinds.HeartbeatMissed: _WARNING,
    kinds.BudgetExhausted: _WARNING,
    kinds.RunFailed: _WARNING,
    kinds.RunCancelled: _WARNING,
    kinds.FailureNotRecorded: _WARNING,
    kinds.RunCrashed: _ERROR,
    kinds.RunFinished: _INFO,
    kinds.RunInterrupted: _WARNING,
    kinds.InterruptNotRecorded: _ERROR,
    kinds.RunSettled: _WARNING,
    kinds.QueuedRunUnknown: _WARNING,
    kinds.QueuedRunNotTaken: _INFO,
    kinds.JobCrashed: _ERROR,
    kinds.FireReceived: _INFO,
    kinds.FireDropped: _WARNING,
    kinds.FireUnknown: _WARNING,
    kinds.FireSkipped: _INFO,
    kinds.FireClaimed: _INFO,
    kinds.FireDuplicate: _INFO,
    kinds.FireCrashed: _ERROR,
    kinds.FireNotQueued: _ERROR,
    kinds.FireRetryPlanned: _INFO,
    kinds.FireCaughtUp: _INFO,
    kinds.FireMissed: _WARNING,
    kinds.MissedNotRecorded: _ERROR,
    kinds.DeliveryDone: _INFO,
    kinds.DeliveryFailed: _WARNING,
    kinds.DeliveryOvertaken: _WARNING,
    kinds.DeliveryGivenUp: _WARNING,
    kinds.RedeliveryFailed: _ERROR,
    # Debug: the audit trail records each decision, and a command prints its own.
    kinds.ItemReviewed: _DEBUG,
    kinds.ItemsRejected: _DEBUG,
    kinds.LeaderStandby: _INFO,
    kinds.LeaderAcquired: _INFO,
    kinds.LeaderLost: _ERROR,
    kinds.LeaderReleased: _INFO,
    kinds.ShutdownWaiting: _INFO,
    kinds.DefinitionNotStored: _WARNING,
    kinds.DefinitionInvalid: _ERROR,
    kinds.DefinitionsReloadFailed: _ERROR,
    kinds.DefinitionsReloaded: _INFO,
    kinds.QueueSchemaInstalled: _INFO,
    kinds.QueueJobReleased: _INFO,
    kinds.QueueStalled: _WARNING,
    kinds.QueueResumed: _INFO,
    kinds.QueueCheckFailed: _ERROR,
}
"""The log level of each event type: every event is logged (a test holds it)."""

_RENAMED = {"instruction_id": "instruction"}

_log = get_logger("salvagelane.events")


def log_fields(event: Event) -> dict[str, Any]:
    """The fields of ``event``'s log line (its exception is not one)."""
    fields: dict[str, Any] = {}
    for one in dataclasses.fields(event):
        if one.name == "exception":
            continue
        fields[_RENAMED.get(one.name, one.name)] = _plain(getattr(event, one.name))
    return fields


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float):
        return round(value, 3)  # durations: a millisecond is what a reader can use
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def log_event(event: Event) -> None:
    """Write ``event`` as one log line at its type's level."""
    level = LEVELS.get(type(event), _INFO)
    fields = log_fields(event)
    if event.exception is not None:
        fields["exc_info"] = event.exception
    getattr(_log, level)(event.name, **fields)
