"""One call out over HTTP: its settings, and attempts against one URL retried under an
overall deadline.

The retry loop is tenacity's (exponential backoff with jitter), with the wait the server
asked for (``retry_after``) taking precedence, and gives up when the next wait would
cross the deadline, which includes the waits. httpx's timeouts and transport failures
are translated here, once, into retryable ProviderErrors re-raised ``from None`` with
their text scrubbed: secrets are never put in an exception, and a URL appears in a
message only as :func:`salvagelane.logs.redact_url` shows it, or by the name of the
variable it came from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import tenacity

from salvagelane._http._errors import retryable_status, scrub
from salvagelane.call_cut import CUT_HEADERS, CallCut
from salvagelane.errors import ProviderError
from salvagelane.logs import redact_url

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpSettings:
    """Per-attempt timeout, overall deadline (waits included), body cap and retry budget.

    ``max_response_bytes`` None leaves the body cap to the caller: a connector's follows
    each request's ``max_output_bytes`` (else 4 MiB), the webhook sink's is 64 KiB (see
    :mod:`salvagelane._http._body`). Given, it is fixed whatever the request says.
    """

    timeout_seconds: float = 60.0
    deadline_seconds: float = 300.0
    max_response_bytes: int | None = None
    max_attempts: int = 5
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0

    def problem(self) -> str | None:
        """What is unusable about these settings, or None; callers raise their own error
        (a connector a ConnectorError, the webhook sink a SinkError), naming themselves."""
        if not (self.timeout_seconds > 0 and self.deadline_seconds > 0):
            return "timeout_seconds and deadline_seconds must be positive"
        fixed_cap = self.max_response_bytes
        if (fixed_cap is not None and fixed_cap <= 0) or self.max_attempts < 1:
            return "max_response_bytes and max_attempts must be positive"
        if self.backoff_seconds < 0 or self.max_backoff_seconds < 0:
            return "backoff_seconds and max_backoff_seconds must not be negative"
        return None


def join_url(base: str, path: str) -> str:
    """``path`` appended to ``base``'s path, before its query string (which is kept)."""
    parts = urlsplit(base)
    return urlunsplit(
        (parts.scheme, parts.netloc, parts.path.rstrip("/") + "/" + path, parts.query, "")
    )


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

    def run(
        self,
        target: str,
        attempt: Callable[[Deadline], T],
        *,
        limit_seconds: float | None = None,
        cut: CallCut | None = None,
    ) -> tuple[T, int]:
        """``attempt``'s result and how many attempts it took.

        Retries a retryable ProviderError, waiting what the server asked (``retry_after``)
        or an exponential backoff with jitter, and gives up when the next wait would cross
        the deadline or the attempts run out. ``limit_seconds`` shortens the deadline
        (never lengthens it): what the caller has left of its own. Once ``cut`` is
        requested, no attempt starts and no wait goes on: the call ends with a
        non-retryable ProviderError saying it was cut.
        """
        seconds = self.settings.deadline_seconds
        if limit_seconds is not None:
            seconds = max(0.0, min(seconds, limit_seconds))
        deadline = Deadline(at=self.clock() + seconds, seconds=seconds, clock=self.clock)
        attempts = 0
        last: list[BaseException] = []

        def one() -> T:
            nonlocal attempts
            if cut is not None and cut.requested:
                raise cut_error(target)
            attempts += 1
            try:
                return attempt(deadline)
            except BaseException as exc:
                last[:] = [exc]
                raise

        def sleep(seconds: float) -> None:
            if self.clock() + seconds >= deadline.at:
                raise _DeadlineExceeded(seconds, last[0] if last else None)
            if cut is not None and self._sleep is time.sleep:
                cut.wait(seconds)  # a cut ends the wait (the next attempt does not start)
            else:
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
        cut: CallCut | None = None,
    ) -> T:
        """One POST to ``url``, named ``shown`` in messages (by default as
        :func:`~salvagelane.logs.redact_url` shows it); ``handle`` reads the still-open
        response. Timeouts and transport failures (also those escaping ``handle``) become
        retryable ProviderErrors; once ``cut`` is requested, a non-retryable one saying
        so (what ``handle`` returned before, such as a stream's text so far, stands)."""
        if shown is None:
            shown = redact_url(url)
        if cut is None:
            return self._post(url, body, headers, deadline, handle, secret, shown, None)
        if cut.requested:
            raise cut_error(shown)
        try:
            return self._post(
                url, body, {**headers, **CUT_HEADERS}, deadline, handle, secret, shown, cut
            )
        except ProviderError:
            if cut.requested:
                raise cut_error(shown) from None
            raise

    def _post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        deadline: Deadline,
        handle: Callable[[httpx.Response], T],
        secret: str | None,
        shown: str,
        cut: CallCut | None,
    ) -> T:
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
                extensions=None if cut is None else {"trace": cut.trace},
            ) as response:
                if cut is not None:  # a pooled connection was not traced: learn it here
                    cut.hold(response.extensions.get("network_stream"))
                try:
                    return handle(response)
                except (ProviderError, httpx.HTTPError):
                    raise
                except Exception as exc:
                    # The readers are total by design; whatever bytes still get past them
                    # (a value a connector did not expect) end the attempt as a provider
                    # error by the status's retry rules, never as a crash of the run.
                    raise _unreadable(shown, response.status_code, exc) from None
        except httpx.TimeoutException as exc:
            raise ProviderError(
                f"{shown}: timed out ({type(exc).__name__})", retryable=True
            ) from None
        except (httpx.LocalProtocolError, UnicodeEncodeError) as exc:
            # The request could not be written (a header value no HTTP header can carry):
            # asking again sends the same request. The client's message quotes the value.
            raise ProviderError(
                f"{shown}: the request could not be sent ({type(exc).__name__}): a header "
                "value is not printable ASCII",
                retryable=False,
            ) from None
        except httpx.TransportError as exc:
            message = scrub(str(exc).replace(url, shown), secret)
            raise ProviderError(
                f"{shown}: connection failed ({type(exc).__name__}: {message})", retryable=True
            ) from None


def cut_error(shown: str) -> ProviderError:
    """The error of a call that was cut (its run was cancelled): never retried."""
    return ProviderError(
        f"{shown}: the call was cut: its run was cancelled (salvagelane runs cancel)",
        retryable=False,
    )


def _unreadable(shown: str, status: int, exc: Exception) -> ProviderError:
    # Only the exception's type: its text may quote the body, which may hold anything.
    retryable = not 200 <= status < 300 and retryable_status(status)
    return ProviderError(
        f"{shown}: HTTP {status}: the response could not be read ({type(exc).__name__})",
        status=status,
        retryable=retryable,
    )


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable
