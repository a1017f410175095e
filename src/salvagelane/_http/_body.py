"""Reading a response body within its cap and the deadline, and reading JSON out of it.

The caps: a connector's follows the definition's ``max_output_bytes``
(:func:`response_cap`), an error body is read only to quote it (:data:`ERROR_BODY_BYTES`).
A body past its cap is either an error (:func:`iter_capped`, :func:`read_capped`) or
cut there and kept (:func:`read_prefix`): a 2xx answer cut at the cap still holds the
beginning of the model's text, which :func:`json_string_prefix` decodes as far as it goes.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx

from salvagelane._http._call import Deadline
from salvagelane._http._errors import json_or_none, preview
from salvagelane.errors import ProviderError

MiB = 1024 * 1024
DEFAULT_RESPONSE_BYTES = 4 * MiB
"""The body cap of a connector whose request says nothing about its answer's size."""
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


def iter_capped(
    response: httpx.Response, deadline: Deadline, url: str, *, cap: int
) -> Iterator[bytes]:
    """The body's chunks, stopping with a non-retryable ProviderError past ``cap`` bytes
    or the deadline."""
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
            raise _deadline_passed(url, response, deadline)


def read_capped(response: httpx.Response, deadline: Deadline, url: str, *, cap: int) -> bytes:
    """The whole body, or a non-retryable ProviderError past ``cap`` bytes or the deadline."""
    return b"".join(iter_capped(response, deadline, url, cap=cap))


def read_prefix(
    response: httpx.Response, deadline: Deadline, url: str, cap: int
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
            raise _deadline_passed(url, response, deadline)
    return b"".join(parts), False


def _deadline_passed(url: str, response: httpx.Response, deadline: Deadline) -> ProviderError:
    return ProviderError(
        f"{url}: the {deadline.seconds:.3g} s deadline passed while reading",
        status=response.status_code,
        retryable=False,
    )


def json_object(
    url: str, response: httpx.Response, raw: bytes, secret: str | None
) -> dict[str, Any]:
    """The 2xx body as a JSON object, or a non-retryable error quoting what came instead."""
    text = raw.decode("utf-8", errors="replace")
    data = json_or_none(text)
    if not isinstance(data, dict):
        what = "is not JSON" if data is None else "is not a JSON object"
        raise ProviderError(
            f"{url}: HTTP {response.status_code}: response body {what}: {preview(text, secret)}",
            status=response.status_code,
            retryable=False,
        )
    return data


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_COUNT_LIMIT = 2**53
"""Token counts past this are no counts: a provider's number must fit the database's
BIGINT and a JSON reader's double."""


def int_or_none(value: Any) -> int | None:
    """A count a provider reported, or None when it is not a count one can store."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _COUNT_LIMIT:
        return value
    return None


# --- a body cut at the cap -------------------------------------------------------------------

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
