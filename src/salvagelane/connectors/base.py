"""The connector interface: a request in, a completion out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from salvagelane.call_cut import CallCut
from salvagelane.core.finish import FinishReason


@dataclass(frozen=True, kw_only=True, slots=True)
class CompletionRequest:
    """One prompt as sent. ``response_schema`` is the JSON Schema of the report, sent as a
    native structured-output hint when the connector is configured to.
    ``time_limit_seconds`` caps the whole call, retries and waits included, below the
    connector's own deadline: what is left of the run's deadline. ``max_output_bytes``
    (the definition's guardrail) sets how much of the answer is read: an HTTP connector's
    body cap follows it (see :func:`~salvagelane._http.response_cap`), and a
    stream stops once its text is longer. ``cut`` stops the call from another thread."""

    system: str
    user: str
    max_output_tokens: int
    temperature: float
    response_schema: Mapping[str, Any] | None = None
    time_limit_seconds: float | None = None
    max_output_bytes: int | None = None
    # Set by the executor when the run can be cancelled: cutting it stops the call in
    # flight (an HTTP connector shuts its connection; a replayed answer is instant).
    cut: CallCut | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class Completion:
    """What the model said, and how the call went.

    ``finish_reason`` is canonical (UNKNOWN when the provider reported none);
    ``native_finish_reason`` is the provider's own value, as sent. ``usage`` holds
    ``prompt_tokens`` and ``completion_tokens`` (None when not reported).
    ``latency_seconds`` is the duration of the attempt that answered; ``attempts``
    counts every attempt made. ``http_status`` is None for a replayed completion.
    ``stream_error`` says how an answer broke off: a stream (connection dropped,
    timeout, deadline, size cap, its text past ``max_output_bytes``, an error event), or
    a body past the response cap; the text is then what arrived before the break,
    ``finish_reason`` is ERROR, and the call was not retried.
    """

    text: str
    finish_reason: FinishReason
    native_finish_reason: str | None
    usage: Mapping[str, int | None]
    model: str | None
    request_id: str | None
    latency_seconds: float
    http_status: int | None
    attempts: int = 1
    stream_error: str | None = None


class Connector(Protocol):
    """Anything that turns a request into a completion, raising ConnectorError otherwise."""

    def complete(self, request: CompletionRequest) -> Completion: ...
