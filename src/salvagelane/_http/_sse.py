"""A small server-sent events parser (the WHATWG ``text/event-stream`` format).

Fed text chunks as they arrive, it yields one :class:`ServerSentEvent` per blank-line
terminated event. Lines may end in LF, CR or CRLF (also split across chunks); lines
starting with ``:`` are comments (OpenRouter sends ``: OPENROUTER PROCESSING`` as a
keep-alive); several ``data:`` lines join with LF. As the format requires, an event cut
off by the end of the stream before its blank line is discarded, never half-dispatched.
An event (or a line) longer than ``max_event_chars`` raises :class:`SseEventTooLarge`:
the parser holds one event at a time, so that bounds its memory whatever the stream.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


class SseEventTooLarge(ValueError):
    """An event or line longer than the parser's ``max_event_chars``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerSentEvent:
    """One dispatched event; ``event`` is ``"message"`` when the stream named none."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class SseParser:
    """Incremental parser: :meth:`feed` text, get the events it completed."""

    def __init__(self, max_event_chars: int | None = None) -> None:
        self._max = max_event_chars
        self._buffer = ""
        self._event = ""
        self._data: list[str] = []
        self._data_chars = 0
        self._id: str | None = None
        self._retry: int | None = None
        self._first = True

    def feed(self, chunk: str) -> list[ServerSentEvent]:
        """The events completed by ``chunk``."""
        if self._first and chunk:
            self._first = False
            chunk = chunk.removeprefix("\ufeff")
        # Only the new text can hold a line end (a held-back CR sits at the very end).
        start = max(len(self._buffer) - 1, 0)
        self._buffer += chunk
        events: list[ServerSentEvent] = []
        while True:
            cut = _line_end(self._buffer, start)
            if cut is None:
                self._check(len(self._buffer))
                return events
            end, width = cut
            line, self._buffer = self._buffer[:end], self._buffer[end + width :]
            start = 0
            event = self._line(line)
            if event is not None:
                events.append(event)

    def close(self) -> list[ServerSentEvent]:
        """At the end of the stream: a CR held back was a line end after all. Whatever
        event is still incomplete is dropped."""
        events: list[ServerSentEvent] = []
        if self._buffer.endswith("\r"):
            events = self.feed("\n")
        self._buffer = ""
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._data_chars += len(value) + 1
            self._check(0)
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = ServerSentEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._id,
            retry=self._retry,
        )
        self._event = ""
        self._data = []
        self._data_chars = 0
        return event

    def _check(self, pending: int) -> None:
        if self._max is not None and self._data_chars + pending > self._max:
            raise SseEventTooLarge(
                f"an event of the stream exceeds {self._max} characters; stopped reading"
            )


def _line_end(buffer: str, start: int) -> tuple[int, int] | None:
    """Where the first complete line at or after ``start`` ends, and its terminator's width.

    A CR at the very end is held back: the LF completing a CRLF may be in the next chunk.
    """
    lf = buffer.find("\n", start)
    cr = buffer.find("\r", start, lf if lf >= 0 else len(buffer))
    if cr < 0:
        return None if lf < 0 else (lf, 1)
    if cr + 1 == len(buffer):
        return None
    return cr, 2 if buffer[cr + 1] == "\n" else 1


def iter_events(
    chunks: Iterable[str], *, max_event_chars: int | None = None
) -> Iterator[ServerSentEvent]:
    """The events in a stream of text chunks, in order, as each completes."""
    parser = SseParser(max_event_chars)
    for chunk in chunks:
        yield from parser.feed(chunk)
    yield from parser.close()


def decode_utf8(chunks: Iterable[bytes]) -> Iterator[str]:
    """Byte chunks as text; a character split across chunks is decoded whole."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in chunks:
        text = decoder.decode(chunk)
        if text:
            yield text
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
