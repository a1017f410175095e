"""The one fake provider of the tests: a real HTTP server on 127.0.0.1 answering with
scripted responses (connectors, webhooks, the executor, ``serve`` and cron processes), plus
the fake clock they share and helpers for recorded provider shapes.

Each request pops the next :class:`Scripted` reply; once the script runs out, the server's
``then`` answers (by default 599, an unscripted request). A reply is either one body with
Content-Length, or a stream of chunks written and flushed one by one: chunked (optionally
cut before the final chunk, as a dropped connection) or delimited by closing the
connection (so a cut stream ends cleanly, mid-event). A ``hang`` reply is only sent once
the server closes: a provider that never answers while the test runs.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from salvagelane._http import HttpSettings
from salvagelane.connectors import CompletionRequest, Connector, ConnectorSettings
from salvagelane.errors import ProviderError

PROVIDERS = Path(__file__).resolve().parents[1] / "fixtures" / "providers"

KEY_ENV = "SALVAGELANE_TEST_API_KEY"
SECRET = "sk-test-9f8e7d6c5b4a-do-not-leak"

REQUEST = CompletionRequest(
    system="You triage workstreams.",
    user="Rank today's work.",
    max_output_tokens=256,
    temperature=0.2,
    response_schema={"type": "object", "properties": {"summary": {"type": "string"}}},
)


@dataclass
class Scripted:
    status: int = 200
    body: bytes | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    # A streamed reply: these chunks, each written and flushed on its own.
    chunks: list[bytes] | None = None
    framing: Literal["chunked", "close"] = "chunked"
    # Chunked framing: leave out the terminating chunk, so the client sees a dropped body.
    cut: bool = False
    # Stop after this many chunks for ``stall`` seconds (a read timeout on the client),
    # then call ``on_stall`` and end the reply, or go on when ``resume``.
    stall_after: int | None = None
    stall: float = 0.0
    on_stall: Callable[[], None] | None = None
    resume: bool = False
    # Answer only once the server closes (the end of the test).
    hang: bool = False


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


class ScriptedServer(ThreadingHTTPServer):
    """Serves until closed; ``with ScriptedServer() as server`` runs it on a thread."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, *, then: Scripted | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: deque[Scripted] = deque()
        self.then = then if then is not None else Scripted(status=599)
        self.requests: list[Recorded] = []
        # Called on the server's thread with each request, before its reply is sent.
        self.on_request: Callable[[Recorded], None] | None = None
        self.released = threading.Event()
        self._arrived = threading.Condition()
        self._thread = threading.Thread(target=self.serve_forever, args=(0.01,), daemon=True)

    @property
    def origin(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def next_reply(self, request: Recorded) -> Scripted:
        """Record ``request`` and take its reply: the next scripted one, else ``then``."""
        with self._arrived:
            self.requests.append(request)
            self._arrived.notify_all()
            return self.script.popleft() if self.script else self.then

    def wait_for_requests(self, count: int, timeout: float) -> None:
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(
                    f"the provider got {len(self.requests)} request(s), not {count}, "
                    f"within {timeout:g} s"
                )

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (the timeout tests) or was killed is expected; stay quiet."""

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        request = Recorded(
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=json.loads(raw),
        )
        reply = self.server.next_reply(request)
        if self.server.on_request is not None:
            self.server.on_request(request)
        if reply.hang:
            self.server.released.wait()
        if reply.delay:
            time.sleep(reply.delay)
        self.close_connection = True
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        if reply.chunks is None:
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        chunked = reply.framing == "chunked"
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, chunk in enumerate(reply.chunks):
            if reply.stall_after is not None and index == reply.stall_after:
                self.wfile.flush()
                time.sleep(reply.stall)
                if reply.on_stall is not None:
                    reply.on_stall()
                if not reply.resume:
                    return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            self.wfile.flush()
        if chunked and not reply.cut:
            self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """One client per module: building its TLS context costs ~0.1 s, and every scripted
    reply closes its connection, so nothing carries over between tests."""
    with httpx.Client() as http:
        yield http


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --- connectors aimed at the server ---------------------------------------------------------


def connector_options(server: ScriptedServer, clock: FakeClock, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for an HTTP connector calling ``server`` with the test key (the
    caller sets KEY_ENV), the fake clock and tight limits; ``overrides`` win."""
    options: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "timeout_seconds": 5.0,
        "deadline_seconds": 60.0,
        "max_response_bytes": 64 * 1024,
        "clock": clock,
        "sleep": clock.sleep,
    }
    options.update(overrides)
    return options


HOOKS = frozenset({"clock", "sleep", "key_lookup", "url_lookup"})
HTTP_FIELDS = frozenset(f.name for f in dataclasses.fields(HttpSettings))


def connector_args(
    settings_type: type[ConnectorSettings], options: Mapping[str, Any]
) -> dict[str, Any]:
    """An HTTP connector's keyword arguments from flat ``options``, as the tests write
    them: HttpSettings' fields go to ``settings.http``, the hooks (``clock``, ``sleep``,
    ``key_lookup``, ``url_lookup``) stay keyword arguments, the rest are the fields of
    ``settings_type``."""
    http = {name: value for name, value in options.items() if name in HTTP_FIELDS}
    hooks = {name: value for name, value in options.items() if name in HOOKS}
    fields = {
        name: value
        for name, value in options.items()
        if name not in HTTP_FIELDS and name not in HOOKS
    }
    return {"settings": settings_type(**fields, http=HttpSettings(**http)), **hooks}


def assert_secret_kept_out(connector: Connector, calls: int) -> None:
    """Each of the next ``calls`` calls fails with SECRET redacted from the error (its
    message, repr, args and cause), and the connector's repr never shows it."""
    for _ in range(calls):
        with pytest.raises(ProviderError) as caught:
            connector.complete(REQUEST)
        error = caught.value
        assert "[REDACTED]" in str(error)
        for rendering in (str(error), repr(error), repr(error.args), repr(error.__cause__)):
            assert SECRET not in rendering
    assert SECRET not in repr(connector)


# --- recorded provider shapes ----------------------------------------------------------------


def provider_json(name: str) -> dict[str, Any]:
    """A recorded JSON body from tests/fixtures/providers (a fresh copy each call)."""
    loaded: dict[str, Any] = json.loads((PROVIDERS / name).read_text(encoding="utf-8"))
    return loaded


def provider_events(name: str) -> list[bytes]:
    """A recorded event stream, one element per event (blank-line terminated)."""
    text = (PROVIDERS / name).read_text(encoding="utf-8")
    return [(block + "\n\n").encode() for block in text.split("\n\n") if block.strip()]


SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One event; ``data`` that is not a string is sent as JSON."""
    text = data if isinstance(data, str) else json.dumps(data)
    return ((f"event: {event}\n" if event else "") + f"data: {text}\n\n").encode()
