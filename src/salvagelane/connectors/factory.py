"""A connector for a definition's ``connector`` block."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx

from salvagelane._http import HttpSettings
from salvagelane.connectors.anthropic import DEFAULT_BASE_URL as ANTHROPIC_BASE_URL
from salvagelane.connectors.anthropic import DEFAULT_VERSION, AnthropicConnector, AnthropicSettings
from salvagelane.connectors.base import Connector
from salvagelane.connectors.openai_compatible import (
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
)
from salvagelane.connectors.replay import ReplayConnector
from salvagelane.definitions.model import ConnectorKind, ConnectorSpec
from salvagelane.errors import ConnectorError

OPENAI_BASE_URL = "https://api.openai.com/v1"


def connector_settings(
    spec: ConnectorSpec, *, deadline_seconds: float | None = None
) -> OpenAICompatibleSettings | AnthropicSettings:
    """The settings of the HTTP connector ``spec`` describes (an OpenAI-compatible or
    Anthropic one; ConnectorError for another kind).

    ``timeout_seconds`` bounds each HTTP attempt; ``deadline_seconds`` (the schedule's,
    when set) bounds the whole call with its retries, else the connector's default applies.
    ``base_url_env`` names the variable holding the base URL instead of ``base_url``: it
    is read at call time, like the key. No body cap is fixed: it follows each request's
    ``max_output_bytes`` (the executor sets the definition's).
    """
    http = HttpSettings(timeout_seconds=spec.timeout_seconds)
    if deadline_seconds is not None:
        http = dataclasses.replace(http, deadline_seconds=deadline_seconds)
    settings_type: type[OpenAICompatibleSettings | AnthropicSettings]
    if spec.kind is ConnectorKind.OPENAI:
        settings_type, default_url = OpenAICompatibleSettings, OPENAI_BASE_URL
        own = {"max_tokens_field": spec.max_tokens_field or "max_tokens"}
    elif spec.kind is ConnectorKind.ANTHROPIC:
        settings_type, default_url = AnthropicSettings, ANTHROPIC_BASE_URL
        own = {"anthropic_version": spec.anthropic_version or DEFAULT_VERSION}
    else:
        raise ConnectorError(  # pragma: no cover - build_connector handles replay itself
            "connector.kind: expected an HTTP connector (openai, anthropic), "
            f"got {spec.kind.value!r}"
        )
    return settings_type(
        base_url=None if spec.base_url_env else spec.base_url or default_url,
        base_url_env=spec.base_url_env,
        model=spec.model,
        api_key_env=spec.api_key_env,
        structured_output=spec.structured_output,
        stream=spec.stream,
        http=http,
        **own,
    )


def build_connector(
    spec: ConnectorSpec,
    *,
    client: httpx.Client,
    deadline_seconds: float | None = None,
    replay: Path | None = None,
) -> Connector:
    """The connector ``spec`` describes, of :func:`connector_settings` for an HTTP one;
    HTTP connectors share ``client``.

    ``replay`` (a fixture directory holding ``raw.txt`` and ``meta.json``, or a raw file)
    overrides the definition's connector, whatever its kind. A replay definition's
    ``fixture`` names the raw output file; a ``meta.json`` beside it is read too.
    """
    if replay is not None:
        return ReplayConnector(replay)
    if spec.kind is ConnectorKind.REPLAY:
        if spec.fixture is None:
            raise ConnectorError("connector.fixture: a replay connector needs a fixture, got none")
        return ReplayConnector(spec.fixture)
    settings = connector_settings(spec, deadline_seconds=deadline_seconds)
    if isinstance(settings, OpenAICompatibleSettings):
        return OpenAICompatibleConnector(client, settings=settings)
    return AnthropicConnector(client, settings=settings)
