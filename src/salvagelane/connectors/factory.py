"""A connector for a definition's ``connector`` block."""

from __future__ import annotations

from pathlib import Path

import httpx

from salvagelane.connectors.anthropic import DEFAULT_BASE_URL as ANTHROPIC_BASE_URL
from salvagelane.connectors.anthropic import DEFAULT_VERSION, AnthropicConnector
from salvagelane.connectors.base import Connector
from salvagelane.connectors.http import ConnectorOptions, HttpSettings
from salvagelane.connectors.openai_compatible import OpenAICompatibleConnector
from salvagelane.connectors.replay import ReplayConnector
from salvagelane.definitions.model import Connector as ConnectorSpec
from salvagelane.definitions.model import ConnectorKind
from salvagelane.errors import ConnectorError

OPENAI_BASE_URL = "https://api.openai.com/v1"


def build_connector(
    spec: ConnectorSpec,
    *,
    client: httpx.Client,
    deadline_seconds: float | None = None,
    replay: Path | None = None,
) -> Connector:
    """The connector ``spec`` describes; HTTP connectors share ``client``.

    ``replay`` (a fixture directory holding ``raw.txt`` and ``meta.json``, or a raw file)
    overrides the definition's connector, whatever its kind. A replay definition's
    ``fixture`` names the raw output file; a ``meta.json`` beside it is read too.
    ``timeout_seconds`` bounds each HTTP attempt; ``deadline_seconds`` (the schedule's,
    when set) bounds the whole call with its retries, else the connector's default applies.
    ``base_url_env`` names the variable holding the base URL instead of ``base_url``: it
    is read at call time, like the key. The response body cap follows each request's
    ``max_output_bytes`` (the executor sets the definition's).
    """
    if replay is not None:
        return ReplayConnector(replay)
    if spec.kind is ConnectorKind.REPLAY:
        if spec.fixture is None:
            raise ConnectorError("connector.fixture: a replay connector needs a fixture, got none")
        return ReplayConnector(spec.fixture)
    deadline = HttpSettings().deadline_seconds if deadline_seconds is None else deadline_seconds
    options: ConnectorOptions = {
        "structured_output": spec.structured_output,
        "stream": spec.stream,
        "timeout_seconds": spec.timeout_seconds,
        "deadline_seconds": deadline,
    }
    if spec.kind is ConnectorKind.OPENAI:
        return OpenAICompatibleConnector(
            client,
            base_url=None if spec.base_url_env else spec.base_url or OPENAI_BASE_URL,
            base_url_env=spec.base_url_env,
            model=spec.model,
            api_key_env=spec.api_key_env,
            max_tokens_field=spec.max_tokens_field or "max_tokens",
            **options,
        )
    if spec.kind is ConnectorKind.ANTHROPIC:
        return AnthropicConnector(
            client,
            base_url=None if spec.base_url_env else spec.base_url or ANTHROPIC_BASE_URL,
            base_url_env=spec.base_url_env,
            model=spec.model,
            api_key_env=spec.api_key_env,
            anthropic_version=spec.anthropic_version or DEFAULT_VERSION,
            **options,
        )
    raise ConnectorError(  # pragma: no cover - a new ConnectorKind without a connector
        f"connector.kind: no connector implements {spec.kind.value!r}"
    )
