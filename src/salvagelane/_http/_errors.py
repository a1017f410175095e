"""Which HTTP failures are worth another attempt, how long the server asked us to wait,
and the :class:`~salvagelane.errors.ProviderError` each failure becomes.

Every message is scrubbed of the caller's secret and every registered one (in the
encodings :func:`salvagelane.logs.secret_pattern` lists) before it is put in an error.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from salvagelane.errors import ProviderError
from salvagelane.logs import scrub_text

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Retried besides every 5xx (which includes Anthropic's 529 overloaded)."""
QUOTA_CODES = frozenset(
    {"insufficient_quota", "quota_exceeded", "billing_hard_limit_reached", "billing_error"}
)
"""Error codes that mean the account is out of money: asking again cannot help."""
PREVIEW_CHARS = 200


def json_or_none(text: str) -> Any:
    """``text`` as JSON, or None when a provider's body is not JSON a parser can take:
    malformed, or nested past the parser's recursion (``[`` a hundred thousand times).
    An integer past Python's digit limit (a token count of 5,000 digits) is read as
    None: no count, rather than the whole answer lost. Never raises."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None
    except ValueError:  # only the digit limit: the text is otherwise JSON
        try:
            return json.loads(text, parse_int=_int_or_none)
        except (ValueError, RecursionError):
            return None
    except RecursionError:
        return None


def _int_or_none(digits: str) -> int | None:
    try:
        return int(digits)
    except ValueError:  # past the interpreter's digit limit
        return None


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
        except (TypeError, ValueError, IndexError, OverflowError, OSError):
            return None  # not a date, or one no clock reaches (year 99999999999999999999)
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
    data = json_or_none(text)
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
    detail = scrub(_text_of(message), secret)[:PREVIEW_CHARS] if message else "no message"
    return ProviderError(
        f"{url}: HTTP {status}: {what}" + (f" ({code})" if code else "") + f": {detail}",
        status=status,
        code=code,
        retryable=retryable(code),
    )


def _text_of(value: Any) -> str:
    """A provider's value as text for a message: a string as it is, anything else as
    JSON, or its type when even that fails (nesting deeper than the encoder goes)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return f"({type(value).__name__} too deep to show)"


def unexpected_body(
    url: str, status: int, data: Mapping[str, Any], secret: str | None, expected: str
) -> ProviderError:
    """The non-retryable error for a 2xx JSON object lacking what the provider promised."""
    return ProviderError(
        f"{url}: HTTP {status}: expected {expected}: {preview(_text_of(data), secret)}",
        status=status,
        retryable=False,
    )
