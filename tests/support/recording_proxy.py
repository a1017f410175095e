"""A recording TCP proxy: what a server sent, byte for byte, beside what the client made of it.

:class:`RecordingProxy` listens on 127.0.0.1 and relays each connection to an upstream
address unchanged, keeping every byte the upstream sent back. :func:`http_responses`
splits those bytes into HTTP/1.1 responses with a parser of its own (status line,
headers, a Content-Length or chunked body), so that a test compares the connector's
result with the wire, not with another reading by the same HTTP library.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field


@dataclass
class Connection:
    """One relayed connection: the bytes each side sent, as they arrived."""

    sent: bytearray = field(default_factory=bytearray)
    received: bytearray = field(default_factory=bytearray)


class RecordingProxy:
    """Relays 127.0.0.1:``port`` to ``upstream`` (host, port) until closed."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.connections: list[Connection] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop listening and end every relayed connection (a client may keep one open)."""
        # Closing alone does not wake a thread blocked in accept() on Linux; shutting does.
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._accepting.join(timeout=10)
        with self._lock:
            sockets = list(self._sockets)
        for end in sockets:
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=10)
        for end in sockets:
            end.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # the listener was closed
                return
            upstream = socket.create_connection(self.upstream)
            record = Connection()
            with self._lock:
                self.connections.append(record)
                self._sockets += [client, upstream]
            for source, sink, kept in (
                (client, upstream, record.sent),
                (upstream, client, record.received),
            ):
                thread = threading.Thread(
                    target=_pump, args=(source, sink, kept, self._lock), daemon=True
                )
                self._threads.append(thread)
                thread.start()


def _pump(
    source: socket.socket, sink: socket.socket, kept: bytearray, lock: threading.Lock
) -> None:
    try:
        while data := source.recv(65536):
            with lock:
                kept.extend(data)
            sink.sendall(data)
    except OSError:
        pass
    finally:
        # Pass the end on (a half-close), then let go of both ends once either is done.
        for end in (sink, source):
            with suppress(OSError):
                end.shutdown(socket.SHUT_WR if end is sink else socket.SHUT_RD)


@contextmanager
def recording_proxy(upstream_url: str) -> Iterator[RecordingProxy]:
    """A :class:`RecordingProxy` in front of ``upstream_url`` (``http://host:port``)."""
    host, _, port = upstream_url.removeprefix("http://").rstrip("/").partition(":")
    proxy = RecordingProxy((host, int(port or 80)))
    try:
        yield proxy
    finally:
        proxy.close()


@dataclass(frozen=True)
class WireResponse:
    """One HTTP response as it crossed the wire; ``body`` has its chunked framing removed.
    ``complete`` is False when the recording ends inside it: the client may stop reading
    before a stream's closing chunk, so that chunk can be still on its way."""

    status: int
    headers: dict[str, str]
    body: bytes
    complete: bool = True


def http_responses(data: bytes) -> list[WireResponse]:
    """The HTTP/1.1 responses in ``data``, in order. Assumes what a local proxy sends:
    every body delimited by Content-Length or chunked encoding, or by the end of data."""
    responses = []
    at = 0
    complete = True
    while at < len(data) and complete:
        head_end = data.index(b"\r\n\r\n", at)
        status_line, *lines = data[at:head_end].decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        at = head_end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size_end = data.find(b"\r\n", at)
                if size_end < 0:
                    complete = False
                    break
                size = int(data[at:size_end].split(b";")[0], 16)
                at = size_end + 2
                if at + size + 2 > len(data):
                    complete = False
                body += data[at : at + size]
                at += size + 2
                if size == 0:
                    break
        elif "content-length" in headers:
            length = int(headers["content-length"])
            body = bytearray(data[at : at + length])
            complete = len(body) == length
            at += length
        else:
            body, at = bytearray(data[at:]), len(data)
        status = int(status_line.split(" ")[1])
        responses.append(
            WireResponse(status=status, headers=headers, body=bytes(body), complete=complete)
        )
    return responses
