"""OpenAI-compatible chat completions (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp).

One POST to ``{base_url}/chat/completions`` per attempt. Retries (tenacity, exponential
backoff with jitter) cover connection errors, timeouts, 408, 409, 429 and 5xx, and honour
``retry-after-ms`` / ``retry-after``; 400, 401, 403, 404, 422 and quota-exhausted answers
are never retried. An overall deadline bounds the whole call, waits included. The body is
streamed and reading stops past ``max_response_bytes``.

The API key is read through ``key_lookup`` at call time, sent only in the
``Authorization`` header, and scrubbed from every message this module builds.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import tenacity

from salvagelane import environment
from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.errors import ConnectorError, ProviderError

RETRYABLE_STATUSES = frozenset({408, 409, 429})
_QUOTA_CODES = frozenset({"insufficient_quota", "quota_exceeded", "billing_hard_limit_reached"})
_PREVIEW_CHARS = 200
_REDACTED = "[REDACTED]"


class _DeadlineExceeded(Exception):
    """Raised by the sleep hook when waiting would cross the overall deadline."""

    def __init__(self, wait: float, last: BaseException | None):
        super().__init__(wait)
        self.wait = wait
        self.last = last


class OpenAICompatibleConnector:
    """A chat-completions endpoint. ``clock`` and ``sleep`` are injectable for tests."""

    def __init__(
        self,
        client: httpx.Client,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None,
        max_tokens_field: str = "max_tokens",
        structured_output: bool = False,
        timeout_seconds: float = 60.0,
        deadline_seconds: float = 300.0,
        max_response_bytes: int = 4 * 1024 * 1024,
        max_attempts: int = 5,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
        key_lookup: Callable[[str], str] = environment.api_key,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if timeout_seconds <= 0 or deadline_seconds <= 0:
            raise ConnectorError("timeout_seconds and deadline_seconds must be positive")
        if max_response_bytes <= 0 or max_attempts < 1:
            raise ConnectorError("max_response_bytes and max_attempts must be positive")
        self._client = client
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.max_tokens_field = max_tokens_field
        self.structured_output = structured_output
        self.timeout_seconds = timeout_seconds
        self.deadline_seconds = deadline_seconds
        self.max_response_bytes = max_response_bytes
        self.max_attempts = max_attempts
        self._backoff = tenacity.wait_exponential(
            multiplier=backoff_seconds, max=max_backoff_seconds
        ) + tenacity.wait_random(0, backoff_seconds)
        self._key_lookup = key_lookup
        self._clock = clock
        self._sleep = sleep

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleConnector(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    # --- the call ----------------------------------------------------------------------------

    def complete(self, request: CompletionRequest) -> Completion:
        key = self._key_lookup(self.api_key_env) if self.api_key_env else None
        body = self.request_body(request)
        deadline_at = self._clock() + self.deadline_seconds
        attempts = 0
        last: list[BaseException] = []

        def attempt() -> Completion:
            nonlocal attempts
            attempts += 1
            try:
                return self._attempt(body, key, deadline_at)
            except BaseException as exc:
                last[:] = [exc]
                raise

        def sleep(seconds: float) -> None:
            if self._clock() + seconds >= deadline_at:
                raise _DeadlineExceeded(seconds, last[0] if last else None)
            self._sleep(seconds)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_attempts),
            wait=self._wait,
            retry=tenacity.retry_if_exception(_is_retryable),
            sleep=sleep,
            reraise=True,
        )
        try:
            completion = retrying(attempt)
        except _DeadlineExceeded as exc:
            cause = exc.last
            status = cause.status if isinstance(cause, ProviderError) else None
            code = cause.code if isinstance(cause, ProviderError) else None
            raise ProviderError(
                f"{self.url}: gave up after {attempts} attempt(s): the next wait of "
                f"{exc.wait:.3g} s would cross the {self.deadline_seconds:g} s deadline; "
                f"last error: {cause}",
                status=status,
                code=code,
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
        return Completion(
            text=completion.text,
            finish_reason=completion.finish_reason,
            native_finish_reason=completion.native_finish_reason,
            usage=completion.usage,
            model=completion.model,
            request_id=completion.request_id,
            latency_seconds=completion.latency_seconds,
            http_status=completion.http_status,
            attempts=attempts,
        )

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (no secrets: the key goes in a header)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system},
                {"role": "user", "content": request.user},
            ],
            self.max_tokens_field: request.max_output_tokens,
            "temperature": request.temperature,
        }
        if self.structured_output and request.response_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "report", "schema": dict(request.response_schema)},
            }
        return body

    def _wait(self, retry_state: tenacity.RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, ProviderError) and exc.retry_after is not None:
            return exc.retry_after
        return float(self._backoff(retry_state))

    def _attempt(self, body: dict[str, Any], key: str | None, deadline_at: float) -> Completion:
        remaining = deadline_at - self._clock()
        if remaining <= 0:
            raise ProviderError(
                f"{self.url}: the {self.deadline_seconds:g} s deadline passed", retryable=False
            )
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        started = self._clock()
        try:
            with self._client.stream(
                "POST",
                self.url,
                json=body,
                headers=headers,
                timeout=httpx.Timeout(min(self.timeout_seconds, remaining)),
            ) as response:
                raw = self._read_capped(response, deadline_at)
        except httpx.TimeoutException as exc:
            raise ProviderError(
                f"{self.url}: timed out ({type(exc).__name__})", retryable=True
            ) from None
        except httpx.TransportError as exc:
            message = _scrub(str(exc), key)
            raise ProviderError(
                f"{self.url}: connection failed ({type(exc).__name__}: {message})", retryable=True
            ) from None
        latency = self._clock() - started
        return self._parse(response, raw, key, latency)

    def _read_capped(self, response: httpx.Response, deadline_at: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_response_bytes:
                raise ProviderError(
                    f"{self.url}: HTTP {response.status_code}: response body exceeds "
                    f"{self.max_response_bytes} bytes; stopped reading",
                    status=response.status_code,
                    retryable=False,
                )
            chunks.append(chunk)
            if self._clock() > deadline_at:
                raise ProviderError(
                    f"{self.url}: the {self.deadline_seconds:g} s deadline passed while reading",
                    status=response.status_code,
                    retryable=False,
                )
        return b"".join(chunks)

    # --- the answer --------------------------------------------------------------------------

    def _parse(
        self, response: httpx.Response, raw: bytes, key: str | None, latency: float
    ) -> Completion:
        status = response.status_code
        text = raw.decode("utf-8", errors="replace")
        try:
            data: Any = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if not 200 <= status < 300:
            raise self._http_error(response, data, text, key)
        if not isinstance(data, dict):
            what = "is not JSON" if data is None else "is not a JSON object"
            raise ProviderError(
                f"{self.url}: HTTP {status}: response body {what}: {_preview(text, key)}",
                status=status,
                retryable=False,
            )
        error = data.get("error")
        if error is not None:
            # OpenRouter reports upstream failures with HTTP 200 and an error object.
            raise _error_object(self.url, status, error, key, "error in a successful response")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ProviderError(
                f"{self.url}: HTTP {status}: expected a non-empty choices array: "
                f"{_preview(text, key)}",
                status=status,
                retryable=False,
            )
        choice: dict[str, Any] = choices[0]
        reported = _str_or_none(choice.get("finish_reason"))
        native = _str_or_none(choice.get("native_finish_reason"))
        canonical = canonical_finish_reason(reported if reported is not None else native)
        if canonical is FinishReason.ERROR or choice.get("error") is not None:
            raise _error_object(
                self.url, status, choice.get("error") or {}, key, "finish_reason error"
            )
        return Completion(
            text=_content(choice.get("message")),
            finish_reason=canonical if canonical is not None else FinishReason.UNKNOWN,
            native_finish_reason=native if native is not None else reported,
            usage=_usage(data.get("usage")),
            model=_str_or_none(data.get("model")) or self.model,
            request_id=_str_or_none(data.get("id")) or response.headers.get("x-request-id"),
            latency_seconds=latency,
            http_status=status,
        )

    def _http_error(
        self, response: httpx.Response, data: Any, text: str, key: str | None
    ) -> ProviderError:
        status = response.status_code
        code: str | None = None
        detail = _preview(text, key)
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            code = _code(error)
            if isinstance(error.get("message"), str):
                detail = _scrub(error["message"], key)[:_PREVIEW_CHARS]
        retryable = (status in RETRYABLE_STATUSES or status >= 500) and code not in _QUOTA_CODES
        return ProviderError(
            f"{self.url}: HTTP {status}" + (f" ({code})" if code else "") + f": {detail}",
            status=status,
            code=code,
            retryable=retryable,
            retry_after=_retry_after(response.headers) if retryable else None,
        )


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


def _retry_after(headers: httpx.Headers) -> float | None:
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


def _error_object(url: str, status: int, error: Any, key: str | None, what: str) -> ProviderError:
    code = _code(error) if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    detail = _scrub(str(message), key)[:_PREVIEW_CHARS] if message else "no message"
    retryable = False
    if code is not None and code.isdigit():
        native = int(code)
        retryable = native in RETRYABLE_STATUSES or native >= 500
    return ProviderError(
        f"{url}: HTTP {status}: {what}" + (f" ({code})" if code else "") + f": {detail}",
        status=status,
        code=code,
        retryable=retryable,
    )


def _code(error: Mapping[str, Any]) -> str | None:
    code = error.get("code")
    if code is None:
        code = error.get("type")
    return None if code is None else str(code)


def _content(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _usage(usage: Any) -> dict[str, int | None]:
    def count(name: str) -> int | None:
        value = usage.get(name) if isinstance(usage, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return {
        "prompt_tokens": count("prompt_tokens"),
        "completion_tokens": count("completion_tokens"),
    }


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _scrub(text: str, key: str | None) -> str:
    return text.replace(key, _REDACTED) if key else text


def _preview(text: str, key: str | None) -> str:
    text = _scrub(text, key)
    short = text[:_PREVIEW_CHARS] + ("…" if len(text) > _PREVIEW_CHARS else "")
    return repr(short) if short else "(empty body)"
