"""Anthropic Messages API.

One POST to ``{base_url}/messages`` per attempt (``base_url`` like
``https://api.anthropic.com/v1``), the key in ``x-api-key``, the API version in
``anthropic-version``. The text is the concatenation of the ``text`` content blocks;
``stop_reason`` maps to a canonical finish reason (``max_tokens`` -> length, ``refusal``
-> content_filter, see :mod:`salvagelane.core.finish`). Errors arrive as
``{"type": "error", "error": {"type": "overloaded_error", "message": ...}}``; 529
(overloaded) is retried like 408, 409, 429 and every 5xx.

Structured output: with ``structured_output`` the schema goes in
``output_config.format`` as ``{"type": "json_schema", "schema": ...}``, the generally
available form of Anthropic's JSON outputs (no beta header; it replaced the beta
``output_format`` parameter), per https://platform.claude.com/docs/en/build-with-claude/structured-outputs.

With ``stream=True`` the answer is read from the events ``message_start``,
``content_block_delta`` (``text_delta``), ``message_delta`` (``stop_reason``, cumulative
``usage``), ``message_stop``, ``ping`` and ``error``; unknown events are ignored, as the
API's versioning policy asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx

from salvagelane._http import (
    ServerSentEvent,
    StreamState,
    error_in_body,
    event_object,
    int_or_none,
    json_string_prefix,
    str_or_none,
    unexpected_body,
)
from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.connectors.http import ConnectorSettings, HttpConnector
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.core.schema_hint import anthropic_hint
from salvagelane.errors import ProviderError

DEFAULT_BASE_URL = "https://api.anthropic.com/v1"
DEFAULT_VERSION = "2023-06-01"

# Error types that the API documents as transient (HTTP 429, 500, 504, 529): the ones an
# error event inside a 200 stream may carry, where no status line says so.
_RETRYABLE_ERROR_TYPES = frozenset(
    {"rate_limit_error", "api_error", "timeout_error", "overloaded_error"}
)


@dataclass(frozen=True, kw_only=True, slots=True)
class AnthropicSettings(ConnectorSettings):
    """An Anthropic Messages endpoint's settings: its API version besides the common
    ones. Without ``base_url`` and ``base_url_env``, the endpoint is Anthropic's own."""

    anthropic_version: str = DEFAULT_VERSION


class AnthropicConnector(HttpConnector[AnthropicSettings]):
    """An Anthropic Messages endpoint. ``clock`` and ``sleep`` are injectable for tests."""

    request_id_header = "request-id"
    endpoint = "messages"
    default_base_url = DEFAULT_BASE_URL

    @property
    def anthropic_version(self) -> str:
        return self.settings.anthropic_version

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "system": request.system,
            "messages": [{"role": "user", "content": request.user}],
            "max_tokens": request.max_output_tokens,
            "temperature": request.temperature,
        }
        hint = (
            anthropic_hint(request.response_schema)
            if self.structured_output and request.response_schema is not None
            else None
        )
        # None also when the schema has an open object, which Anthropic would refuse.
        if hint is not None:
            body["output_config"] = {"format": {"type": "json_schema", "schema": hint.schema}}
        if self.stream:
            body["stream"] = True
        return body

    def provider_headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.anthropic_version}
        if key is not None:
            headers["x-api-key"] = key
        return headers

    # --- the answer --------------------------------------------------------------------------

    def parse(
        self, response: httpx.Response, data: dict[str, Any], key: str | None, latency: float
    ) -> Completion:
        status = response.status_code
        if data.get("type") == "error" or "error" in data:
            raise _error_object(self.url, status, data.get("error"), key, "error in a 2xx answer")
        content = data.get("content")
        if not isinstance(content, list):
            raise unexpected_body(self.url, status, data, key, "a content array")
        native = str_or_none(data.get("stop_reason"))
        canonical = canonical_finish_reason(native)
        usage = data.get("usage")
        return Completion(
            text="".join(
                block["text"]
                for block in content
                if isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
            ),
            finish_reason=canonical if canonical is not None else FinishReason.UNKNOWN,
            native_finish_reason=native,
            usage={
                "prompt_tokens": int_or_none(usage.get("input_tokens"))
                if isinstance(usage, dict)
                else None,
                "completion_tokens": int_or_none(usage.get("output_tokens"))
                if isinstance(usage, dict)
                else None,
            },
            model=str_or_none(data.get("model")) or self.model,
            request_id=response.headers.get(self.request_id_header) or str_or_none(data.get("id")),
            latency_seconds=latency,
            http_status=status,
        )

    def partial_text(self, body: str) -> str | None:
        # The text blocks of "content": [{"type": "text", "text": "...}, ...], in order,
        # up to where the body was cut.
        content = _CONTENT_ARRAY.search(body)
        if content is None:
            return None
        parts: list[str] = []
        at: int | None = content.end()
        while at is not None and (block := _TEXT.search(body, at)) is not None:
            decoded = json_string_prefix(body, block.end())
            if decoded is None:
                break
            text, at = decoded
            parts.append(text)
        return "".join(parts) if parts else None

    def on_event(self, state: StreamState, event: ServerSentEvent, key: str | None) -> None:
        data = event_object(self.url, event, key, f"{event.event} event data")
        kind = str_or_none(data.get("type")) or event.event
        if kind == "message_start":
            message = data.get("message")
            if isinstance(message, dict):
                state.request_id = state.request_id or str_or_none(message.get("id"))
                state.model = str_or_none(message.get("model")) or state.model
                _stream_usage(state, message.get("usage"))
        elif kind == "content_block_delta":
            delta = data.get("delta")
            if (
                isinstance(delta, dict)
                and delta.get("type") == "text_delta"
                and isinstance(delta.get("text"), str)
            ):
                state.parts.append(delta["text"])
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                state.native_finish_reason = delta["stop_reason"]
            _stream_usage(state, data.get("usage"))
        elif kind == "message_stop":
            state.done = True
        elif kind == "error":
            raise _error_object(self.url, 200, data.get("error"), key, "error event in the stream")
        # ping, content_block_start/stop and event types added later need nothing.


_CONTENT_ARRAY = re.compile(r'"content"\s*:\s*\[')
_TEXT = re.compile(r'"text"\s*:\s*"')


def _stream_usage(state: StreamState, usage: Any) -> None:
    """Usage in message_start and message_delta is cumulative: the latest count wins."""
    if not isinstance(usage, dict):
        return
    prompt = int_or_none(usage.get("input_tokens"))
    completion = int_or_none(usage.get("output_tokens"))
    if prompt is not None:
        state.prompt_tokens = prompt
    if completion is not None:
        state.completion_tokens = completion


def _error_object(url: str, status: int, error: Any, key: str | None, what: str) -> ProviderError:
    return error_in_body(
        url, status, error, key, what, retryable=lambda code: code in _RETRYABLE_ERROR_TYPES
    )
