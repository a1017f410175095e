"""Canonical finish reasons, and the providers' native values that map to them."""

from __future__ import annotations

import enum


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    TOOL_CALLS = "tool_calls"
    ERROR = "error"
    UNKNOWN = "unknown"


_NATIVE: dict[str, FinishReason] = {
    # OpenAI-compatible chat completions (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp)
    "stop": FinishReason.STOP,
    "eos": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "error": FinishReason.ERROR,
    # Anthropic Messages
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
    "tool_use": FinishReason.TOOL_CALLS,
    "pause_turn": FinishReason.UNKNOWN,
}


def canonical_finish_reason(native: str | None) -> FinishReason | None:
    """Map a provider's native value; None stays None (not reported), the rest is UNKNOWN."""
    if native is None:
        return None
    return _NATIVE.get(native.strip().lower(), FinishReason.UNKNOWN)
