"""OpenAI-compatible chat completions (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp).

One POST to ``{base_url}/chat/completions`` per attempt, the key in ``Authorization:
Bearer``. Retries, the overall deadline, the body cap and key scrubbing come from
:mod:`salvagelane._http`. OpenRouter reports upstream failures inside an HTTP
200 body (an ``error`` object, or ``finish_reason: "error"``); both become ProviderErrors,
retryable when the upstream code is.

With ``stream=True`` the request carries ``stream: true`` and
``stream_options: {"include_usage": true}``; chunks carry ``choices[0].delta.content``,
the last choice chunk the ``finish_reason``, an optional final chunk the ``usage``, and
``data: [DONE]`` ends the stream.
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
    retryable_status,
    str_or_none,
    unexpected_body,
)
from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.connectors.http import ConnectorSettings, HttpConnector
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.core.schema_hint import openai_hint
from salvagelane.errors import ProviderError


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenAICompatibleSettings(ConnectorSettings):
    """A chat-completions endpoint's settings; ``max_tokens_field`` names the request's
    output budget (``max_completion_tokens`` for OpenAI's reasoning models)."""

    max_tokens_field: str = "max_tokens"


class OpenAICompatibleConnector(HttpConnector[OpenAICompatibleSettings]):
    """A chat-completions endpoint. ``clock`` and ``sleep`` are injectable for tests."""

    request_id_header = "x-request-id"
    endpoint = "chat/completions"

    @property
    def max_tokens_field(self) -> str:
        return self.settings.max_tokens_field

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system},
                {"role": "user", "content": request.user},
            ],
            self.max_tokens_field: request.max_output_tokens,
            "temperature": request.temperature,
        }
        if self.structured_output and request.response_schema is not None:
            # Strict only where the schema fits OpenAI's subset (core/schema_hint.py).
            hint = openai_hint(request.response_schema)
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "report", "strict": hint.strict, "schema": hint.schema},
            }
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def provider_headers(self, key: str | None) -> dict[str, str]:
        return {} if key is None else {"Authorization": f"Bearer {key}"}

    # --- the answer --------------------------------------------------------------------------

    def parse(
        self, response: httpx.Response, data: dict[str, Any], key: str | None, latency: float
    ) -> Completion:
        status = response.status_code
        error = data.get("error")
        if error is not None:
            # OpenRouter reports upstream failures with HTTP 200 and an error object.
            raise _error_object(self.url, status, error, key, "error in a successful response")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise unexpected_body(self.url, status, data, key, "a non-empty choices array")
        choice: dict[str, Any] = choices[0]
        reported = str_or_none(choice.get("finish_reason"))
        native = str_or_none(choice.get("native_finish_reason"))
        canonical = canonical_finish_reason(reported if reported is not None else native)
        if canonical is FinishReason.ERROR or choice.get("error") is not None:
            raise _error_object(
                self.url, status, choice.get("error") or {}, key, "finish_reason error"
            )
        return Completion(
            text=_content(choice.get("message")),
            finish_reason=canonical if canonical is not None else FinishReason.UNKNOWN,
            native_finish_reason=native if native is not None else reported,
            usage=_usage(data.get("usage")),
            model=str_or_none(data.get("model")) or self.model,
            request_id=str_or_none(data.get("id")) or response.headers.get("x-request-id"),
            latency_seconds=latency,
            http_status=status,
        )

    def partial_text(self, body: str) -> str | None:
        # The first choice's message content: "choices": [{..."message": {..."content": "
        choices = _CHOICES.search(body)
        content = None if choices is None else _CONTENT.search(body, choices.end())
        if content is None:
            return None
        decoded = json_string_prefix(body, content.end())
        return None if decoded is None else decoded[0]

    def on_event(self, state: StreamState, event: ServerSentEvent, key: str | None) -> None:
        if event.data.strip() == "[DONE]":
            state.done = True
            return
        chunk = event_object(self.url, event, key, "stream chunk")
        state.request_id = str_or_none(chunk.get("id")) or state.request_id
        state.model = str_or_none(chunk.get("model")) or state.model
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            state.prompt_tokens = int_or_none(usage.get("prompt_tokens"))
            state.completion_tokens = int_or_none(usage.get("completion_tokens"))
        choices = chunk.get("choices")
        choice: dict[str, Any] = {}
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                state.parts.append(delta["content"])
            reported = str_or_none(choice.get("finish_reason"))
            native = str_or_none(choice.get("native_finish_reason"))
            if native is not None or reported is not None:
                state.native_finish_reason = native if native is not None else reported
            if canonical_finish_reason(reported) is FinishReason.ERROR:
                raise _error_object(
                    self.url,
                    200,
                    choice.get("error") or chunk.get("error") or {},
                    key,
                    "finish_reason error in the stream",
                )
        if chunk.get("error") is not None:
            # OpenRouter: an upstream failure mid-stream arrives as a chunk with an error.
            raise _error_object(self.url, 200, chunk["error"], key, "error in the stream")


_CHOICES = re.compile(r'"choices"\s*:\s*\[')
_CONTENT = re.compile(r'"content"\s*:\s*"')


def _error_object(url: str, status: int, error: Any, key: str | None, what: str) -> ProviderError:
    return error_in_body(url, status, error, key, what, retryable=_upstream_status_retryable)


def _upstream_status_retryable(code: str | None) -> bool:
    # OpenRouter's code is the upstream HTTP status: a 502 in the body is as transient as
    # one in the status line.
    return code is not None and code.isdigit() and retryable_status(int(code))


def _content(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _usage(usage: Any) -> dict[str, int | None]:
    def count(name: str) -> int | None:
        return int_or_none(usage.get(name)) if isinstance(usage, dict) else None

    return {
        "prompt_tokens": count("prompt_tokens"),
        "completion_tokens": count("completion_tokens"),
    }
