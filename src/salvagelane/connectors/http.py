"""The call shared by the HTTP connectors, and the settings they are built from.

The plumbing (retries under a deadline, capped reads, streams, error translation and
scrubbing) is :mod:`salvagelane._http`'s; this module is the connector's side of it: the
endpoint and key, the request body, and the Completion made of a 2xx answer.

The body cap follows the request's ``max_output_bytes`` (:func:`~salvagelane._http.response_cap`)
unless the settings fix one. A 2xx body past it is not an error: the answer's text
received so far is returned, marked (``stream_error``) like a stream that broke off,
and the executor stores it bounded.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import httpx

from salvagelane import environment
from salvagelane._http import (
    DEFAULT_RESPONSE_BYTES,
    ERROR_BODY_BYTES,
    Deadline,
    HttpCaller,
    HttpSettings,
    ServerSentEvent,
    StreamLimits,
    StreamState,
    body_text,
    http_error,
    is_event_stream,
    join_url,
    json_object,
    read_prefix,
    read_stream,
    response_cap,
)
from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.errors import ConnectorError
from salvagelane.logs import redact_url, register_secret, register_url


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectorSettings:
    """What every HTTP connector is built from (the factory makes it of a definition's
    ``connector`` block). The endpoint is ``base_url`` or, read at call time, the URL
    held by the environment variable ``base_url_env`` (exactly one of them); the key is
    read from ``api_key_env`` at call time. With ``stream`` the answer is read as
    server-sent events. ``http`` bounds the call; its ``max_response_bytes``, when
    given, fixes the body cap, which otherwise follows each request."""

    model: str
    api_key_env: str | None
    base_url: str | None = None
    base_url_env: str | None = None
    structured_output: bool = False
    stream: bool = False
    http: HttpSettings = field(default_factory=HttpSettings)


SettingsT = TypeVar("SettingsT", bound=ConnectorSettings)


def _base_url_from(name: str) -> str:
    return environment.url(name, "the connector's base URL")


class HttpConnector(abc.ABC, Generic[SettingsT]):
    """The call shared by the HTTP connectors; subclasses supply the wire format and
    the type of their settings.

    :attr:`url` is how messages show the endpoint. The API key is read through
    ``key_lookup`` at call time (default :func:`salvagelane.environment.api_key`), sent
    only in a header, and scrubbed from every message; ``url_lookup`` reads the URL
    named by ``base_url_env``. ``clock`` and ``sleep`` default to real time (tests
    inject fakes). Unusable settings are a ConnectorError naming the connector.
    """

    #: Response header holding the provider's request id.
    request_id_header: ClassVar[str]
    #: The endpoint's path below the base URL.
    endpoint: ClassVar[str]
    #: The base URL when the settings name neither ``base_url`` nor ``base_url_env``.
    default_base_url: ClassVar[str | None] = None

    def __init__(
        self,
        client: httpx.Client,
        *,
        settings: SettingsT,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        key_lookup: Callable[[str], str] = environment.api_key,
        url_lookup: Callable[[str], str] = _base_url_from,
    ):
        if settings.base_url is None and settings.base_url_env is None and self.default_base_url:
            settings = dataclasses.replace(settings, base_url=self.default_base_url)
        problem = settings.http.problem()
        if (settings.base_url is None) == (settings.base_url_env is None):
            problem = "expected exactly one of base_url and base_url_env"
        if problem is not None:
            raise ConnectorError(f"{type(self).__name__}: {problem}")
        self.settings = settings
        self.base_url = None if settings.base_url is None else settings.base_url.rstrip("/")
        self.base_url_env = settings.base_url_env
        if self.base_url is not None:
            register_url(self.base_url)
        self.model = settings.model
        self.api_key_env = settings.api_key_env
        self.structured_output = settings.structured_output
        self.stream = settings.stream
        self._http = HttpCaller(client, settings.http, clock=clock, sleep=sleep)
        self._key_lookup = key_lookup
        self._url_lookup = url_lookup

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(url={self.url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, stream={self.stream!r})"
        )

    @property
    def url(self) -> str:
        """The endpoint as messages show it: without userinfo and query string, or by the
        name of the variable holding its base URL."""
        if self.base_url is None:
            return f"${self.base_url_env}/{self.endpoint}"
        return redact_url(join_url(self.base_url, self.endpoint))

    @abc.abstractmethod
    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (no secrets: the key goes in a header)."""

    def headers(self, key: str | None) -> dict[str, str]:
        """The request headers: JSON sent, JSON or an event stream asked for, then the
        provider's own."""
        return {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if self.stream else "application/json",
            **self.provider_headers(key),
        }

    @abc.abstractmethod
    def provider_headers(self, key: str | None) -> dict[str, str]:
        """The provider's request headers, carrying the key."""

    @abc.abstractmethod
    def parse(
        self, response: httpx.Response, data: dict[str, Any], key: str | None, latency: float
    ) -> Completion:
        """The completion in a 2xx JSON body."""

    @abc.abstractmethod
    def on_event(self, state: StreamState, event: ServerSentEvent, key: str | None) -> None:
        """Apply one stream event; raise ProviderError for an error event."""

    @abc.abstractmethod
    def partial_text(self, body: str) -> str | None:
        """The answer's text in the beginning of a 2xx JSON body cut at the cap, as far
        as it goes; None when it cannot be found there."""

    def complete(self, request: CompletionRequest) -> Completion:
        key = self._key_lookup(self.api_key_env) if self.api_key_env else None
        if key is not None:
            register_secret(key)
        base = self.base_url
        if base is None:
            assert self.base_url_env is not None
            base = self._url_lookup(self.base_url_env)
        target = join_url(base, self.endpoint)
        try:
            body = json.dumps(
                self.request_body(request),
                ensure_ascii=False,
                separators=(",", ":"),
                allow_nan=False,
            ).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise ConnectorError(
                f"{self.url}: the request body is not JSON-serialisable: {exc}"
            ) from exc
        completion, attempts = self._http.run(
            self.url,
            lambda deadline: self._attempt(target, body, key, deadline, request),
            limit_seconds=request.time_limit_seconds,
            cut=request.cut,
        )
        return dataclasses.replace(completion, attempts=attempts)

    def _body_cap(self, request: CompletionRequest) -> int:
        fixed = self.settings.http.max_response_bytes
        if fixed is not None:
            return fixed
        if request.max_output_bytes is None:
            return DEFAULT_RESPONSE_BYTES
        return response_cap(request.max_output_bytes)

    def _attempt(
        self,
        target: str,
        body: bytes,
        key: str | None,
        deadline: Deadline,
        request: CompletionRequest,
    ) -> Completion:
        started = self._http.clock()
        cap = self._body_cap(request)

        def handle(response: httpx.Response) -> Completion:
            if self.stream and is_event_stream(response):
                return self._streamed(response, deadline, key, request, cap, started)
            limit = cap if response.is_success else min(cap, ERROR_BODY_BYTES)
            raw, over = read_prefix(response, deadline, self.url, limit)
            latency = self._http.clock() - started
            if not response.is_success:
                raise http_error(self.url, response, raw, key)
            if over:
                return self._clipped(response, raw, latency, cap)
            return self.parse(response, json_object(self.url, response, raw, key), key, latency)

        return self._http.post(
            target,
            body=body,
            headers=self.headers(key),
            deadline=deadline,
            handle=handle,
            secret=key,
            shown=self.url,
            cut=request.cut,
        )

    def _streamed(
        self,
        response: httpx.Response,
        deadline: Deadline,
        key: str | None,
        request: CompletionRequest,
        cap: int,
        started: float,
    ) -> Completion:
        """A 2xx event stream as a Completion (see :func:`~salvagelane._http.read_stream`)."""
        # A stream's framing can outweigh its text many times over: the text is bounded
        # (max_output_bytes), one event by the body cap, the wire only by the deadline,
        # unless the settings fixed a cap.
        fixed = self.settings.http.max_response_bytes is not None
        state = read_stream(
            response,
            url=self.url,
            deadline=deadline,
            secret=key,
            on_event=lambda state, event: self.on_event(state, event, key),
            request_id_header=self.request_id_header,
            limits=StreamLimits(
                wire_bytes=cap if fixed else None,
                event_chars=cap,
                text_bytes=request.max_output_bytes,
            ),
        )
        canonical = canonical_finish_reason(state.native_finish_reason)
        if state.stream_error is not None:
            finish = FinishReason.ERROR
        else:
            finish = canonical if canonical is not None else FinishReason.UNKNOWN
        return Completion(
            text="".join(state.parts),
            finish_reason=finish,
            native_finish_reason=state.native_finish_reason,
            usage={
                "prompt_tokens": state.prompt_tokens,
                "completion_tokens": state.completion_tokens,
            },
            model=state.model or self.model,
            request_id=state.request_id,
            latency_seconds=self._http.clock() - started,
            http_status=response.status_code,
            stream_error=state.stream_error,
        )

    def _clipped(
        self, response: httpx.Response, raw: bytes, latency: float, cap: int
    ) -> Completion:
        """A 2xx body longer than ``cap``: the answer's text in its first ``cap`` bytes,
        marked like a stream that broke off, never dropped. Without the text (an
        unexpected layout), the body's first bytes stand for it: over the cap, they
        are stored clipped and never scanned."""
        status = response.status_code
        length = response.headers.get("content-length", "")
        of = f" (Content-Length {length})" if length.isdigit() else ""
        body = body_text(raw)
        text = self.partial_text(body)
        kept = "kept the answer's text received so far"
        if text is None:
            text, kept = body, f"kept the body's first {cap} bytes (no answer text found in them)"
        return Completion(
            text=text,
            finish_reason=FinishReason.ERROR,
            native_finish_reason=None,
            usage={"prompt_tokens": None, "completion_tokens": None},
            model=self.model,
            request_id=response.headers.get(self.request_id_header),
            latency_seconds=latency,
            http_status=status,
            stream_error=(
                f"{self.url}: HTTP {status}: response body exceeds {cap} bytes{of}; "
                f"stopped reading: {kept}"
            ),
        )
