"""HTTP machinery shared by every connector and the webhook sink.

Provider-independent: which answers are worth another attempt, how long the server asked
us to wait, the retry loop (tenacity: exponential backoff with jitter) under one overall
deadline that includes the waits, the capped body read, a stream reader that keeps the
text received before a break, and scrubbing secrets out of every message.

Failures are :class:`~salvagelane.errors.ProviderError` (status, code, retryable,
retry_after); the webhook sink translates them into ``SinkError`` at its boundary.
Secrets are never put in an exception: transport errors are re-raised ``from None``
with their text scrubbed.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, TypedDict, TypeVar, Unpack

import httpx
import tenacity

from salvagelane import environment
from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.connectors.sse import ServerSentEvent, decode_utf8, iter_events
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.errors import ConnectorError, ProviderError

T = TypeVar("T")

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Retried besides every 5xx (which includes Anthropic's 529 overloaded)."""
QUOTA_CODES = frozenset(
    {"insufficient_quota", "quota_exceeded", "billing_hard_limit_reached", "billing_error"}
)
"""Error codes that mean the account is out of money: asking again cannot help."""
PREVIEW_CHARS = 200
REDACTED = "[REDACTED]"


def retryable_status(status: int, code: str | None = None) -> bool:
    """Whether an HTTP status (with the provider's error code) is worth another attempt."""
    return (status in RETRYABLE_STATUSES or status >= 500) and code not in QUOTA_CODES


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError):
            return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``[REDACTED]``."""
    return text.replace(secret, REDACTED) if secret else text


def preview(text: str, secret: str | None) -> str:
    """A short, scrubbed, quoted excerpt of a body for an error message."""
    text = scrub(text, secret)
    short = text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else "")
    return repr(short) if short else "(empty body)"


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_code(error: Mapping[str, Any]) -> str | None:
    """The native code of an error object: ``code`` (OpenAI) or ``type`` (Anthropic)."""
    code = error.get("code")
    if code is None:
        code = error.get("type")
    return None if code is None else str(code)


def http_error(url: str, response: httpx.Response, raw: bytes, secret: str | None) -> ProviderError:
    """The error for a non-2xx answer, with the code and message of a JSON error object
    (``{"error": {"code"|"type": ..., "message": ...}}``) when the body holds one."""
    status = response.status_code
    text = raw.decode("utf-8", errors="replace")
    code: str | None = None
    detail = preview(text, secret)
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        code = error_code(error)
        if isinstance(error.get("message"), str):
            detail = scrub(error["message"], secret)[:PREVIEW_CHARS]
    retryable = retryable_status(status, code)
    return ProviderError(
        f"{url}: HTTP {status}" + (f" ({code})" if code else "") + f": {detail}",
        status=status,
        code=code,
        retryable=retryable,
        retry_after=retry_after(response.headers) if retryable else None,
    )


def error_in_body(
    url: str,
    status: int,
    error: Any,
    secret: str | None,
    what: str,
    *,
    retryable: Callable[[str | None], bool],
) -> ProviderError:
    """The error for an error object found in a 2xx body or stream; ``retryable`` judges
    its native code, as no status line says whether it is transient."""
    code = error_code(error) if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    detail = scrub(str(message), secret)[:PREVIEW_CHARS] if message else "no message"
    return ProviderError(
        f"{url}: HTTP {status}: {what}" + (f" ({code})" if code else "") + f": {detail}",
        status=status,
        code=code,
        retryable=retryable(code),
    )


def json_object(
    url: str, response: httpx.Response, raw: bytes, secret: str | None
) -> dict[str, Any]:
    """The 2xx body as a JSON object, or a non-retryable error quoting what came instead."""
    text = raw.decode("utf-8", errors="replace")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        what = "is not JSON" if data is None else "is not a JSON object"
        raise ProviderError(
            f"{url}: HTTP {response.status_code}: response body {what}: {preview(text, secret)}",
            status=response.status_code,
            retryable=False,
        )
    return data


def unexpected_body(
    url: str, status: int, data: Mapping[str, Any], secret: str | None, expected: str
) -> ProviderError:
    """The non-retryable error for a 2xx JSON object lacking what the provider promised."""
    return ProviderError(
        f"{url}: HTTP {status}: expected {expected}: {preview(json.dumps(data), secret)}",
        status=status,
        retryable=False,
    )


def event_object(url: str, event: ServerSentEvent, secret: str | None, what: str) -> dict[str, Any]:
    """The JSON object in an event's data, or a non-retryable error naming ``what`` it is."""
    try:
        data: Any = json.loads(event.data)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise ProviderError(
            f"{url}: HTTP 200: {what} is not a JSON object: {preview(event.data, secret)}",
            status=200,
            retryable=False,
        )
    return data


# --- the deadline and the retry loop ---------------------------------------------------------


class CallOptions(TypedDict, total=False):
    """Keyword arguments shared by everything that calls out over HTTP (the connectors and
    the webhook sink). All optional: the numbers default to the caller's HttpSettings,
    ``key_lookup`` to :func:`salvagelane.environment.api_key`, ``clock`` and ``sleep`` to
    real time (tests inject fakes)."""

    timeout_seconds: float
    deadline_seconds: float
    max_attempts: int
    backoff_seconds: float
    max_backoff_seconds: float
    key_lookup: Callable[[str], str]
    clock: Callable[[], float]
    sleep: Callable[[float], None]


class ConnectorOptions(CallOptions, total=False):
    """The keyword arguments every HTTP connector accepts besides its endpoint and model."""

    max_response_bytes: int
    structured_output: bool
    stream: bool


def reject_unknown(owner: str, options: Mapping[str, object], known: frozenset[str]) -> None:
    """Raise TypeError for a keyword argument outside ``known``, as Python would for an
    explicit parameter list: a TypedDict for ``**options`` is checked only statically."""
    for name in options:
        if name not in known:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpSettings:
    """Per-attempt timeout, overall deadline (waits included), body cap and retry budget."""

    timeout_seconds: float = 60.0
    deadline_seconds: float = 300.0
    max_response_bytes: int = 4 * 1024 * 1024
    max_attempts: int = 5
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0

    @classmethod
    def of(cls, options: Mapping[str, object], **defaults: Any) -> HttpSettings:
        """The settings a caller's keyword ``options`` name; the rest from ``defaults``,
        else this class's own. Other options (``clock``, ``stream``, ...) are ignored."""
        given = {f.name: options[f.name] for f in dataclasses.fields(cls) if f.name in options}
        return cls(**{**defaults, **given})

    def problem(self) -> str | None:
        """What is unusable about these settings, or None; callers raise their own error."""
        if not (self.timeout_seconds > 0 and self.deadline_seconds > 0):
            return "timeout_seconds and deadline_seconds must be positive"
        if self.max_response_bytes <= 0 or self.max_attempts < 1:
            return "max_response_bytes and max_attempts must be positive"
        if self.backoff_seconds < 0 or self.max_backoff_seconds < 0:
            return "backoff_seconds and max_backoff_seconds must not be negative"
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Deadline:
    """The moment one call (all its attempts and waits) must be over."""

    at: float
    seconds: float
    clock: Callable[[], float] = field(repr=False)

    def remaining(self) -> float:
        return self.at - self.clock()


class _DeadlineExceeded(Exception):
    """Raised by the sleep hook when waiting would cross the overall deadline."""

    def __init__(self, wait: float, last: BaseException | None):
        super().__init__(wait)
        self.wait = wait
        self.last = last


class HttpCaller:
    """Runs attempts against one URL with retries under an overall deadline.

    ``clock`` and ``sleep`` are injectable so tests assert waits exactly without sleeping.
    """

    def __init__(
        self,
        client: httpx.Client,
        settings: HttpSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._client = client
        self.settings = settings
        self.clock = clock
        self._sleep = sleep
        self._backoff = tenacity.wait_exponential(
            multiplier=settings.backoff_seconds, max=settings.max_backoff_seconds
        ) + tenacity.wait_random(0, settings.backoff_seconds)

    @classmethod
    def of(cls, client: httpx.Client, settings: HttpSettings, options: CallOptions) -> HttpCaller:
        """A caller using the ``clock`` and ``sleep`` in a caller's keyword ``options``, if any."""
        return cls(
            client,
            settings,
            clock=options.get("clock", time.monotonic),
            sleep=options.get("sleep", time.sleep),
        )

    def run(
        self,
        target: str,
        attempt: Callable[[Deadline], T],
        *,
        limit_seconds: float | None = None,
    ) -> tuple[T, int]:
        """``attempt``'s result and how many attempts it took.

        Retries a retryable ProviderError, waiting what the server asked (``retry_after``)
        or an exponential backoff with jitter, and gives up when the next wait would cross
        the deadline or the attempts run out. ``limit_seconds`` shortens the deadline
        (never lengthens it): what the caller has left of its own.
        """
        seconds = self.settings.deadline_seconds
        if limit_seconds is not None:
            seconds = max(0.0, min(seconds, limit_seconds))
        deadline = Deadline(at=self.clock() + seconds, seconds=seconds, clock=self.clock)
        attempts = 0
        last: list[BaseException] = []

        def one() -> T:
            nonlocal attempts
            attempts += 1
            try:
                return attempt(deadline)
            except BaseException as exc:
                last[:] = [exc]
                raise

        def sleep(seconds: float) -> None:
            if self.clock() + seconds >= deadline.at:
                raise _DeadlineExceeded(seconds, last[0] if last else None)
            self._sleep(seconds)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.settings.max_attempts),
            wait=self._wait,
            retry=tenacity.retry_if_exception(_is_retryable),
            sleep=sleep,
            reraise=True,
        )
        try:
            result = retrying(one)
        except _DeadlineExceeded as exc:
            cause = exc.last
            raise ProviderError(
                f"{target}: gave up after {attempts} attempt(s): the next wait of "
                f"{exc.wait:.3g} s would cross the {deadline.seconds:.3g} s deadline; "
                f"last error: {cause}",
                status=cause.status if isinstance(cause, ProviderError) else None,
                code=cause.code if isinstance(cause, ProviderError) else None,
                retryable=True,
            ) from cause
        except ProviderError as exc:
            if exc.retryable and attempts > 1:
                raise ProviderError(
                    f"{exc} (gave up after {attempts} attempts)",
                    status=exc.status,
                    code=exc.code,
                    retryable=True,
                    retry_after=exc.retry_after,
                ) from exc
            raise
        return result, attempts

    def _wait(self, retry_state: tenacity.RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, ProviderError) and exc.retry_after is not None:
            return exc.retry_after
        return float(self._backoff(retry_state))

    def post(
        self,
        url: str,
        *,
        body: bytes,
        headers: Mapping[str, str],
        deadline: Deadline,
        handle: Callable[[httpx.Response], T],
        secret: str | None,
    ) -> T:
        """One POST; ``handle`` reads the still-open response. Timeouts and transport
        failures (also those escaping ``handle``) become retryable ProviderErrors."""
        remaining = deadline.remaining()
        if remaining <= 0:
            raise ProviderError(
                f"{url}: the {deadline.seconds:.3g} s deadline passed", retryable=False
            )
        try:
            with self._client.stream(
                "POST",
                url,
                content=body,
                headers=headers,
                timeout=httpx.Timeout(min(self.settings.timeout_seconds, remaining)),
            ) as response:
                return handle(response)
        except httpx.TimeoutException as exc:
            raise ProviderError(
                f"{url}: timed out ({type(exc).__name__})", retryable=True
            ) from None
        except httpx.TransportError as exc:
            message = scrub(str(exc), secret)
            raise ProviderError(
                f"{url}: connection failed ({type(exc).__name__}: {message})", retryable=True
            ) from None

    def iter_capped(
        self, response: httpx.Response, deadline: Deadline, url: str
    ) -> Iterator[bytes]:
        """The body's chunks, stopping with a non-retryable ProviderError past
        ``max_response_bytes`` or the deadline."""
        cap = self.settings.max_response_bytes
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > cap:
                raise ProviderError(
                    f"{url}: HTTP {response.status_code}: response body exceeds "
                    f"{cap} bytes; stopped reading",
                    status=response.status_code,
                    retryable=False,
                )
            yield chunk
            if deadline.remaining() < 0:
                raise ProviderError(
                    f"{url}: the {deadline.seconds:.3g} s deadline passed while reading",
                    status=response.status_code,
                    retryable=False,
                )

    def read_capped(self, response: httpx.Response, deadline: Deadline, url: str) -> bytes:
        return b"".join(self.iter_capped(response, deadline, url))


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


# --- streams ---------------------------------------------------------------------------------


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

    @property
    def has_text(self) -> bool:
        return any(self.parts)


def read_stream(
    caller: HttpCaller,
    response: httpx.Response,
    *,
    url: str,
    deadline: Deadline,
    secret: str | None,
    on_event: Callable[[StreamState, ServerSentEvent], None],
    started: float,
    fallback_model: str,
    request_id_header: str,
) -> Completion:
    """Read a 2xx event stream into a Completion.

    ``on_event`` updates the state and raises ProviderError for an error event; it sets
    ``done`` on the provider's final event. A break (transport error, timeout, deadline,
    size cap, error event, or the stream ending before its final event) raises when no
    text has arrived yet, so the call is retried by the usual rules; after text arrived
    it is recorded in ``stream_error`` and the partial text is returned, never retried.
    """
    state = StreamState(request_id=response.headers.get(request_id_header))
    stream_error: str | None = None
    try:
        for event in iter_events(decode_utf8(caller.iter_capped(response, deadline, url))):
            on_event(state, event)
            if state.done:
                break
        else:
            raise ProviderError(
                f"{url}: HTTP {response.status_code}: the event stream ended before its "
                "final event",
                status=response.status_code,
                retryable=True,
            )
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
    canonical = canonical_finish_reason(state.native_finish_reason)
    if stream_error is not None:
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
        model=state.model or fallback_model,
        request_id=state.request_id,
        latency_seconds=caller.clock() - started,
        http_status=response.status_code,
        stream_error=stream_error,
    )


def is_event_stream(response: httpx.Response) -> bool:
    """Whether a 2xx answer is an event stream (a server may ignore ``stream`` and send
    one JSON body, e.g. an error object, which then takes the non-streaming path)."""
    content_type = response.headers.get("content-type", "")
    return response.is_success and content_type.split(";")[0].strip() == "text/event-stream"


# --- the connector skeleton ------------------------------------------------------------------


class HttpConnector(abc.ABC):
    """The call shared by the HTTP connectors; subclasses supply the wire format.

    The API key is read through ``key_lookup`` at call time, sent only in a header, and
    scrubbed from every message. With ``stream`` the answer is read as server-sent events
    (see :func:`read_stream`). The keyword ``options`` are :class:`ConnectorOptions`; the
    numbers among them default to :class:`HttpSettings`'s.
    """

    #: Response header holding the provider's request id.
    request_id_header: ClassVar[str]

    def __init__(
        self,
        client: httpx.Client,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None,
        **options: Unpack[ConnectorOptions],
    ):
        reject_unknown(type(self).__name__, options, ConnectorOptions.__optional_keys__)
        settings = HttpSettings.of(options)
        problem = settings.problem()
        if problem is not None:
            raise ConnectorError(f"{type(self).__name__}: {problem}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.structured_output = options.get("structured_output", False)
        self.stream = options.get("stream", False)
        self.settings = settings
        self._http = HttpCaller.of(client, settings, options)
        self._key_lookup = options.get("key_lookup", environment.api_key)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, stream={self.stream!r})"
        )

    @property
    @abc.abstractmethod
    def url(self) -> str: ...

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

    def complete(self, request: CompletionRequest) -> Completion:
        key = self._key_lookup(self.api_key_env) if self.api_key_env else None
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
            lambda deadline: self._attempt(body, key, deadline),
            limit_seconds=request.time_limit_seconds,
        )
        return dataclasses.replace(completion, attempts=attempts)

    def _attempt(self, body: bytes, key: str | None, deadline: Deadline) -> Completion:
        started = self._http.clock()

        def handle(response: httpx.Response) -> Completion:
            if self.stream and is_event_stream(response):
                return read_stream(
                    self._http,
                    response,
                    url=self.url,
                    deadline=deadline,
                    secret=key,
                    on_event=lambda state, event: self.on_event(state, event, key),
                    started=started,
                    fallback_model=self.model,
                    request_id_header=self.request_id_header,
                )
            raw = self._http.read_capped(response, deadline, self.url)
            latency = self._http.clock() - started
            if not response.is_success:
                raise http_error(self.url, response, raw, key)
            return self.parse(response, json_object(self.url, response, raw, key), key, latency)

        return self._http.post(
            self.url,
            body=body,
            headers=self.headers(key),
            deadline=deadline,
            handle=handle,
            secret=key,
        )
