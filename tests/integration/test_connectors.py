"""Connectors against a real HTTP server on 127.0.0.1, serving scripted responses.

Waits go through an injected clock and sleep, so retry timing is asserted exactly and
no test sleeps for real (except the timeout test, which waits for one short read timeout).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane._http import HttpSettings
from salvagelane.connectors import (
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
    ReplayConnector,
)
from salvagelane.core.finish import FinishReason
from salvagelane.errors import ConnectorError, ProviderError
from tests.support.provider import (  # the fixtures are used by name
    KEY_ENV,
    REQUEST,
    SECRET,
    FakeClock,
    Scripted,
    ScriptedServer,
    assert_secret_kept_out,
    client,
    clock,
    connector_args,
    connector_options,
    server,
)
from tests.support.provider_schemas import CLOSED_SCHEMA, assert_fits_openai

__all__ = ["client", "clock", "server"]


@pytest.fixture
def connect(
    server: ScriptedServer,
    client: httpx.Client,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    monkeypatch.setenv(KEY_ENV, SECRET)

    def make(**overrides: Any) -> OpenAICompatibleConnector:
        options = connector_options(
            server, clock, **{"model": "test-model", "structured_output": False, **overrides}
        )
        return OpenAICompatibleConnector(
            client, **connector_args(OpenAICompatibleSettings, options)
        )

    return make


def chat(
    content: str | None = '{"summary": "ok", "recommendations": []}',
    *,
    finish_reason: str | None = "stop",
    **extra: Any,
) -> dict[str, Any]:
    """A chat-completions response shaped as OpenAI documents it."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": finish_reason,
    }
    choice.update(extra.pop("choice", {}))
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "model": "test-model-2026-01-01",
        "choices": [choice],
        "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59},
        **extra,
    }


# --- OpenAI-compatible -------------------------------------------------------------------------


def test_normal_completion(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=chat()))
    completion = connect().complete(REQUEST)

    assert completion.text == '{"summary": "ok", "recommendations": []}'
    assert completion.finish_reason is FinishReason.STOP
    assert completion.native_finish_reason == "stop"
    assert completion.usage == {"prompt_tokens": 42, "completion_tokens": 17}
    assert completion.model == "test-model-2026-01-01"
    assert completion.request_id == "chatcmpl-abc123"
    assert completion.http_status == 200
    assert completion.attempts == 1
    assert completion.latency_seconds >= 0

    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "test-model"
    assert sent.body["max_tokens"] == 256
    assert sent.body["temperature"] == 0.2
    assert sent.body["messages"] == [
        {"role": "system", "content": REQUEST.system},
        {"role": "user", "content": REQUEST.user},
    ]
    assert "response_format" not in sent.body


def test_structured_output_and_max_tokens_field(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=chat()))
    connect(structured_output=True, max_tokens_field="max_completion_tokens").complete(REQUEST)

    [sent] = server.requests
    assert sent.body["max_completion_tokens"] == 256
    assert "max_tokens" not in sent.body
    assert sent.body["response_format"]["type"] == "json_schema"
    # REQUEST's schema leaves an object open: outside OpenAI's strict subset, so advisory.
    assert sent.body["response_format"]["json_schema"] == {
        "name": "report",
        "strict": False,
        "schema": REQUEST.response_schema,
    }
    assert_fits_openai(sent.body["response_format"]["json_schema"])


def test_a_closed_schema_is_sent_strict_without_the_keywords_openai_lacks(
    server: ScriptedServer, connect: Any
) -> None:
    server.script.append(Scripted(body=chat()))
    connect(structured_output=True).complete(
        dataclasses.replace(REQUEST, response_schema=CLOSED_SCHEMA)
    )

    [sent] = server.requests
    hint = sent.body["response_format"]["json_schema"]
    assert hint["strict"] is True
    assert hint["schema"]["properties"]["summary"] == {"type": "string"}  # no maxLength
    assert_fits_openai(hint)


def test_length_finish(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=chat('{"summary": "cut', finish_reason="length")))
    completion = connect().complete(REQUEST)

    assert completion.finish_reason is FinishReason.LENGTH
    assert completion.native_finish_reason == "length"
    assert completion.text == '{"summary": "cut'


def test_openrouter_native_finish_reason(server: ScriptedServer, connect: Any) -> None:
    body = chat(finish_reason="length", choice={"native_finish_reason": "MAX_TOKENS"})
    server.script.append(Scripted(body=body))
    completion = connect().complete(REQUEST)

    assert completion.finish_reason is FinishReason.LENGTH
    assert completion.native_finish_reason == "MAX_TOKENS"


def test_429_honours_retry_after(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    server.script.append(
        Scripted(status=429, body={"error": {"message": "slow down"}}, headers={"Retry-After": "7"})
    )
    server.script.append(Scripted(body=chat()))
    completion = connect().complete(REQUEST)

    assert len(server.requests) == 2
    assert clock.sleeps == [7.0]
    assert completion.attempts == 2
    assert completion.finish_reason is FinishReason.STOP


def test_retry_after_ms_wins(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    server.script.append(
        Scripted(status=503, headers={"retry-after-ms": "1500", "Retry-After": "30"})
    )
    server.script.append(Scripted(body=chat()))
    connect().complete(REQUEST)

    assert clock.sleeps == [1.5]


def test_500_then_success(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    server.script.append(Scripted(status=500, body=b"internal error"))
    server.script.append(Scripted(body=chat()))
    completion = connect(backoff_seconds=0.5).complete(REQUEST)

    assert len(server.requests) == 2
    assert completion.text.startswith('{"summary"')
    [wait] = clock.sleeps
    assert 0 < wait <= 0.5 + 0.5  # first exponential step plus at most the jitter


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_not_retried(
    server: ScriptedServer, connect: Any, clock: FakeClock, status: int
) -> None:
    server.script.append(Scripted(status=status, body={"error": {"message": "no", "code": "bad"}}))
    server.script.append(Scripted(body=chat()))
    with pytest.raises(ProviderError) as caught:
        connect().complete(REQUEST)

    assert len(server.requests) == 1
    assert clock.sleeps == []
    assert caught.value.status == status
    assert caught.value.code == "bad"
    assert caught.value.retryable is False
    assert f"HTTP {status}" in str(caught.value)


def test_quota_exhausted_429_is_not_retried(server: ScriptedServer, connect: Any) -> None:
    error = {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    server.script.append(Scripted(status=429, body=error, headers={"Retry-After": "1"}))
    with pytest.raises(ProviderError) as caught:
        connect().complete(REQUEST)

    assert len(server.requests) == 1
    assert caught.value.code == "insufficient_quota"


def test_openrouter_error_object_at_http_200(server: ScriptedServer, connect: Any) -> None:
    body = {"error": {"code": 400, "message": "Provider returned error"}}
    server.script.append(Scripted(body=body))
    with pytest.raises(ProviderError) as caught:
        connect().complete(REQUEST)

    assert caught.value.status == 200
    assert caught.value.code == "400"
    assert "Provider returned error" in str(caught.value)
    assert len(server.requests) == 1


def test_openrouter_finish_reason_error_at_http_200(
    server: ScriptedServer, connect: Any, clock: FakeClock
) -> None:
    upstream_failure = chat(
        "partial",
        finish_reason="error",
        choice={"error": {"code": 502, "message": "upstream disconnected"}},
    )
    server.script.append(Scripted(body=upstream_failure))
    server.script.append(Scripted(body=chat()))
    completion = connect().complete(REQUEST)

    # A 502 reported inside the body is as transient as one in the status line.
    assert len(server.requests) == 2
    assert completion.finish_reason is FinishReason.STOP
    assert len(clock.sleeps) == 1


def test_finish_reason_error_without_details(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=chat("", finish_reason="error")))
    with pytest.raises(ProviderError, match="finish_reason error"):
        connect().complete(REQUEST)
    assert len(server.requests) == 1


def test_body_that_is_not_json(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=b"<html><body>Bad gateway page</body></html>"))
    with pytest.raises(ProviderError) as caught:
        connect().complete(REQUEST)

    message = str(caught.value)
    assert "HTTP 200" in message
    assert "not JSON" in message
    assert "<html><body>Bad gateway" in message
    assert len(server.requests) == 1


def test_response_over_the_size_cap_keeps_the_text_received(
    server: ScriptedServer, connect: Any
) -> None:
    server.script.append(Scripted(body=chat("x" * 5000)))
    completion = connect(max_response_bytes=1000).complete(REQUEST)

    # Never dropped: the text in the first 1000 bytes, marked as cut, not retried.
    assert 800 < len(completion.text) < 1000
    assert set(completion.text) == {"x"}
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.stream_error == (
        f"{completion_url(connect)}: HTTP 200: response body exceeds 1000 bytes "
        f"(Content-Length {len(json.dumps(chat('x' * 5000)))}); stopped reading: kept the "
        "answer's text received so far"
    )
    assert len(server.requests) == 1


def test_a_cut_inside_an_escape_keeps_the_whole_characters_before_it(
    server: ScriptedServer, connect: Any
) -> None:
    body = json.dumps(chat("\u00e9" * 2000))  # each é is sent as a 6-character escape
    start = body.index('"content": "') + len('"content": "')
    server.script.append(Scripted(body=body.encode()))
    completion = connect(max_response_bytes=start + 6 * 100 + 3).complete(REQUEST)

    assert completion.text == "\u00e9" * 100
    assert completion.stream_error is not None


def test_a_body_cut_before_the_text_keeps_its_first_bytes(
    server: ScriptedServer, connect: Any
) -> None:
    body = json.dumps({"padding": "p" * 5000, **chat()})
    server.script.append(Scripted(body=body.encode()))
    completion = connect(max_response_bytes=1000).complete(REQUEST)

    assert completion.text == body[:1000]
    assert completion.stream_error is not None
    assert completion.stream_error.endswith(
        "stopped reading: kept the body's first 1000 bytes (no answer text found in them)"
    )


def test_an_error_body_over_the_size_cap_is_quoted_and_keeps_its_status(
    server: ScriptedServer, connect: Any, clock: FakeClock
) -> None:
    server.script.append(Scripted(status=503, body={"error": {"message": "busy " * 1000}}))
    server.script.append(Scripted(body=chat()))
    completion = connect(max_response_bytes=1000).complete(REQUEST)

    # A 503 stays a retryable 503 however long its body.
    assert completion.attempts == 2
    assert completion.stream_error is None


def completion_url(connect: Any) -> str:
    url: str = connect().url
    return url


def test_deadline_across_retries(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    for _ in range(10):
        server.script.append(Scripted(status=500, headers={"Retry-After": "4"}))
    with pytest.raises(ProviderError, match="deadline") as caught:
        connect(deadline_seconds=10.0, max_attempts=10).complete(REQUEST)

    # Attempts at t=0, 4 and 8; a third wait would end at 12, past the 10 s deadline.
    assert len(server.requests) == 3
    assert clock.sleeps == [4.0, 4.0]
    assert caught.value.status == 500
    assert "3 attempt" in str(caught.value)


@pytest.mark.parametrize(
    ("time_limit", "connector_deadline", "expected_requests", "shown"),
    [
        (6.0, 60.0, 2, "6 s deadline"),  # the run's remaining time shortens the call
        (600.0, 10.0, 3, "10 s deadline"),  # but never lengthens the connector's own
        (None, 10.0, 3, "10 s deadline"),
    ],
)
def test_a_requests_time_limit_only_shortens_the_deadline(
    server: ScriptedServer,
    connect: Any,
    clock: FakeClock,
    time_limit: float | None,
    connector_deadline: float,
    expected_requests: int,
    shown: str,
) -> None:
    for _ in range(10):
        server.script.append(Scripted(status=500, headers={"Retry-After": "4"}))
    request = dataclasses.replace(REQUEST, time_limit_seconds=time_limit)
    with pytest.raises(ProviderError, match=shown):
        connect(deadline_seconds=connector_deadline, max_attempts=10).complete(request)

    assert len(server.requests) == expected_requests


def test_attempts_are_capped(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    for _ in range(10):
        server.script.append(Scripted(status=502))
    with pytest.raises(ProviderError, match="gave up after 3 attempts"):
        connect(max_attempts=3).complete(REQUEST)

    assert len(server.requests) == 3
    assert len(clock.sleeps) == 2


def test_read_timeout_is_retried(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    server.script.append(Scripted(body=chat("late"), delay=1.0))
    server.script.append(Scripted(body=chat("in time")))
    completion = connect(timeout_seconds=0.2).complete(REQUEST)

    assert completion.text == "in time"
    assert len(server.requests) == 2
    assert len(clock.sleeps) == 1


def test_connection_refused_is_retried(client: httpx.Client, clock: FakeClock) -> None:
    with ScriptedServer() as closed:
        base_url = closed.base_url  # bound, never served, then closed
    connector = OpenAICompatibleConnector(
        client,
        settings=OpenAICompatibleSettings(
            base_url=base_url, model="m", api_key_env=None, http=HttpSettings(max_attempts=3)
        ),
        clock=clock,
        sleep=clock.sleep,
    )
    with pytest.raises(ProviderError, match="connection failed") as caught:
        connector.complete(REQUEST)

    assert caught.value.status is None
    assert len(clock.sleeps) == 2


# --- the API key -------------------------------------------------------------------------------


def test_key_is_read_from_the_environment_at_call_time(
    server: ScriptedServer, connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    connector = connect()
    monkeypatch.setenv(KEY_ENV, SECRET + "-rotated")
    server.script.append(Scripted(body=chat()))
    connector.complete(REQUEST)

    [sent] = server.requests
    assert sent.headers["authorization"] == f"Bearer {SECRET}-rotated"
    assert SECRET not in json.dumps(sent.body)


def test_key_never_appears_in_errors_or_reprs(server: ScriptedServer, connect: Any) -> None:
    # A hostile or careless server echoes the credential back in its error body.
    echo = {"error": {"message": f"invalid key Bearer {SECRET}", "code": "invalid_api_key"}}
    server.script.append(Scripted(status=401, body=echo))
    server.script.append(Scripted(body=f"not json, key={SECRET}".encode()))
    assert_secret_kept_out(connect(), calls=2)
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"


def test_missing_key_names_the_variable(
    server: ScriptedServer, connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConnectorError, match=KEY_ENV) as caught:
        connect().complete(REQUEST)

    assert not isinstance(caught.value, ProviderError)
    assert server.requests == []


# --- replay ------------------------------------------------------------------------------------


def test_replay_daily_triage_fixture(repo_root: Path) -> None:
    fixture = repo_root / "tests" / "fixtures" / "daily-triage-truncated"
    completion = ReplayConnector(fixture).complete(REQUEST)

    assert completion.text == (fixture / "raw.txt").read_text(encoding="utf-8")
    assert completion.finish_reason is FinishReason.LENGTH
    assert completion.native_finish_reason == "length"
    assert completion.usage == {"prompt_tokens": 2874, "completion_tokens": 1400}
    assert completion.model == "reconstruction"
    assert completion.http_status is None
    assert completion.latency_seconds == 0
    assert completion.request_id is None


def test_replay_missing_fixture_is_a_connector_error(tmp_path: Path) -> None:
    with pytest.raises(ConnectorError, match=r"raw\.txt"):
        ReplayConnector(tmp_path / "absent").complete(REQUEST)
