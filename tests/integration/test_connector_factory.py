"""build_connector: the definition's connector block to a working connector."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane._http import HttpSettings
from salvagelane.connectors import (
    AnthropicConnector,
    AnthropicSettings,
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
    ReplayConnector,
    build_connector,
    connector_settings,
)
from salvagelane.core.finish import FinishReason
from salvagelane.definitions.model import ConnectorKind, ConnectorSpec
from tests.support.provider import (  # the fixtures are used by name
    KEY_ENV,
    REQUEST,
    SECRET,
    SSE_HEADERS,
    Scripted,
    ScriptedServer,
    client,
    provider_events,
    provider_json,
    server,
)

__all__ = ["client", "server"]


def spec(kind: ConnectorKind, **changes: Any) -> ConnectorSpec:
    values: dict[str, Any] = {
        "kind": kind,
        "model": "m-1",
        "max_output_tokens": 64,
        "temperature": 0.0,
        "timeout_seconds": 12.5,
        "structured_output": False,
        "api_key_env": KEY_ENV,
    }
    values.update(changes)
    return ConnectorSpec(**values)


def test_openai(server: ScriptedServer, client: httpx.Client, monkeypatch: Any) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    connector = build_connector(
        spec(
            ConnectorKind.OPENAI,
            base_url=server.base_url,
            max_tokens_field="max_completion_tokens",
            structured_output=True,
        ),
        client=client,
        deadline_seconds=42.0,
    )
    assert isinstance(connector, OpenAICompatibleConnector)
    assert connector.settings.http.timeout_seconds == 12.5
    assert connector.settings.http.deadline_seconds == 42.0

    server.script.append(Scripted(body=provider_json("openai-chat-completion.json")))
    completion = connector.complete(REQUEST)

    assert completion.finish_reason is FinishReason.STOP
    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "m-1"
    assert (
        sent.body["max_completion_tokens"] == REQUEST.max_output_tokens
    )  # the budget rides on the request
    assert "response_format" in sent.body
    assert sent.headers["authorization"] == f"Bearer {SECRET}"


def test_anthropic_streaming(
    server: ScriptedServer, client: httpx.Client, monkeypatch: Any
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    connector = build_connector(
        spec(
            ConnectorKind.ANTHROPIC,
            base_url=server.base_url,
            stream=True,
            anthropic_version="2025-01-01",
        ),
        client=client,
    )
    assert isinstance(connector, AnthropicConnector)
    assert connector.settings.http.timeout_seconds == 12.5

    server.script.append(
        Scripted(headers=dict(SSE_HEADERS), chunks=provider_events("anthropic-stream.sse"))
    )
    completion = connector.complete(REQUEST)

    assert completion.finish_reason is FinishReason.STOP
    [sent] = server.requests
    assert sent.path == "/v1/messages"
    assert sent.body["stream"] is True
    assert sent.headers["anthropic-version"] == "2025-01-01"
    assert sent.headers["x-api-key"] == SECRET


def test_defaults_for_unset_fields(client: httpx.Client) -> None:
    openai = build_connector(spec(ConnectorKind.OPENAI), client=client)
    anthropic = build_connector(spec(ConnectorKind.ANTHROPIC), client=client)

    assert isinstance(openai, OpenAICompatibleConnector)
    assert openai.url == "https://api.openai.com/v1/chat/completions"
    assert openai.max_tokens_field == "max_tokens"
    assert isinstance(anthropic, AnthropicConnector)
    assert anthropic.url == "https://api.anthropic.com/v1/messages"
    assert anthropic.anthropic_version == "2023-06-01"


def test_replay_definition_names_the_fixture_directory(
    client: httpx.Client, repo_root: Path
) -> None:
    fixture = repo_root / "tests" / "fixtures" / "daily-triage-truncated"
    connector = build_connector(
        spec(ConnectorKind.REPLAY, fixture=fixture, api_key_env=None), client=client
    )
    completion = connector.complete(REQUEST)

    assert isinstance(connector, ReplayConnector)
    assert completion.text == (fixture / "raw.txt").read_text(encoding="utf-8")
    # Its meta.json is read too.
    assert completion.finish_reason is FinishReason.LENGTH
    assert completion.usage == {"prompt_tokens": 2874, "completion_tokens": 1400}


def test_replay_file_with_any_name(client: httpx.Client, tmp_path: Path) -> None:
    raw = tmp_path / "recorded-output.txt"
    raw.write_text('{"summary": "x"}', encoding="utf-8")
    completion = build_connector(
        spec(ConnectorKind.REPLAY, fixture=raw, api_key_env=None), client=client
    ).complete(REQUEST)

    assert completion.text == '{"summary": "x"}'
    assert completion.finish_reason is FinishReason.UNKNOWN  # no meta.json


def test_replay_override_wins_over_any_kind(client: httpx.Client, repo_root: Path) -> None:
    fixture = repo_root / "tests" / "fixtures" / "daily-triage-truncated"
    connector = build_connector(
        spec(ConnectorKind.ANTHROPIC, base_url="http://127.0.0.1:9/v1"),
        client=client,
        replay=fixture,
    )
    assert isinstance(connector, ReplayConnector)
    assert connector.complete(REQUEST).finish_reason is FinishReason.LENGTH


def test_replay_without_fixture_is_a_connector_error(client: httpx.Client) -> None:
    from salvagelane.errors import ConnectorError

    with pytest.raises(ConnectorError, match=r"connector\.fixture"):
        build_connector(spec(ConnectorKind.REPLAY, api_key_env=None), client=client)


def test_the_spec_makes_frozen_settings() -> None:
    settings = connector_settings(
        spec(ConnectorKind.OPENAI, base_url_env="LLM_URL", stream=True), deadline_seconds=42.0
    )

    assert settings == OpenAICompatibleSettings(
        model="m-1",
        api_key_env=KEY_ENV,
        base_url=None,
        base_url_env="LLM_URL",
        structured_output=False,
        stream=True,
        http=HttpSettings(timeout_seconds=12.5, deadline_seconds=42.0),
        max_tokens_field="max_tokens",
    )
    # No body cap is fixed: it follows each request's max_output_bytes.
    assert settings.http.max_response_bytes is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.model = "other"  # type: ignore[misc]
    anthropic = connector_settings(spec(ConnectorKind.ANTHROPIC))
    assert isinstance(anthropic, AnthropicSettings)
    assert anthropic.base_url == "https://api.anthropic.com/v1"
    assert anthropic.anthropic_version == "2023-06-01"
    assert anthropic.http == HttpSettings(timeout_seconds=12.5)


def test_unusable_settings_are_a_connector_error_naming_the_connector(
    client: httpx.Client,
) -> None:
    from salvagelane.errors import ConnectorError

    bad = OpenAICompatibleSettings(
        model="m",
        api_key_env=None,
        base_url="http://127.0.0.1:9/v1",
        http=HttpSettings(max_attempts=0),
    )
    with pytest.raises(
        ConnectorError,
        match=r"^OpenAICompatibleConnector: max_response_bytes and max_attempts must be positive$",
    ):
        OpenAICompatibleConnector(client, settings=bad)
    with pytest.raises(ConnectorError, match="expected exactly one of base_url and base_url_env"):
        OpenAICompatibleConnector(
            client, settings=OpenAICompatibleSettings(model="m", api_key_env=None)
        )
