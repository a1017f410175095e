"""LLM connectors: one small module per wire format, behind :class:`Connector`."""

from __future__ import annotations

from salvagelane.connectors.anthropic import AnthropicConnector
from salvagelane.connectors.base import Completion, CompletionRequest, Connector
from salvagelane.connectors.factory import build_connector
from salvagelane.connectors.openai_compatible import OpenAICompatibleConnector
from salvagelane.connectors.replay import ReplayConnector

__all__ = [
    "AnthropicConnector",
    "Completion",
    "CompletionRequest",
    "Connector",
    "OpenAICompatibleConnector",
    "ReplayConnector",
    "build_connector",
]
