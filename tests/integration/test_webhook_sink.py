"""The webhook sink against a real HTTP server on 127.0.0.1: the payload as JSON, the
connectors' retry rules and deadline, SinkError on failure, the token never in a message.
Only the timeout test waits for real (one 0.1 s read timeout per attempt, two attempts).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest

from salvagelane.errors import SinkError
from salvagelane.sinks.webhook import WEBHOOK_SETTINGS, WebhookSink
from tests.support.provider import (  # the fixtures are used by name
    HTTP_FIELDS,
    SECRET,
    FakeClock,
    Scripted,
    ScriptedServer,
    client,
    clock,
    server,
)

__all__ = ["client", "clock", "server"]

TOKEN_ENV = "SALVAGELANE_TEST_WEBHOOK_TOKEN"
PAYLOAD = {
    "run_id": "run-1",
    "instruction": "daily-triage",
    "status": "partial",
    "partial": True,
    "finish_reason": "length",
    "counts": {"kept": 1, "quarantined": 1},
    "envelope": {"summary": "caf\u00e9"},
    "items": [{"id": "ws-1", "rank": 1}],
}


@pytest.fixture
def sink(server: ScriptedServer, client: Any, clock: FakeClock, monkeypatch: Any) -> Any:
    monkeypatch.setenv(TOKEN_ENV, SECRET)

    def make(**overrides: Any) -> WebhookSink:
        # HttpSettings' fields (timeout_seconds, max_attempts, ...) go to ``settings``.
        limits: dict[str, Any] = {"timeout_seconds": 5.0}
        options: dict[str, Any] = {
            "url": f"{server.origin}/hooks/report",
            "token_env": TOKEN_ENV,
            "clock": clock,
            "sleep": clock.sleep,
        }
        for name, value in overrides.items():
            (limits if name in HTTP_FIELDS else options)[name] = value
        return WebhookSink(client, settings=replace(WEBHOOK_SETTINGS, **limits), **options)

    return make


def test_delivers_the_payload_as_json(server: ScriptedServer, sink: Any) -> None:
    server.script.append(Scripted(status=204))
    webhook = sink()
    webhook.deliver(PAYLOAD)

    [sent] = server.requests
    assert sent.path == "/hooks/report"
    assert sent.body == PAYLOAD
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert webhook.target == f"{server.origin}/hooks/report"
    assert webhook.kind == "webhook"


def test_without_a_token_no_authorization_header(server: ScriptedServer, sink: Any) -> None:
    server.script.append(Scripted(status=200, body={"ok": True}))
    sink(token_env=None).deliver(PAYLOAD)
    assert "authorization" not in server.requests[0].headers


def test_5xx_then_success(server: ScriptedServer, sink: Any, clock: FakeClock) -> None:
    server.script.append(Scripted(status=503, headers={"Retry-After": "2"}))
    server.script.append(Scripted(status=200))
    sink().deliver(PAYLOAD)

    assert len(server.requests) == 2
    assert clock.sleeps == [2.0]


def test_429_with_retry_after(server: ScriptedServer, sink: Any, clock: FakeClock) -> None:
    server.script.append(Scripted(status=429, headers={"retry-after-ms": "1200"}))
    server.script.append(Scripted(status=202))
    sink().deliver(PAYLOAD)
    assert clock.sleeps == [1.2]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_fail_at_once(
    server: ScriptedServer, sink: Any, clock: FakeClock, status: int
) -> None:
    server.script.append(Scripted(status=status, body={"error": {"message": "nope"}}))
    webhook = sink()
    with pytest.raises(SinkError) as caught:
        webhook.deliver(PAYLOAD)

    assert caught.value.target == webhook.target
    assert caught.value.retryable is False
    assert f"HTTP {status}" in str(caught.value)
    assert "nope" in str(caught.value)
    assert clock.sleeps == []


def test_giving_up_is_retryable(server: ScriptedServer, sink: Any, clock: FakeClock) -> None:
    for _ in range(3):
        server.script.append(Scripted(status=500, body=b"down"))
    with pytest.raises(SinkError, match="gave up after 3 attempts") as caught:
        sink(max_attempts=3).deliver(PAYLOAD)

    assert caught.value.retryable is True
    assert len(server.requests) == 3


def test_deadline_bounds_the_retries(server: ScriptedServer, sink: Any, clock: FakeClock) -> None:
    for _ in range(5):
        server.script.append(Scripted(status=502, headers={"Retry-After": "4"}))
    with pytest.raises(SinkError, match="deadline"):
        sink(deadline_seconds=6.0).deliver(PAYLOAD)

    assert len(server.requests) == 2
    assert clock.sleeps == [4.0]


def test_timeout(server: ScriptedServer, sink: Any, clock: FakeClock) -> None:
    server.script.append(Scripted(status=200, delay=0.5))
    server.script.append(Scripted(status=200, delay=0.5))
    with pytest.raises(SinkError, match="timed out") as caught:
        sink(timeout_seconds=0.1, max_attempts=2).deliver(PAYLOAD)
    assert caught.value.retryable is True


def test_token_never_in_messages(server: ScriptedServer, sink: Any) -> None:
    server.script.append(Scripted(status=401, body=f"token {SECRET} rejected".encode()))
    webhook = sink()
    with pytest.raises(SinkError) as caught:
        webhook.deliver(PAYLOAD)

    error = caught.value
    assert "[REDACTED]" in str(error)
    chain: BaseException | None = error
    while chain is not None:
        for rendering in (str(chain), repr(chain), repr(chain.args)):
            assert SECRET not in rendering
        chain = chain.__cause__
    assert SECRET not in repr(webhook)


def test_missing_token_variable_names_it(
    server: ScriptedServer, sink: Any, monkeypatch: Any
) -> None:
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(SinkError, match=TOKEN_ENV) as caught:
        sink().deliver(PAYLOAD)
    assert caught.value.retryable is False
    assert server.requests == []


def test_payload_that_is_not_json(server: ScriptedServer, sink: Any) -> None:
    with pytest.raises(SinkError, match="JSON-ready"):
        sink().deliver({"at": object()})
    assert server.requests == []


def test_connection_refused(client: Any, clock: FakeClock) -> None:
    with ScriptedServer() as closed:
        url = f"{closed.origin}/hook"  # bound, never served, then closed
    with pytest.raises(SinkError, match="connection failed") as caught:
        WebhookSink(
            client,
            url=url,
            settings=replace(WEBHOOK_SETTINGS, max_attempts=2),
            clock=clock,
            sleep=clock.sleep,
        ).deliver(PAYLOAD)
    assert caught.value.target == url
    assert len(clock.sleeps) == 1


def test_the_sink_depends_on_the_http_plumbing_not_on_the_connectors() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, salvagelane.sinks.webhook\n"
            "print(sorted(m for m in sys.modules if m.startswith('salvagelane.connectors')))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert loaded.stdout.strip() == "[]"
