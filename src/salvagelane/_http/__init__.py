"""HTTP plumbing shared by the connectors and the webhook sink (private to salvagelane).

Provider-independent and apart from :mod:`salvagelane.connectors`, so that the webhook
sink depends on this alone. One responsibility a module, after httpx's layout:

- :mod:`._errors`: which answers are worth another attempt, ``Retry-After``, and the
  scrubbed :class:`~salvagelane.errors.ProviderError` each failure becomes;
- :mod:`._call`: :class:`HttpSettings` (timeout, deadline, retry budget, body cap) and
  :class:`HttpCaller`, the retry loop under one overall deadline that includes the
  waits, and the one POST, where httpx's exceptions are translated;
- :mod:`._body`: the body caps (:func:`response_cap` follows a definition's
  ``max_output_bytes``), the bounded body read, and JSON out of a whole or cut body;
- :mod:`._sse` and :mod:`._stream`: the server-sent events parser and the stream
  reader that keeps the text received before a break.

Failures are ProviderErrors (status, code, retryable, retry_after); the webhook sink
translates them into ``SinkError`` at its boundary.
"""

from __future__ import annotations

from salvagelane._http._body import (
    DEFAULT_RESPONSE_BYTES,
    ERROR_BODY_BYTES,
    RESPONSE_CEILING_BYTES,
    body_text,
    int_or_none,
    iter_capped,
    json_object,
    json_string_prefix,
    read_capped,
    read_prefix,
    response_cap,
    str_or_none,
)
from salvagelane._http._call import Deadline, HttpCaller, HttpSettings, cut_error, join_url
from salvagelane._http._errors import (
    QUOTA_CODES,
    RETRYABLE_STATUSES,
    error_in_body,
    http_error,
    preview,
    retry_after,
    retryable_status,
    scrub,
    unexpected_body,
)
from salvagelane._http._sse import (
    ServerSentEvent,
    SseEventTooLarge,
    SseParser,
    decode_utf8,
    iter_events,
)
from salvagelane._http._stream import (
    StreamLimits,
    StreamState,
    event_object,
    is_event_stream,
    read_stream,
)

__all__ = [
    "DEFAULT_RESPONSE_BYTES",
    "ERROR_BODY_BYTES",
    "QUOTA_CODES",
    "RESPONSE_CEILING_BYTES",
    "RETRYABLE_STATUSES",
    "Deadline",
    "HttpCaller",
    "HttpSettings",
    "ServerSentEvent",
    "SseEventTooLarge",
    "SseParser",
    "StreamLimits",
    "StreamState",
    "body_text",
    "cut_error",
    "decode_utf8",
    "error_in_body",
    "event_object",
    "http_error",
    "int_or_none",
    "is_event_stream",
    "iter_capped",
    "iter_events",
    "join_url",
    "json_object",
    "json_string_prefix",
    "preview",
    "read_capped",
    "read_prefix",
    "read_stream",
    "response_cap",
    "retry_after",
    "retryable_status",
    "scrub",
    "str_or_none",
    "unexpected_body",
]
