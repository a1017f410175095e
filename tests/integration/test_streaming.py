"""Streamed answers (server-sent events) from both connectors, against a real HTTP server.

The streams are the recorded shapes in tests/fixtures/providers. A stream that breaks
after text arrived keeps that text (``stream_error`` says why, ``finish_reason`` is ERROR)
and is never retried; a stream that breaks before any text is an ordinary, retryable
failure. Only the stall test waits for real (one 0.1 s read timeout).
"""

from __future__ import annotations

from typing import Any

import pytest

from salvagelane.connectors import (
    AnthropicConnector,
    AnthropicSettings,
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
)
from salvagelane.core.finish import FinishReason
from salvagelane.errors import ProviderError
from tests.support.provider import (  # the fixtures are used by name
    KEY_ENV,
    REQUEST,
    SECRET,
    SSE_HEADERS,
    FakeClock,
    Scripted,
    ScriptedServer,
    client,
    clock,
    connector_args,
    connector_options,
    provider_events,
    provider_json,
    server,
    sse_event,
)

__all__ = ["client", "clock", "server"]

FULL_TEXT = (
    '{"summary": "Two workstreams need attention", "recommendations": '
    '[{"id": "ws-1", "action": "unblock"}, {"id": "ws-2", "action": "review"}]}'
)
# What the first half of either recorded stream carries: cut inside the second item.
HALF_TEXT = '{"summary": "Two workstreams need attention", "recommendations": [{"id": "ws-1", '

OPENAI = provider_events("openai-stream.sse")
ANTHROPIC = provider_events("anthropic-stream.sse")


def _options(server: ScriptedServer, clock: FakeClock, overrides: dict[str, Any]) -> dict[str, Any]:
    return connector_options(server, clock, **{"stream": True, **overrides})


@pytest.fixture
def openai(server: ScriptedServer, client: Any, clock: FakeClock, monkeypatch: Any) -> Any:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return lambda **overrides: OpenAICompatibleConnector(
        client,
        **connector_args(
            OpenAICompatibleSettings, _options(server, clock, {"model": "gpt-test", **overrides})
        ),
    )


@pytest.fixture
def anthropic(server: ScriptedServer, client: Any, clock: FakeClock, monkeypatch: Any) -> Any:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return lambda **overrides: AnthropicConnector(
        client,
        **connector_args(
            AnthropicSettings, _options(server, clock, {"model": "claude-test", **overrides})
        ),
    )


def streamed(chunks: list[bytes], **options: Any) -> Scripted:
    return Scripted(headers=dict(SSE_HEADERS), chunks=chunks, **options)


def anthropic_through_first_item() -> list[bytes]:
    """message_start .. the second text delta: the text stops inside the second item."""
    return ANTHROPIC[:6]


# --- complete streams ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("connect", "events", "native", "usage", "model", "request_id", "stream_options"),
    [
        pytest.param(
            "openai",
            OPENAI,
            "stop",
            {"prompt_tokens": 19, "completion_tokens": 31},
            "gpt-4.1-2025-04-14",
            "chatcmpl-stream1",
            {"include_usage": True},
            id="openai",
        ),
        pytest.param(
            "anthropic",
            ANTHROPIC,
            "end_turn",
            {"prompt_tokens": 25, "completion_tokens": 31},
            "claude-sonnet-4-5-20250929",
            "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
            None,  # Anthropic streams have no such option
            id="anthropic",
        ),
    ],
)
def test_complete_stream(
    request: pytest.FixtureRequest,
    server: ScriptedServer,
    connect: str,
    events: list[bytes],
    native: str,
    usage: dict[str, int],
    model: str,
    request_id: str,
    stream_options: dict[str, Any] | None,
) -> None:
    server.script.append(streamed(events))
    completion = request.getfixturevalue(connect)().complete(REQUEST)

    assert completion.text == FULL_TEXT
    assert completion.finish_reason is FinishReason.STOP
    assert completion.native_finish_reason == native
    assert completion.usage == usage
    assert completion.model == model
    assert completion.request_id == request_id
    assert completion.stream_error is None
    assert completion.attempts == 1

    [sent] = server.requests
    assert sent.body["stream"] is True
    assert sent.body.get("stream_options") == stream_options
    assert sent.headers["accept"] == "text/event-stream"


def test_anthropic_stream_hitting_max_tokens(server: ScriptedServer, anthropic: Any) -> None:
    stop = sse_event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": 256},
        },
        "message_delta",
    )
    server.script.append(streamed([*anthropic_through_first_item(), stop, ANTHROPIC[-1]]))
    completion = anthropic().complete(REQUEST)

    assert completion.text == HALF_TEXT
    assert completion.finish_reason is FinishReason.LENGTH
    assert completion.native_finish_reason == "max_tokens"
    assert completion.usage["completion_tokens"] == 256
    assert completion.stream_error is None


def test_events_split_across_writes_and_crlf(server: ScriptedServer, openai: Any) -> None:
    raw = b"".join(OPENAI).replace(b"\n", b"\r\n")
    pieces = [raw[i : i + 7] for i in range(0, len(raw), 7)]  # splits CRLFs and UTF-8 alike
    server.script.append(streamed(pieces))
    assert openai().complete(REQUEST).text == FULL_TEXT


def test_a_json_answer_to_a_stream_request(server: ScriptedServer, openai: Any) -> None:
    # Some servers ignore ``stream``; their one JSON body is read as usual.
    server.script.append(Scripted(body=provider_json("openai-chat-completion.json")))
    completion = openai().complete(REQUEST)

    assert completion.finish_reason is FinishReason.STOP
    assert completion.text.startswith('{"summary"')


# --- broken streams: the partial text is the answer ------------------------------------------


@pytest.mark.parametrize("framing", ["close", "chunked"])
def test_openai_stream_cut_mid_item(
    server: ScriptedServer, openai: Any, clock: FakeClock, framing: str
) -> None:
    # Half the events, then the server closes the socket: with close framing the body
    # just ends, with chunked framing the final chunk never comes.
    server.script.append(streamed(OPENAI[:4], framing=framing, cut=True))
    completion = openai().complete(REQUEST)

    assert completion.text == HALF_TEXT
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.native_finish_reason is None
    assert completion.stream_error is not None
    assert completion.attempts == 1
    assert len(server.requests) == 1
    assert clock.sleeps == []


def test_anthropic_stream_cut_mid_item(server: ScriptedServer, anthropic: Any) -> None:
    server.script.append(streamed(anthropic_through_first_item(), framing="close"))
    completion = anthropic().complete(REQUEST)

    assert completion.text == HALF_TEXT
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.native_finish_reason is None
    assert completion.stream_error is not None
    assert "ended before its final event" in completion.stream_error
    assert completion.usage == {"prompt_tokens": 25, "completion_tokens": 1}
    assert len(server.requests) == 1


def test_dropped_connection_is_described(server: ScriptedServer, anthropic: Any) -> None:
    server.script.append(streamed(anthropic_through_first_item(), framing="chunked", cut=True))
    completion = anthropic().complete(REQUEST)

    assert completion.text == HALF_TEXT
    assert completion.stream_error is not None
    assert "mid-stream" in completion.stream_error


def test_stream_stalling_past_the_read_timeout(server: ScriptedServer, anthropic: Any) -> None:
    chunks = anthropic_through_first_item() + ANTHROPIC[6:]
    server.script.append(streamed(chunks, stall_after=6, stall=0.5))
    completion = anthropic(timeout_seconds=0.1).complete(REQUEST)

    assert completion.text == HALF_TEXT
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.stream_error is not None
    assert "timed out" in completion.stream_error
    assert len(server.requests) == 1


def test_deadline_passing_mid_stream(server: ScriptedServer, openai: Any, clock: FakeClock) -> None:
    # The client reads the first half during the stall; then the call's 60 s are over.
    def jump() -> None:
        clock.now += 61

    server.script.append(streamed(OPENAI, stall_after=4, stall=0.05, on_stall=jump, resume=True))
    completion = openai().complete(REQUEST)

    assert completion.text.startswith(HALF_TEXT)
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.stream_error is not None
    assert "60 s deadline passed while reading" in completion.stream_error
    assert len(server.requests) == 1


def test_stream_over_the_size_cap(server: ScriptedServer, openai: Any) -> None:
    filler = {"choices": [{"index": 0, "delta": {"content": "x" * 2000}}]}
    chunks = [*OPENAI[:4], *(sse_event(filler) for _ in range(10)), OPENAI[-1]]
    server.script.append(streamed(chunks))
    completion = openai(max_response_bytes=8 * 1024).complete(REQUEST)

    assert completion.text.startswith(HALF_TEXT)
    assert len(completion.text) < 8 * 1024
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.stream_error is not None
    assert "exceeds 8192 bytes" in completion.stream_error


def test_anthropic_error_event_after_text(
    server: ScriptedServer, anthropic: Any, clock: FakeClock
) -> None:
    error = sse_event(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"
    )
    server.script.append(streamed([*anthropic_through_first_item(), error]))
    completion = anthropic().complete(REQUEST)

    # Overloaded is retryable, but the text already received is the answer to salvage.
    assert completion.text == HALF_TEXT
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.stream_error is not None
    assert "overloaded_error" in completion.stream_error
    assert len(server.requests) == 1
    assert clock.sleeps == []


def test_openrouter_error_chunk_after_text(server: ScriptedServer, openai: Any) -> None:
    events = provider_events("openrouter-stream-error.sse")
    leaky = events[-1].replace(b"Provider disconnected", SECRET.encode() + b" disconnected")
    server.script.append(streamed([*events[:-1], leaky]))
    completion = openai().complete(REQUEST)

    assert completion.text == '{"summary": "Two workstreams need attention", '
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.native_finish_reason == "error"
    assert completion.stream_error is not None
    assert "server_error" in completion.stream_error
    assert SECRET not in completion.stream_error
    assert "[REDACTED]" in completion.stream_error


# --- broken before any text: an ordinary failure, retried by the usual rules -----------------


def test_error_event_before_text_is_retried(
    server: ScriptedServer, anthropic: Any, clock: FakeClock
) -> None:
    error = sse_event(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"
    )
    server.script.append(streamed([*ANTHROPIC[:2], error]))
    server.script.append(streamed(ANTHROPIC))
    completion = anthropic().complete(REQUEST)

    assert completion.text == FULL_TEXT
    assert completion.stream_error is None
    assert completion.attempts == 2
    assert len(clock.sleeps) == 1


def test_non_retryable_error_event_before_text(server: ScriptedServer, anthropic: Any) -> None:
    error = sse_event(
        {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}, "error"
    )
    server.script.append(streamed([*ANTHROPIC[:2], error]))
    with pytest.raises(ProviderError) as caught:
        anthropic().complete(REQUEST)

    assert caught.value.code == "invalid_request_error"
    assert caught.value.retryable is False
    assert len(server.requests) == 1


def test_cut_before_text_is_retried(server: ScriptedServer, openai: Any, clock: FakeClock) -> None:
    server.script.append(streamed(OPENAI[:2], framing="chunked", cut=True))
    server.script.append(streamed(OPENAI))
    completion = openai().complete(REQUEST)

    assert completion.text == FULL_TEXT
    assert completion.attempts == 2


def test_429_before_the_stream_is_retried(
    server: ScriptedServer, openai: Any, clock: FakeClock
) -> None:
    limited = {"error": {"message": "slow down", "code": "rate_limit_exceeded"}}
    server.script.append(Scripted(status=429, body=limited, headers={"retry-after-ms": "250"}))
    server.script.append(streamed(OPENAI))
    completion = openai().complete(REQUEST)

    assert completion.text == FULL_TEXT
    assert clock.sleeps == [0.25]


def test_stream_chunk_that_is_not_json(server: ScriptedServer, openai: Any) -> None:
    server.script.append(streamed([*OPENAI[:3], b"data: <html>oops</html>\n\n"]))
    completion = openai().complete(REQUEST)

    assert completion.text == '{"summary": "Two workstreams need attention", '
    assert completion.finish_reason is FinishReason.ERROR
    assert completion.stream_error is not None
    assert "not a JSON object" in completion.stream_error
    assert "<html>oops" in completion.stream_error
