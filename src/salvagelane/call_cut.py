"""Cutting a model call that is in flight, from another thread (issue 29.6).

A run that is cancelled (``runs cancel``) must not wait for a provider that never
answers: its deadline may be minutes away. The executor's watcher calls
:meth:`CallCut.cut`; the call's sockets are shut down, which wakes a read blocked on
them at once (closing a socket from another thread would not), and the reader sees the
connection end: a stream keeps the text it received, anything else fails the attempt
without a retry.

The sockets are learnt from httpcore's ``trace`` extension (the connection is made for
this request: :data:`CUT_HEADERS` asks the server not to keep it for another) and,
should a pooled connection carry the request anyway, from the response's
``network_stream`` once its headers arrived.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping
from typing import Any

CUT_HEADERS: Mapping[str, str] = {"Connection": "close"}
"""Sent with a call that can be cut: its connection is its own, opened and traced for it."""


class CallCut:
    """One call's cancellation: :meth:`cut` may come from any thread, at any time (before
    the connection exists, while it is read, after the call ended)."""

    def __init__(self) -> None:
        self._requested = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def cut(self) -> None:
        """Stop the call: every socket it holds, and any it opens later, is shut down."""
        with self._lock:
            self._requested.set()
            held = list(self._sockets)
        for sock in held:
            _shut(sock)

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds``, or less when the call is cut meanwhile; True when it was."""
        return self._requested.wait(seconds)

    def hold(self, stream: Any) -> None:
        """Track the socket of an httpcore network ``stream`` (anything else is ignored)."""
        get = getattr(stream, "get_extra_info", None)
        sock = get("socket") if callable(get) else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if not self._requested.is_set():
                self._sockets.append(sock)
                return
        _shut(sock)  # cut before the connection was made: it ends now

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's ``trace`` extension: learns each connection made for the call."""
        if event == "connection.connect_tcp.complete":
            self.hold(info.get("return_value"))


def _shut(sock: socket.socket) -> None:
    # The socket may be closed already (the call ended): nothing is left to stop.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
