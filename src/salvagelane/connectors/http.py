"""HTTP machinery shared by every connector and the webhook sink.

Provider-independent: which answers are worth another attempt, how long the server asked
us to wait, the retry loop (tenacity: exponential backoff with jitter) under one overall
deadline that includes the waits, the bounded body read, a stream reader that keeps the
text received before a break, and scrubbing secrets out of every message.

Failures are :class:`~salvagelane.errors.ProviderError` (status, code, retryable,
retry_after); the webhook sink translates them into ``SinkError`` at its boundary.
Secrets are never put in an exception: transport errors are re-raised ``from None``
with their text scrubbed (the key and every registered secret, in the encodings
:func:`salvagelane.logs.secret_pattern` lists), and a URL appears in a message only as
:func:`salvagelane.logs.redact_url` shows it, or by the name of the variable it came from.

The body cap follows the definition's ``max_output_bytes`` (:func:`response_cap`). A
2xx body past it is not an error: the answer's text received so far is returned, marked
(``stream_error``) like a stream that broke off, and the executor stores it bounded.
"""

from __future__ import annotations

import abc
import codecs
import dataclasses
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, TypedDict, TypeVar, Unpack
from urllib.parse import urlsplit, urlunsplit

import httpx
import tenacity

from salvagelane import environment
from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.connectors.sse import (
    ServerSentEvent,
    SseEventTooLarge,
    decode_utf8,
    iter_events,
)
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.errors import ConnectorError, ProviderError
from salvagelane.logs import redact_url, register_secret, register_url, scrub_text

T = TypeVar("T")

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Retried besides every 5xx (which includes Anthropic's 529 overloaded)."""
QUOTA_CODES = frozenset(
    {"insufficient_quota", "quota_exceeded", "billing_hard_limit_reached", "billing_error"}
)
"""Error codes that mean the account is out of money: asking again cannot help."""
PREVIEW_CHARS = 200

MiB = 1024 * 1024
RESPONSE_CEILING_BYTES = 64 * MiB
"""No response body is read past this, whatever ``max_output_bytes`` says."""
JSON_ESCAPE_FACTOR = 6
"""A text's JSON string is at most 6 times its UTF-8 length (``\\u0001`` for one byte)."""
ENVELOPE_HEADROOM_BYTES = 1 * MiB
"""Room for the rest of a provider's JSON answer around the text."""
ERROR_BODY_BYTES = 64 * 1024
"""An error body is read only to quote it: a small cap is plenty."""


def response_cap(max_output_bytes: int) -> int:
    """The body cap for an answer whose text may be ``max_output_bytes`` long: room for
    that text however it is escaped, plus the envelope, at most :data:`RESPONSE_CEILING_BYTES`."""
    return min(
        RESPONSE_CEILING_BYTES, JSON_ESCAPE_FACTOR * max_output_bytes + ENVELOPE_HEADROOM_BYTES
    )


def join_url(base: str, path: str) -> str:
    """``path`` appended to ``base``'s path, before its query string (which is kept)."""
    parts = urlsplit(base)
    return urlunsplit(
        (parts.scheme, parts.netloc, parts.path.rstrip("/") + "/" + path, parts.query, "")
    )


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
    """``text`` with ``secret`` and every registered secret, in any of the encodings a
    server may echo them in, replaced by ``[REDACTED]``."""
    return scrub_text(text, secret)


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
    ``key_lookup`` to :func:`salvagelane.environment.api_key`, ``url_lookup`` (the URL
    named by ``base_url_env`` or ``url_env``) to :func:`salvagelane.environment.url`,
    ``clock`` and ``sleep`` to real time (tests inject fakes)."""

    timeout_seconds: float
    deadline_seconds: float
    max_attempts: int
    backoff_seconds: float
    max_backoff_seconds: float
    key_lookup: Callable[[str], str]
    url_lookup: Callable[[str], str]
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
        shown: str | None = None,
    ) -> T:
        """One POST to ``url``, named ``shown`` in messages (by default as
        :func:`~salvagelane.logs.redact_url` shows it); ``handle`` reads the still-open
        response. Timeouts and transport failures (also those escaping ``handle``) become
        retryable ProviderErrors."""
        if shown is None:
            shown = redact_url(url)
        remaining = deadline.remaining()
        if remaining <= 0:
            raise ProviderError(
                f"{shown}: the {deadline.seconds:.3g} s deadline passed", retryable=False
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
                f"{shown}: timed out ({type(exc).__name__})", retryable=True
            ) from None
        except httpx.TransportError as exc:
            message = scrub(str(exc).replace(url, shown), secret)
            raise ProviderError(
                f"{shown}: connection failed ({type(exc).__name__}: {message})", retryable=True
            ) from None

    def iter_capped(
        self, response: httpx.Response, deadline: Deadline, url: str, *, cap: int | None = None
    ) -> Iterator[bytes]:
        """The body's chunks, stopping with a non-retryable ProviderError past ``cap``
        bytes (default ``max_response_bytes``) or the deadline."""
        cap = self.settings.max_response_bytes if cap is None else cap
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

    def read_prefix(
        self, response: httpx.Response, deadline: Deadline, url: str, cap: int
    ) -> tuple[bytes, bool]:
        """The body, or its first ``cap`` bytes and True when it is longer (reading stops
        there). A non-retryable ProviderError when the deadline passes while reading."""
        parts: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            room = cap - size
            if len(chunk) > room:
                parts.append(chunk[:room])
                return b"".join(parts), True
            parts.append(chunk)
            size += len(chunk)
            if deadline.remaining() < 0:
                raise ProviderError(
                    f"{url}: the {deadline.seconds:.3g} s deadline passed while reading",
                    status=response.status_code,
                    retryable=False,
                )
        return b"".join(parts), False


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


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamLimits:
    """What bounds reading a stream: ``wire_bytes`` (None: only the deadline), one
    event's size in characters (the parser holds one at a time), and the text's size in
    bytes (None: unbounded), past which the answer is over ``max_output_bytes`` and
    reading it further would be wasted: it is stored clipped and never scanned."""

    wire_bytes: int | None
    event_chars: int
    text_bytes: int | None = None


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
    limits: StreamLimits | None = None,
) -> Completion:
    """Read a 2xx event stream into a Completion.

    ``on_event`` updates the state and raises ProviderError for an error event; it sets
    ``done`` on the provider's final event. A break (transport error, timeout, deadline,
    size cap, error event, or the stream ending before its final event) raises when no
    text has arrived yet, so the call is retried by the usual rules; after text arrived
    it is recorded in ``stream_error`` and the partial text is returned, never retried.
    Text past ``limits.text_bytes`` stops the reading the same way. ``limits`` default:
    the wire and an event capped at ``max_response_bytes``, the text unbounded.
    """
    if limits is None:
        cap = caller.settings.max_response_bytes
        limits = StreamLimits(wire_bytes=cap, event_chars=cap)
    state = StreamState(request_id=response.headers.get(request_id_header))
    stream_error: str | None = None
    status = response.status_code
    counted = text_bytes = 0
    chunks = caller.iter_capped(
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
        http_status=status,
        stream_error=stream_error,
    )


# --- a body past the cap ---------------------------------------------------------------------

_STRING_BODY = re.compile(r'(?:[^"\\]++|\\.)*+', re.DOTALL)
_CUT_ESCAPE = re.compile(r"(\\+)(?:u[0-9a-fA-F]{0,3})?$")


def json_string_prefix(text: str, start: int) -> tuple[str, int | None] | None:
    """The JSON string whose first character (after its opening quote) is at ``start`` in
    ``text``, decoded, and the index after its closing quote; None for that index when
    ``text`` ends first (the string is then decoded up to the last whole character).
    None when it is not a valid JSON string."""
    match = _STRING_BODY.match(text, start)
    assert match is not None  # the pattern matches the empty string
    body = match.group()
    closed = match.end() < len(text) and text[match.end()] == '"'
    if not closed:
        cut = _CUT_ESCAPE.search(body)
        if cut is not None and len(cut.group(1)) % 2 == 1:  # an escape cut in half
            body = body[: cut.start(1) + len(cut.group(1)) - 1]
    try:
        value = json.loads('"' + body + '"')
    except json.JSONDecodeError:
        return None
    return value, (match.end() + 1 if closed else None)


def body_text(raw: bytes) -> str:
    """A body's beginning as text; a character cut at the end is left out."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(raw, final=False)


def is_event_stream(response: httpx.Response) -> bool:
    """Whether a 2xx answer is an event stream (a server may ignore ``stream`` and send
    one JSON body, e.g. an error object, which then takes the non-streaming path)."""
    content_type = response.headers.get("content-type", "")
    return response.is_success and content_type.split(";")[0].strip() == "text/event-stream"


# --- the connector skeleton ------------------------------------------------------------------


def _base_url_from(name: str) -> str:
    return environment.url(name, "the connector's base URL")


class HttpConnector(abc.ABC):
    """The call shared by the HTTP connectors; subclasses supply the wire format.

    The endpoint is ``base_url`` or, read at call time, the URL held by the environment
    variable ``base_url_env`` (exactly one of them); :attr:`url` is how messages show it.
    The API key is read through ``key_lookup`` at call time, sent only in a header, and
    scrubbed from every message. With ``stream`` the answer is read as server-sent
    events (see :func:`read_stream`). The keyword ``options`` are
    :class:`ConnectorOptions`; the numbers among them default to :class:`HttpSettings`'s,
    except the body cap, which follows the request's ``max_output_bytes`` unless
    ``max_response_bytes`` is given.
    """

    #: Response header holding the provider's request id.
    request_id_header: ClassVar[str]
    #: The endpoint's path below the base URL.
    endpoint: ClassVar[str]

    def __init__(
        self,
        client: httpx.Client,
        *,
        base_url: str | None = None,
        base_url_env: str | None = None,
        model: str,
        api_key_env: str | None,
        **options: Unpack[ConnectorOptions],
    ):
        reject_unknown(type(self).__name__, options, ConnectorOptions.__optional_keys__)
        settings = HttpSettings.of(options)
        problem = settings.problem()
        if (base_url is None) == (base_url_env is None):
            problem = "expected exactly one of base_url and base_url_env"
        if problem is not None:
            raise ConnectorError(f"{type(self).__name__}: {problem}")
        self.base_url = None if base_url is None else base_url.rstrip("/")
        self.base_url_env = base_url_env
        if self.base_url is not None:
            register_url(self.base_url)
        self.model = model
        self.api_key_env = api_key_env
        self.structured_output = options.get("structured_output", False)
        self.stream = options.get("stream", False)
        self.settings = settings
        # Given explicitly, the body cap is the caller's; else it follows each request.
        self._fixed_cap = "max_response_bytes" in options
        self._http = HttpCaller.of(client, settings, options)
        self._key_lookup = options.get("key_lookup", environment.api_key)
        self._url_lookup = options.get("url_lookup", _base_url_from)

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
        )
        return dataclasses.replace(completion, attempts=attempts)

    def _body_cap(self, request: CompletionRequest) -> int:
        if self._fixed_cap or request.max_output_bytes is None:
            return self.settings.max_response_bytes
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
                # A stream's framing can outweigh its text many times over: the text is
                # bounded (max_output_bytes), one event by the body cap, the wire only by
                # the deadline, unless the caller fixed a cap.
                limits = StreamLimits(
                    wire_bytes=cap if self._fixed_cap else None,
                    event_chars=cap,
                    text_bytes=request.max_output_bytes,
                )
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
                    limits=limits,
                )
            limit = cap if response.is_success else min(cap, ERROR_BODY_BYTES)
            raw, over = self._http.read_prefix(response, deadline, self.url, limit)
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
