"""Both connectors against a real LiteLLM proxy (``make test-peers``; docs/providers.md).

The proxy serves tests/peers/litellm.yaml: every model answers with a mock response, so
what is tested is LiteLLM's own framing (its JSON bodies, its event streams, its error
bodies and status codes) as a salvagelane connector reads it. A recording proxy
(tests/support/recording_proxy.py) sits between the connector and LiteLLM and keeps the
bytes LiteLLM sent; the answer's text is taken from those bytes with a parser of the
test's own and held against what the store saved, byte for byte, and against the mock
text in the configuration.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane._http import HttpSettings
from salvagelane.connectors import (
    AnthropicConnector,
    AnthropicSettings,
    CompletionRequest,
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
    build_connector,
)
from salvagelane.core.finish import FinishReason
from salvagelane.errors import ProviderError
from salvagelane.runtime.executor import Executor
from salvagelane.store import Store, upgrade
from tests.peers.conftest import KEY_ENV
from tests.support.provider import FakeClock
from tests.support.recording_proxy import RecordingProxy, WireResponse, http_responses
from tests.support.run_setup import Project

pytestmark = pytest.mark.peers

REQUEST = CompletionRequest(
    system="You triage workstreams.",
    user="Rank today's work.",
    max_output_tokens=256,
    temperature=0.0,
)
# A relayed model answers with another model's mock (tests/peers/litellm.yaml).
RELAYED = {"peer-relay-claude": "peer-report"}
# Tight enough to fail fast, loose enough for a proxy's first answer on a busy host.
LIMITS = {"timeout_seconds": 60.0, "deadline_seconds": 600.0}


def responses(wire: RecordingProxy) -> list[WireResponse]:
    return [found for conn in wire.connections for found in http_responses(bytes(conn.received))]


def events(body: bytes) -> Iterator[tuple[str | None, str]]:
    """(event name, data) of each server-sent event in ``body``: the test's own reading."""
    for block in body.decode("utf-8").replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:") :].removeprefix(" "))
        if data:
            yield name, "\n".join(data)


def wire_text(response: WireResponse) -> bytes:
    """The answer's text in one recorded response, as UTF-8: a chat completion's
    ``message.content``, the deltas of a chat-completion stream, or the text blocks of an
    Anthropic message."""
    if response.headers["content-type"].startswith("text/event-stream"):
        parts = []
        for name, data in events(response.body):
            if data == "[DONE]":
                continue
            event = json.loads(data)
            if name == "content_block_delta" and event["delta"]["type"] == "text_delta":
                parts.append(event["delta"]["text"])
            for choice in event.get("choices", []) if name is None else []:
                parts.append(choice.get("delta", {}).get("content") or "")
        return "".join(parts).encode("utf-8")
    body = json.loads(response.body)
    if body.get("type") == "message":
        return "".join(
            block["text"] for block in body["content"] if block["type"] == "text"
        ).encode()
    return str(body["choices"][0]["message"]["content"]).encode("utf-8")


def stored_raw(database: Path) -> list[bytes]:
    """The raw outputs in the store's SQLite file, as bytes, read without salvagelane."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT raw_output FROM attempts ORDER BY number").fetchall()
    return [bytes(row[0]) for row in rows]


# --- the raw text, byte for byte, through the executor and the store ------------------------


@pytest.mark.parametrize(
    ("kind", "model", "stream"),
    [
        ("openai", "peer-report", False),
        ("openai", "peer-report", True),
        ("anthropic", "peer-report-claude", False),
        # LiteLLM's /v1/messages mock answers JSON even to a stream request: the connector
        # must read it as the JSON it is.
        ("anthropic", "peer-report-claude", True),
        # The relayed model streams: LiteLLM's own Anthropic event stream, translated from
        # its chat-completion stream.
        ("anthropic", "peer-relay-claude", True),
    ],
    ids=[
        "openai-json",
        "openai-stream",
        "anthropic-json",
        "anthropic-stream-request",
        "anthropic-stream",
    ],
)
def test_the_stored_raw_text_is_what_litellm_sent(
    tmp_path: Path,
    wire: RecordingProxy,
    mock_responses: dict[str, Any],
    kind: str,
    model: str,
    stream: bool,
) -> None:
    project = Project.create(tmp_path / "project")
    instruction = project.instruction(
        **{
            "kind: openai": f"kind: {kind}",
            "base_url: https://openrouter.ai/api/v1": f"base_url: {wire.base_url}/v1",
            "model: openai/gpt-4.1-mini": f"model: {model}",
            "api_key_env: OPENROUTER_API_KEY": f"api_key_env: {KEY_ENV}",
            "structured_output: false": (
                f"structured_output: false\n  stream: {str(stream).lower()}"
            ),
        }
    )
    database = tmp_path / "salvagelane.db"
    url = f"sqlite:///{database}"
    upgrade(url)
    with httpx.Client() as client, Store.open(url) as store:
        outcome = Executor(
            store,
            connector_for=lambda definition: build_connector(definition.connector, client=client),
        ).run(instruction)

    assert (outcome.status, outcome.kept, outcome.attempts) == ("ok", 2, 1), outcome.error
    assert outcome.finish_reason == FinishReason.STOP.value
    (response,) = responses(wire)
    assert response.status == 200
    streamed = stream and model != "peer-report-claude"
    assert response.headers["content-type"].startswith(
        "text/event-stream" if streamed else "application/json"
    )
    sent = wire_text(response)
    assert sent == mock_responses[RELAYED.get(model, model)].encode("utf-8")
    assert stored_raw(database) == [sent]


# --- finish reasons and usage -----------------------------------------------------------------


def openai(client: httpx.Client, wire: RecordingProxy, model: str, **options: Any) -> Any:
    clock = FakeClock()
    http = HttpSettings(**{**LIMITS, **options.pop("http", {})})
    return OpenAICompatibleConnector(
        client,
        settings=OpenAICompatibleSettings(
            base_url=f"{wire.base_url}/v1", model=model, api_key_env=KEY_ENV, http=http, **options
        ),
        clock=clock,
        sleep=clock.sleep,
    )


def anthropic(client: httpx.Client, wire: RecordingProxy, model: str, **options: Any) -> Any:
    clock = FakeClock()
    http = HttpSettings(**{**LIMITS, **options.pop("http", {})})
    return AnthropicConnector(
        client,
        settings=AnthropicSettings(
            base_url=f"{wire.base_url}/v1", model=model, api_key_env=KEY_ENV, http=http, **options
        ),
        clock=clock,
        sleep=clock.sleep,
    )


def test_openai_length_finish_and_usage(client: httpx.Client, wire: RecordingProxy) -> None:
    completion = openai(client, wire, "peer-length").complete(REQUEST)
    (response,) = responses(wire)
    body = json.loads(response.body)
    assert (completion.finish_reason, completion.native_finish_reason) == (
        FinishReason.LENGTH,
        "length",
    )
    assert dict(completion.usage) == {"prompt_tokens": 11, "completion_tokens": 4}
    assert body["usage"]["prompt_tokens"] == 11
    assert completion.text.encode() == wire_text(response)


def test_openai_stream_finish_and_usage(client: httpx.Client, wire: RecordingProxy) -> None:
    completion = openai(client, wire, "peer-report", stream=True).complete(REQUEST)
    (response,) = responses(wire)
    chunks = [json.loads(data) for _, data in events(response.body) if data != "[DONE]"]
    finishes = [
        c["choices"][0]["finish_reason"]
        for c in chunks
        if c["choices"] and c["choices"][0].get("finish_reason")
    ]
    (usage,) = [chunk["usage"] for chunk in chunks if chunk.get("usage")]
    assert finishes == ["stop"]
    assert (completion.finish_reason, completion.native_finish_reason) == (
        FinishReason.STOP,
        "stop",
    )
    assert dict(completion.usage) == {
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
    }
    assert completion.usage["completion_tokens"]


def test_anthropic_end_turn_and_usage(client: httpx.Client, wire: RecordingProxy) -> None:
    completion = anthropic(client, wire, "peer-report-claude").complete(REQUEST)
    (response,) = responses(wire)
    body = json.loads(response.body)
    assert (completion.finish_reason, completion.native_finish_reason) == (
        FinishReason.STOP,
        "end_turn",
    )
    assert dict(completion.usage) == {
        "prompt_tokens": body["usage"]["input_tokens"],
        "completion_tokens": body["usage"]["output_tokens"],
    }
    assert completion.usage["prompt_tokens"]


def test_anthropic_stream_end_turn_and_usage(client: httpx.Client, wire: RecordingProxy) -> None:
    completion = anthropic(client, wire, "peer-relay-claude", stream=True).complete(REQUEST)
    (response,) = responses(wire)
    found = [json.loads(data) for name, data in events(response.body) if name == "message_delta"]
    (delta,) = found
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert (completion.finish_reason, completion.native_finish_reason) == (
        FinishReason.STOP,
        "end_turn",
    )
    # Usage is cumulative: message_delta's counts replace message_start's zeros.
    assert dict(completion.usage) == {
        "prompt_tokens": delta["usage"]["input_tokens"],
        "completion_tokens": delta["usage"]["output_tokens"],
    }
    assert completion.usage["completion_tokens"]
    assert completion.stream_error is None


# --- the structured-output hint ---------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("make", [openai, anthropic], ids=["openai", "anthropic"])
def test_the_hint_is_accepted(client: httpx.Client, wire: RecordingProxy, make: Any) -> None:
    """LiteLLM takes the request with the hint (a mock does not enforce it)."""
    model = "peer-report" if make is openai else "peer-report-claude"
    request = CompletionRequest(
        system=REQUEST.system,
        user=REQUEST.user,
        max_output_tokens=256,
        temperature=0.0,
        response_schema=SCHEMA,
    )
    completion = make(client, wire, model, structured_output=True).complete(request)
    assert completion.finish_reason is FinishReason.STOP
    sent = b"".join(bytes(conn.sent) for conn in wire.connections)
    assert (b'"response_format"' if make is openai else b'"output_config"') in sent


# --- error shapes and retries -----------------------------------------------------------------


@pytest.mark.parametrize("make", [openai, anthropic], ids=["openai", "anthropic"])
def test_an_unknown_model_is_a_400_not_retried(
    client: httpx.Client, wire: RecordingProxy, make: Any
) -> None:
    with pytest.raises(ProviderError) as caught:
        make(client, wire, "peer-no-such-model", http={"max_attempts": 3}).complete(REQUEST)
    error = caught.value
    assert (error.status, error.retryable, error.code) == (
        400,
        False,
        "400" if make is openai else "invalid_request_error",
    )
    assert "Invalid model name" in str(error)
    assert [response.status for response in responses(wire)] == [400]


@pytest.mark.parametrize("make", [openai, anthropic], ids=["openai", "anthropic"])
@pytest.mark.parametrize(
    ("model", "status", "codes"),
    [
        ("peer-rate-limited", 429, {"openai": "429", "anthropic": "rate_limit_error"}),
        ("peer-server-error", 500, {"openai": "500", "anthropic": "api_error"}),
    ],
    ids=["429", "500"],
)
def test_a_transient_error_is_retried_until_the_attempts_run_out(
    client: httpx.Client,
    wire: RecordingProxy,
    make: Any,
    model: str,
    status: int,
    codes: dict[str, str],
) -> None:
    with pytest.raises(ProviderError) as caught:
        make(client, wire, model, http={"max_attempts": 2}).complete(REQUEST)
    error = caught.value
    name = "openai" if make is openai else "anthropic"
    assert (error.status, error.retryable, error.code) == (status, True, codes[name])
    assert "mock" in str(error)
    assert [response.status for response in responses(wire)] == [status, status]
