"""The Anthropic Messages connector against a real HTTP server on 127.0.0.1.

Bodies are the recorded shapes in tests/fixtures/providers. Waits go through an injected
clock and sleep; only the timeout test waits for real (one 0.1 s read timeout).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from salvagelane.connectors import AnthropicConnector, AnthropicSettings
from salvagelane.core.finish import FinishReason
from salvagelane.errors import ProviderError
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
    provider_json,
    server,
)
from tests.support.provider_schemas import CLOSED_SCHEMA, assert_fits_anthropic

__all__ = ["client", "clock", "server"]

TEXT = (
    '{"summary": "Two workstreams need attention", '
    '"recommendations": [{"id": "ws-1", "action": "unblock"}]}'
)


@pytest.fixture
def connect(server: ScriptedServer, client: Any, clock: FakeClock, monkeypatch: Any) -> Any:
    monkeypatch.setenv(KEY_ENV, SECRET)

    def make(**overrides: Any) -> AnthropicConnector:
        options = connector_options(server, clock, **{"model": "claude-test", **overrides})
        return AnthropicConnector(client, **connector_args(AnthropicSettings, options))

    return make


def message(**changes: Any) -> dict[str, Any]:
    body = provider_json("anthropic-message.json")
    body.update(changes)
    return body


def test_normal_message(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=message(), headers={"request-id": "req_abc"}))
    completion = connect().complete(REQUEST)

    assert completion.text == TEXT  # both text blocks, concatenated
    assert completion.finish_reason is FinishReason.STOP
    assert completion.native_finish_reason == "end_turn"
    assert completion.usage == {"prompt_tokens": 2095, "completion_tokens": 503}
    assert completion.model == "claude-sonnet-4-5-20250929"
    assert completion.request_id == "req_abc"
    assert completion.http_status == 200
    assert completion.stream_error is None

    [sent] = server.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == SECRET
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert sent.body == {
        "model": "claude-test",
        "system": REQUEST.system,
        "messages": [{"role": "user", "content": REQUEST.user}],
        "max_tokens": 256,
        "temperature": 0.2,
    }


def test_request_id_falls_back_to_the_message_id(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=message()))
    assert connect().complete(REQUEST).request_id == "msg_013Zva2CMHLNnXjNJJKqJ2EF"


def test_structured_output_and_version(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=message()))
    connect(structured_output=True, anthropic_version="2024-01-01").complete(REQUEST)

    [sent] = server.requests
    assert sent.headers["anthropic-version"] == "2024-01-01"
    # REQUEST's schema leaves an object open, which Anthropic refuses: no hint is sent.
    assert "output_config" not in sent.body


def test_a_closed_schema_is_sent_without_the_keywords_anthropic_lacks(
    server: ScriptedServer, connect: Any
) -> None:
    server.script.append(Scripted(body=message()))
    connect(structured_output=True).complete(
        dataclasses.replace(REQUEST, response_schema=CLOSED_SCHEMA)
    )

    [sent] = server.requests
    hint = sent.body["output_config"]["format"]
    assert hint["type"] == "json_schema"
    assert hint["schema"]["properties"]["summary"] == {"type": "string"}  # no maxLength
    assert_fits_anthropic(hint["schema"])


def test_non_text_blocks_are_left_out(server: ScriptedServer, connect: Any) -> None:
    content = [
        {"type": "thinking", "thinking": "let me see", "signature": "sig"},
        {"type": "text", "text": "{}"},
        {"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}},
    ]
    server.script.append(Scripted(body=message(content=content, stop_reason="tool_use")))
    completion = connect().complete(REQUEST)

    assert completion.text == "{}"
    assert completion.finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("max_tokens", FinishReason.LENGTH),
        ("refusal", FinishReason.CONTENT_FILTER),
        ("stop_sequence", FinishReason.STOP),
        ("pause_turn", FinishReason.UNKNOWN),
    ],
)
def test_stop_reasons(
    server: ScriptedServer, connect: Any, stop_reason: str, expected: FinishReason
) -> None:
    server.script.append(Scripted(body=message(stop_reason=stop_reason)))
    completion = connect().complete(REQUEST)

    assert completion.finish_reason is expected
    assert completion.native_finish_reason == stop_reason


def test_529_overloaded_is_retried(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    server.script.append(Scripted(status=529, body=provider_json("anthropic-overloaded-529.json")))
    server.script.append(Scripted(body=message()))
    completion = connect(backoff_seconds=0.5).complete(REQUEST)

    assert completion.attempts == 2
    assert completion.text == TEXT
    [wait] = clock.sleeps
    assert 0 < wait <= 1.0


def test_529_exhausting_attempts_names_the_error_type(
    server: ScriptedServer, connect: Any, clock: FakeClock
) -> None:
    for _ in range(3):
        server.script.append(
            Scripted(status=529, body=provider_json("anthropic-overloaded-529.json"))
        )
    with pytest.raises(ProviderError) as caught:
        connect(max_attempts=3).complete(REQUEST)

    assert caught.value.status == 529
    assert caught.value.code == "overloaded_error"
    assert caught.value.retryable is True
    assert "Overloaded" in str(caught.value)
    assert "gave up after 3 attempts" in str(caught.value)
    assert len(server.requests) == 3


def test_429_honours_retry_after(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    limited = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    server.script.append(Scripted(status=429, body=limited, headers={"retry-after": "3"}))
    server.script.append(Scripted(body=message()))
    connect().complete(REQUEST)

    assert clock.sleeps == [3.0]


def test_500_then_success(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    api_error = {"type": "error", "error": {"type": "api_error", "message": "Internal"}}
    server.script.append(Scripted(status=500, body=api_error))
    server.script.append(Scripted(body=message()))
    assert connect().complete(REQUEST).attempts == 2


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
    ],
)
def test_client_errors_are_not_retried(
    server: ScriptedServer, connect: Any, clock: FakeClock, status: int, kind: str
) -> None:
    server.script.append(
        Scripted(status=status, body={"type": "error", "error": {"type": kind, "message": "no"}})
    )
    with pytest.raises(ProviderError) as caught:
        connect().complete(REQUEST)

    assert caught.value.code == kind
    assert caught.value.retryable is False
    assert clock.sleeps == []
    assert len(server.requests) == 1


def test_body_that_is_not_json(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=b"<html>gateway</html>"))
    with pytest.raises(ProviderError, match="not JSON") as caught:
        connect().complete(REQUEST)
    assert caught.value.retryable is False


def test_error_object_at_http_200(server: ScriptedServer, connect: Any) -> None:
    server.script.append(Scripted(body=provider_json("anthropic-overloaded-529.json")))
    server.script.append(Scripted(body=message()))
    completion = connect().complete(REQUEST)

    # An overloaded error is transient wherever it is reported.
    assert completion.attempts == 2


def test_response_over_the_size_cap_keeps_the_text_received(
    server: ScriptedServer, connect: Any
) -> None:
    blocks = [{"type": "text", "text": "a" * 300}, {"type": "text", "text": "b" * 5000}]
    server.script.append(Scripted(body=message(content=blocks)))
    completion = connect(max_response_bytes=1000).complete(REQUEST)

    # Both text blocks as far as they arrived: the first whole, the second cut.
    assert completion.text.startswith("a" * 300 + "bbb")
    assert set(completion.text[300:]) == {"b"}
    assert len(completion.text) < 1000
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.stream_error is not None
    assert "response body exceeds 1000 bytes" in completion.stream_error
    assert len(server.requests) == 1


def test_read_timeout_is_retried(server: ScriptedServer, connect: Any, clock: FakeClock) -> None:
    server.script.append(Scripted(body=message(), delay=0.5))
    server.script.append(Scripted(body=message()))
    completion = connect(timeout_seconds=0.1).complete(REQUEST)

    assert completion.attempts == 2
    assert len(clock.sleeps) == 1


def test_key_never_appears_in_errors_or_reprs(server: ScriptedServer, connect: Any) -> None:
    echo = {"type": "error", "error": {"type": "authentication_error", "message": SECRET}}
    server.script.append(Scripted(status=401, body=echo))
    server.script.append(Scripted(body=f"oops {SECRET}".encode()))
    assert_secret_kept_out(connect(), calls=2)
