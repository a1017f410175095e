"""LLM connectors: one small module per wire format, behind :class:`Connector`."""

from __future__ import annotations

from salvagelane.connectors.anthropic import AnthropicConnector, AnthropicSettings
from salvagelane.connectors.base import Completion, CompletionRequest, Connector
from salvagelane.connectors.factory import build_connector, connector_settings
from salvagelane.connectors.http import ConnectorSettings
from salvagelane.connectors.openai_compatible import (
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
)
from salvagelane.connectors.replay import ReplayConnector

__all__ = [
    "AnthropicConnector",
    "AnthropicSettings",
    "Completion",
    "CompletionRequest",
    "Connector",
    "ConnectorSettings",
    "OpenAICompatibleConnector",
    "OpenAICompatibleSettings",
    "ReplayConnector",
    "build_connector",
    "connector_settings",
]
