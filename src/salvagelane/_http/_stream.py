"""Reading a 2xx event stream, keeping the text received before a break.

The provider's event handler fills in a :class:`StreamState`; :func:`read_stream` feeds
it the events (:mod:`salvagelane._http._sse`) of the capped, deadline-bound body and
decides what a break means: before any text, an error retried by the usual rules; after
text arrived, the partial text kept with ``stream_error`` set, never retried.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from salvagelane._http._body import iter_capped
from salvagelane._http._call import Deadline
from salvagelane._http._errors import json_or_none, preview, scrub
from salvagelane._http._sse import ServerSentEvent, SseEventTooLarge, decode_utf8, iter_events
from salvagelane.errors import ProviderError


@dataclass(kw_only=True, slots=True)
class StreamState:
    """What a stream has delivered so far; each provider's event handler fills it in."""

    parts: list[str] = field(default_factory=list)
    native_finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None
    request_id: str | None = None
    done: bool = False
    stream_error: str | None = None
    """How the stream broke off after text arrived; None when it ended as it should."""

    @property
    def has_text(self) -> bool:
        return any(self.parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamLimits:
    """What bounds reading a stream: ``wire_bytes`` (None: only the deadline), one
    event's size in characters (the parser holds one at a time), and the text's size in
    bytes (None: unbounded), past which the answer is over ``max_output_bytes`` and
    reading it further would be wasted: it is stored clipped and never scanned."""

    wire_bytes: int | None
    event_chars: int
    text_bytes: int | None = None


def is_event_stream(response: httpx.Response) -> bool:
    """Whether a 2xx answer is an event stream (a server may ignore ``stream`` and send
    one JSON body, e.g. an error object, which then takes the non-streaming path)."""
    content_type = response.headers.get("content-type", "")
    return response.is_success and content_type.split(";")[0].strip() == "text/event-stream"


def event_object(url: str, event: ServerSentEvent, secret: str | None, what: str) -> dict[str, Any]:
    """The JSON object in an event's data, or a non-retryable error naming ``what`` it is."""
    data = json_or_none(event.data)
    if not isinstance(data, dict):
        raise ProviderError(
            f"{url}: HTTP 200: {what} is not a JSON object: {preview(event.data, secret)}",
            status=200,
            retryable=False,
        )
    return data


def read_stream(
    response: httpx.Response,
    *,
    url: str,
    deadline: Deadline,
    secret: str | None,
    on_event: Callable[[StreamState, ServerSentEvent], None],
    request_id_header: str,
    limits: StreamLimits,
) -> StreamState:
    """Read a 2xx event stream into the state ``on_event`` fills in.

    ``on_event`` updates the state and raises ProviderError for an error event; it sets
    ``done`` on the provider's final event. A break (transport error, timeout, deadline,
    size cap, error event, or the stream ending before its final event) raises when no
    text has arrived yet, so the call is retried by the usual rules; after text arrived
    it is recorded in ``stream_error`` and the partial text is kept, never retried.
    Text past ``limits.text_bytes`` stops the reading the same way.
    """
    state = StreamState(request_id=response.headers.get(request_id_header))
    stream_error: str | None = None
    status = response.status_code
    counted = text_bytes = 0
    chunks = iter_capped(
        response, deadline, url, cap=sys.maxsize if limits.wire_bytes is None else limits.wire_bytes
    )
    try:
        for event in iter_events(decode_utf8(chunks), max_event_chars=limits.event_chars):
            on_event(state, event)
            if state.done:
                break
            if limits.text_bytes is not None:
                for part in state.parts[counted:]:
                    text_bytes += len(part.encode("utf-8", "surrogatepass"))
                counted = len(state.parts)
                if text_bytes > limits.text_bytes:
                    stream_error = (
                        f"{url}: HTTP {status}: the answer passed max_output_bytes "
                        f"({limits.text_bytes} bytes); stopped reading"
                    )
                    break
        else:
            raise ProviderError(
                f"{url}: HTTP {status}: the event stream ended before its final event",
                status=status,
                retryable=True,
            )
    except SseEventTooLarge as exc:
        if not state.has_text:
            raise ProviderError(
                f"{url}: HTTP {status}: {exc}", status=status, retryable=False
            ) from None
        stream_error = f"{url}: HTTP {status}: {exc}"
    except ProviderError as exc:
        if not state.has_text:
            raise
        stream_error = str(exc)
    except httpx.TimeoutException as exc:
        if not state.has_text:
            raise
        stream_error = f"{url}: timed out mid-stream ({type(exc).__name__})"
    except httpx.TransportError as exc:
        if not state.has_text:
            raise
        stream_error = (
            f"{url}: connection failed mid-stream ({type(exc).__name__}: {scrub(str(exc), secret)})"
        )
    state.stream_error = stream_error
    return state
