"""Reading an action's form: only ``application/x-www-form-urlencoded``, only up to a cap,
and only once the caller has checked the access token (docs/SECURITY.md).

Starlette's ``Request.form()`` reads the whole body before anything can look at it, and
spools multipart parts to disk without a cap: a page elsewhere could make the server hold
any amount through a no-cors form POST. Here the declared length is judged before a byte
is read, a body without one (chunked) is read only up to the cap, and multipart is refused.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request

from salvagelane.errors import not_utf8

FORM_BYTES = 64 * 1024
"""The largest form body an action reads (reject, notes, bulk reject, capture)."""
APPROVE_FORM_BYTES = 8 * 1024 * 1024
"""The largest approve form: it carries the corrected item (a larger one is approved
with ``salvagelane quarantine approve ID --file FILE``)."""
FORM_FIELDS = 200
"""The most fields a form may have (the page's own forms have about ten)."""
FORM_TYPE = "application/x-www-form-urlencoded"


class FormRefused(Exception):
    """A form the page does not read: ``status`` (400, 411, 413, 415) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def declared_length(request: Request, cap: int) -> int | None:
    """The body's declared length, refused (FormRefused) before anything is read when it
    is over ``cap`` or not a length; None for a body sent without one (chunked)."""
    given = request.headers.getlist("content-length")
    if not given:
        return None
    if len(set(given)) != 1 or not given[0].isascii() or not given[0].isdigit():
        raise FormRefused(400, "Content-Length: expected one decimal length")
    length = int(given[0])
    if length > cap:
        raise FormRefused(413, f"form too large: {length} bytes, expected at most {cap}")
    return length


def require_form_type(request: Request) -> None:
    """FormRefused (415) for anything but a URL-encoded form: multipart above all."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != FORM_TYPE:
        shown = kind[:80] or "none"
        raise FormRefused(415, f"Content-Type: expected {FORM_TYPE}, got {shown}")


async def read_form(request: Request, cap: int) -> FormData:
    """The request's URL-encoded form, read up to ``cap`` bytes (FormRefused: 413 past
    it, 415 for another type, 400 for a body that is not a form of UTF-8 text)."""
    require_form_type(request)
    declared_length(request, cap)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise FormRefused(413, f"form too large: more than {cap} bytes, expected at most {cap}")
    try:
        text = bytes(body).decode("utf-8")
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=False,
            encoding="utf-8",
            errors="strict",
            max_num_fields=FORM_FIELDS,
        )
    except UnicodeDecodeError as exc:
        raise FormRefused(400, f"form: {not_utf8(exc)}") from exc
    except ValueError as exc:
        raise FormRefused(400, f"form: expected at most {FORM_FIELDS} fields") from exc
    for name, value in pairs:
        if "\x00" in name or "\x00" in value:
            # No database column takes a NUL (PostgreSQL refuses it in text).
            raise FormRefused(400, "form: a field holds a NUL character, expected text")
    fields: list[tuple[str, str | UploadFile]] = list(pairs)
    return FormData(fields)
