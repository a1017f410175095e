"""Serving the review page with uvicorn until Ctrl-C or SIGTERM."""

from __future__ import annotations

import socket

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


def serve(settings: Settings, sock: socket.socket) -> None:
    """Serve on ``sock`` until stopped; uvicorn handles SIGINT and SIGTERM."""
    config = uvicorn.Config(
        create_app(settings),
        log_level="warning",
        access_log=False,
        server_header=False,
        lifespan="off",
    )
    uvicorn.Server(config).run(sockets=[sock])
