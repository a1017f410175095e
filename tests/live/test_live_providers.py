"""Live calls to real providers. THESE SPEND MONEY (a few hundred tokens per test).

Never run by CI: every test is skipped unless ``SALVAGELANE_RUN_LIVE=1`` is set AND the
provider's key is in the environment (``OPENROUTER_API_KEY`` for OpenRouter,
``ANTHROPIC_API_KEY`` for Anthropic). Models can be chosen with
``SALVAGELANE_LIVE_OPENROUTER_MODEL`` and ``SALVAGELANE_LIVE_ANTHROPIC_MODEL``.

    SALVAGELANE_RUN_LIVE=1 pytest -m live tests/live -s
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from salvagelane._http import HttpSettings
from salvagelane.connectors import (
    AnthropicConnector,
    AnthropicSettings,
    Completion,
    CompletionRequest,
    Connector,
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
)
from salvagelane.core.finish import FinishReason

pytestmark = pytest.mark.live

LIVE_LIMITS = HttpSettings(timeout_seconds=60, deadline_seconds=120)

REQUEST = CompletionRequest(
    system='Answer with one JSON object of the form {"colours": [string, ...]} and nothing else.',
    user="Name three primary colours.",
    max_output_tokens=64,
    temperature=0.0,
)


def _require(key_env: str) -> None:
    if os.environ.get("SALVAGELANE_RUN_LIVE") != "1":
        pytest.skip("live provider test: spends money; set SALVAGELANE_RUN_LIVE=1 to run it")
    if not os.environ.get(key_env, "").strip():
        pytest.skip(f"live provider test: spends money; needs {key_env} to be set")


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as http:
        yield http


def _check(connector: Connector) -> Completion:
    print(f"\nlive call (spends money): {connector!r}")
    completion = connector.complete(REQUEST)
    print(f"  finish={completion.finish_reason} usage={dict(completion.usage)}")
    assert completion.text.strip()
    assert "colours" in completion.text
    assert completion.finish_reason in {FinishReason.STOP, FinishReason.LENGTH}
    assert completion.stream_error is None
    return completion


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openrouter(client: httpx.Client, stream: bool) -> None:
    _require("OPENROUTER_API_KEY")
    _check(
        OpenAICompatibleConnector(
            client,
            settings=OpenAICompatibleSettings(
                base_url="https://openrouter.ai/api/v1",
                model=os.environ.get("SALVAGELANE_LIVE_OPENROUTER_MODEL", "openai/gpt-4.1-mini"),
                api_key_env="OPENROUTER_API_KEY",
                stream=stream,
                http=LIVE_LIMITS,
            ),
        )
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_anthropic(client: httpx.Client, stream: bool) -> None:
    _require("ANTHROPIC_API_KEY")
    completion = _check(
        AnthropicConnector(
            client,
            settings=AnthropicSettings(
                model=os.environ.get("SALVAGELANE_LIVE_ANTHROPIC_MODEL", "claude-haiku-4-5"),
                api_key_env="ANTHROPIC_API_KEY",
                stream=stream,
                http=LIVE_LIMITS,
            ),
        )
    )
    assert completion.usage["prompt_tokens"]
