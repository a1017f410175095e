"""Issue 29.3: whatever bytes a provider sends end as a completion or a ProviderError that
follows the retry rules, never another exception.

Both connectors call a real HTTP server on 127.0.0.1 that answers with hostile bodies and
headers: nesting past the parser's recursion, integers past Python's digit limit, bytes
that are not UTF-8, absurd ``Retry-After`` dates, broken event streams. The table holds
the cases seen crashing a run; the property feeds random mixes of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from salvagelane._http import HttpSettings
from salvagelane.connectors import (
    AnthropicConnector,
    AnthropicSettings,
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
)
from salvagelane.errors import ProviderError, SinkError
from salvagelane.sinks.webhook import WebhookSink
from tests.support.provider import (  # the fixtures are used by name
    KEY_ENV,
    REQUEST,
    SECRET,
    FakeClock,
    Scripted,
    ScriptedServer,
    client,
    connector_args,
    connector_options,
    server,
    sse_event,
)

__all__ = ["client", "server"]

DEEP = b"[" * 30_000 + b"]" * 30_000  # under the tests' 64 KiB body cap
DEEP_ERROR = b'{"error": {"message": ' + b"[" * 900 + b"]" * 900 + b"}}"
HUGE_INT = b"9" * 5000
FAR_FUTURE = "Mon, 01 Jan 99999999999999999999 00:00:00 GMT"

Connect = Callable[[], Any]


def _openai(server: ScriptedServer, client: httpx.Client, clock: FakeClock) -> Any:
    options = connector_options(server, clock, model="m", structured_output=False)
    return OpenAICompatibleConnector(client, **connector_args(OpenAICompatibleSettings, options))


def _anthropic(server: ScriptedServer, client: httpx.Client, clock: FakeClock) -> Any:
    options = connector_options(server, clock, model="claude-test")
    return AnthropicConnector(client, **connector_args(AnthropicSettings, options))


def _usage_body(kind: str) -> bytes:
    """A well-formed answer whose token count has 5,000 digits."""
    if kind == "openai":
        return (
            b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, '
            b'"finish_reason": "stop"}], "usage": {"prompt_tokens": ' + HUGE_INT + b"}}"
        )
    return (
        b'{"type": "message", "role": "assistant", "content": [{"type": "text", "text": "{}"}],'
        b' "stop_reason": "end_turn", "usage": {"input_tokens": ' + HUGE_INT + b"}}"
    )


def _call(
    make: Callable[..., Any], server: ScriptedServer, client: httpx.Client, replies: list[Scripted]
) -> tuple[Any, BaseException | None, FakeClock]:
    clock = FakeClock()
    server.script.extend(replies)
    connector = make(server, client, clock)
    try:
        return connector.complete(REQUEST), None, clock
    except ProviderError as exc:
        return None, exc, clock


CONNECTORS = [pytest.param(_openai, id="openai"), pytest.param(_anthropic, id="anthropic")]


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)


@pytest.mark.parametrize("make", CONNECTORS)
@pytest.mark.parametrize(
    ("status", "body", "retried"),
    [
        pytest.param(200, DEEP, False, id="200-deep-nesting"),
        pytest.param(400, DEEP, False, id="400-deep-nesting"),
        pytest.param(500, DEEP, True, id="500-deep-nesting"),
        pytest.param(500, DEEP_ERROR, True, id="500-error-message-nested-900-deep"),
        pytest.param(200, b'{"error": ' + b"[" * 900 + b"]" * 900 + b"}", False, id="200-error"),
        pytest.param(429, b'{"error": {"code": ' + HUGE_INT + b"}}", True, id="429-huge-code"),
        pytest.param(200, b"\xff\xfe\xfd not utf-8 \x80", False, id="200-not-utf8"),
    ],
)
def test_a_hostile_body_fails_the_call_by_the_retry_rules(
    make: Any,
    server: ScriptedServer,
    client: httpx.Client,
    status: int,
    body: bytes,
    retried: bool,
) -> None:
    server.then = Scripted(status=status, body=body)
    completion, error, _ = _call(make, server, client, [])
    assert completion is None
    assert isinstance(error, ProviderError)
    assert error.retryable is retried
    assert len(server.requests) == (5 if retried else 1)
    assert SECRET not in str(error)


@pytest.mark.parametrize("make", CONNECTORS)
def test_a_token_count_past_the_digit_limit_is_no_count(
    make: Any, server: ScriptedServer, client: httpx.Client, request: pytest.FixtureRequest
) -> None:
    kind = request.node.callspec.id.split("-")[0]
    server.script.append(Scripted(body=_usage_body(kind)))
    completion, error, _ = _call(make, server, client, [])
    # An integer of 5,000 digits (past the parser's limit): the answer is kept, its count
    # is none; it was a ValueError out of the run.
    assert error is None
    assert completion is not None
    assert completion.text == "{}"
    assert completion.usage["prompt_tokens"] is None


@pytest.mark.parametrize("make", CONNECTORS)
def test_a_retry_after_no_clock_reaches_is_ignored(
    make: Any, server: ScriptedServer, client: httpx.Client
) -> None:
    server.then = Scripted(status=503, body=b"{}", headers={"Retry-After": FAR_FUTURE})
    _, error, clock = _call(make, server, client, [])
    assert isinstance(error, ProviderError)
    assert error.retryable is True
    assert len(server.requests) == 5
    # The backoff's own waits, none from the header (which no date arithmetic can reach).
    assert all(0 < wait < 60 for wait in clock.sleeps), clock.sleeps


# --- the property: random hostile answers ----------------------------------------------------

_pieces = st.sampled_from(
    [
        b"[" * 5000,
        b"]" * 5000,
        b"{" * 3000,
        b'{"error": ',
        b'{"choices": [',
        b'{"content": [',
        b'"usage": {"prompt_tokens": ' + HUGE_INT,
        b'"input_tokens": -1',
        b'"message": {"content": ',
        b'"finish_reason": ' + b"[" * 2000,
        b"\xff\xfe",
        b"\xed\xa0\x80",  # an encoded surrogate
        b'"\\ud800"',
        b"1e999999",
        b"NaN",
        b"null",
        b"}",
        b",",
        b":",
        b"\x00",
    ]
)
_bodies = st.lists(_pieces, max_size=6).map(b"".join)
_retry_after = st.sampled_from(
    [FAR_FUTURE, "inf", "nan", "-1", "1e308", "99999999999999999999", "Tue, 31 Feb 2026 99:99:99"]
)
_events = st.lists(
    st.sampled_from(
        [
            sse_event({"choices": [{"delta": {"content": "x"}}]}),
            b"data: " + b"[" * 3000 + b"\n\n",
            b"data: " + HUGE_INT + b"\n\n",
            b"data: \xff\xfe\n\n",
            b"event: error\ndata: " + DEEP_ERROR + b"\n\n",
            b"data: [DONE]\n\n",
            b": comment\n\n",
            b"\r\r\r",
        ]
    ),
    max_size=5,
)


# CI's budget; SALVAGELANE_FUZZ_EXAMPLES sets a longer run.
EXAMPLES = int(os.environ.get("SALVAGELANE_FUZZ_EXAMPLES", "60"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    status=st.sampled_from([200, 200, 400, 429, 500, 503]),
    body=_bodies,
    retry_after=st.none() | _retry_after,
    events=st.none() | _events,
    which=st.sampled_from([_openai, _anthropic]),
)
def test_any_answer_is_a_completion_or_a_provider_error(
    status: int,
    body: bytes,
    retry_after: str | None,
    events: list[bytes] | None,
    which: Any,
    client: httpx.Client,
) -> None:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    if events is not None and status == 200:
        headers["Content-Type"] = "text/event-stream"
        reply = Scripted(status=status, chunks=events or [b"\n"], headers=headers)
    else:
        reply = Scripted(status=status, body=body, headers=headers)
    with ScriptedServer(then=reply) as server:
        completion, error, _ = _call(which, server, client, [])
    if error is None:
        assert completion is not None
        assert isinstance(completion.text, str)
    else:
        assert isinstance(error, ProviderError)
        assert len(server.requests) <= 5
        assert SECRET not in str(error)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    status=st.sampled_from([200, 204, 400, 429, 500, 503]),
    body=_bodies,
    retry_after=st.none() | _retry_after,
)
def test_any_answer_to_a_webhook_is_delivered_or_a_sink_error(
    status: int, body: bytes, retry_after: str | None, client: httpx.Client
) -> None:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    clock = FakeClock()
    with ScriptedServer(then=Scripted(status=status, body=body, headers=headers)) as server:
        sink = WebhookSink(
            client,
            url=f"{server.origin}/hook",
            token_env=KEY_ENV,
            settings=HttpSettings(
                timeout_seconds=5.0, deadline_seconds=60.0, max_response_bytes=64 * 1024
            ),
            clock=clock,
            sleep=clock.sleep,
            key_lookup=lambda name: SECRET,
        )
        if 200 <= status < 300:
            sink.deliver({"run_id": "r", "items": []})
        else:
            with pytest.raises(SinkError) as caught:
                sink.deliver({"run_id": "r", "items": []})
            assert caught.value.retryable == (status in {429, 500, 503})
            assert SECRET not in str(caught.value)
    assert 1 <= len(server.requests) <= 5
