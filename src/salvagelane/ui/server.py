"""Serving the review page with uvicorn until Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from salvagelane.errors import ConfigurationError
from salvagelane.ui.app import Settings, create_app


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is printed: a port in use is a
    ConfigurationError (exit 2) that names it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(64)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, whose stop signals end it with exit 0 as they end ``serve``:
    uvicorn raises a caught SIGINT or SIGTERM again once it has shut down (exit 130, or
    death by the signal), which the exit codes (docs/reference/cli.md) keep for an
    interrupted command."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            # Said only now: the signal handlers are in place and the socket answers.
            self._on_ready()

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        stops = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def serve(settings: Settings, sock: socket.socket, on_ready: Callable[[], None]) -> None:
    """Serve on ``sock`` until SIGINT (Ctrl-C) or SIGTERM; returns after a clean shutdown.
    ``on_ready`` runs once the server answers."""
    config = uvicorn.Config(
        create_app(settings),
        log_level="warning",
        access_log=False,
        server_header=False,
        lifespan="off",
    )
    _Server(config, on_ready).run(sockets=[sock])
