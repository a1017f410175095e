"""Report sinks: where a stored report is delivered, and delivering to one of them.

A failing sink never stops the others, nor the run: :func:`deliver_one` reports how a
delivery went as a :class:`DeliveryOutcome`, never by raising, so the outbox
(:mod:`salvagelane.runtime.delivery`) tries every sink of a run and records each outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from salvagelane.definitions.model import SinkKind, SinkSpec
from salvagelane.errors import ConfigurationError, SinkError
from salvagelane.logs import get_logger, scrub_text
from salvagelane.sinks.base import Sink
from salvagelane.sinks.callable_sink import CallableSink
from salvagelane.sinks.json_file import JsonFileSink
from salvagelane.sinks.webhook import WEBHOOK_SETTINGS, WebhookSink

__all__ = [
    "CallableSink",
    "DeliveryOutcome",
    "JsonFileSink",
    "Sink",
    "WebhookSink",
    "build_sinks",
    "deliver_one",
    "describe",
    "run_address",
]

_log = get_logger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryOutcome:
    """How delivering to one sink went; ``error`` says why when ``ok`` is false.
    ``target`` is where the payload went (a path template filled in)."""

    target: str
    kind: str
    ok: bool
    error: str | None = None


def build_sinks(specs: Sequence[SinkSpec], *, client: httpx.Client) -> list[Sink]:
    """The sinks of a definition, in order; webhooks share ``client``."""
    sinks: list[Sink] = []
    for index, spec in enumerate(specs):
        where = f"sinks[{index}] ({spec.kind.value})"
        if spec.kind is SinkKind.JSON_FILE:
            if spec.path is None:
                raise ConfigurationError(f"{where}: expected a path, got none")
            sinks.append(JsonFileSink(spec.path))
        elif spec.kind is SinkKind.WEBHOOK:
            if (spec.url is None) == (spec.url_env is None):
                given = "both" if spec.url is not None else "neither"
                raise ConfigurationError(
                    f"{where}: expected a url or a url_env (exactly one), got {given}"
                )
            sinks.append(
                WebhookSink(
                    client,
                    url=spec.url,
                    url_env=spec.url_env,
                    token_env=spec.token_env,
                    settings=replace(WEBHOOK_SETTINGS, timeout_seconds=spec.timeout_seconds),
                )
            )
        elif spec.kind is SinkKind.CALLABLE:
            if spec.callable is None:
                raise ConfigurationError(f"{where}: expected a callable, got none")
            sinks.append(CallableSink(spec.callable))
        else:  # pragma: no cover - a new SinkKind without a sink
            raise ConfigurationError(f"{where}: no sink implements this kind")
    return sinks


def deliver_one(sink: Sink, payload: Mapping[str, Any]) -> DeliveryOutcome:
    """Deliver ``payload`` to ``sink``; how it went, never an exception from the sink.

    The caller logs and records the outcome; only a sink's bug (an exception other
    than SinkError) is logged here, with its traceback, which the outcome cannot carry.
    The error is scrubbed of every registered secret: it is stored and printed.
    """
    kind, target = describe(sink, payload)
    error: str | None = None
    try:
        sink.deliver(payload)
    except SinkError as exc:
        error = scrub_text(str(exc))
    # A bug in one sink must not cost the report its other deliveries.
    except Exception as exc:
        error = scrub_text(f"{type(exc).__name__}: {exc}")
        _log.exception("sink.crashed", target=target, kind=kind)
    return DeliveryOutcome(target=target, kind=kind, ok=error is None, error=error)


def describe(sink: Sink, payload: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """The sink's ``(kind, target)``; with ``payload`` (or a run's :func:`run_address`),
    the target that payload goes to: a ``json_file`` path with its placeholders filled in,
    as deliveries are recorded, logged and shown. The sink's own target (the template)
    when it has no ``target_for`` or cannot fill it in (its delivery will say why)."""
    kind = _kind(sink)
    if payload is not None:
        target_for = getattr(sink, "target_for", None)
        if callable(target_for):
            # Read defensively, as _target is: a sink's bug must not escape a delivery.
            try:
                return kind, str(target_for(payload))
            except Exception:
                pass
    return kind, _target(sink)


def run_address(run_id: str, instruction: str) -> dict[str, str]:
    """The part of a run's payload a target may depend on (see :class:`Sink`): enough to
    fill in a target before the report's payload is read."""
    return {"run_id": run_id, "instruction": instruction}


def _kind(sink: Sink) -> str:
    """The sink's ``kind`` when it has one (ours do), else its class name."""
    kind = getattr(sink, "kind", None)
    return str(kind) if isinstance(kind, str) else type(sink).__name__


def _target(sink: Sink) -> str:
    # Read defensively: a broken sink's target property must not escape a delivery.
    try:
        return str(sink.target)
    except Exception as exc:
        return f"<{type(sink).__name__}: target unreadable, {type(exc).__name__}>"
