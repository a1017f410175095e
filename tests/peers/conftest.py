"""The peer tests' fixtures: the LiteLLM proxy that ``make test-peers`` started, and a
recording proxy in front of it that keeps the bytes LiteLLM sent."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.recording_proxy import RecordingProxy, recording_proxy

URL_ENV = "SALVAGELANE_TEST_LITELLM_URL"
KEY_ENV = "SALVAGELANE_TEST_LITELLM_KEY"
CONFIG = Path(__file__).resolve().parent / "litellm.yaml"


@pytest.fixture(scope="session")
def litellm_url() -> str:
    url = os.environ.get(URL_ENV)
    if not url:
        pytest.skip(f"peer tests run against a LiteLLM proxy: `make test-peers` sets {URL_ENV}")
    return url


@pytest.fixture(scope="session")
def mock_responses() -> dict[str, Any]:
    """Each model's ``mock_response`` in tests/peers/litellm.yaml, by model name."""
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    return {
        model["model_name"]: model["litellm_params"]["mock_response"]
        for model in config["model_list"]
        if "mock_response" in model["litellm_params"]
    }


@pytest.fixture
def wire(litellm_url: str) -> Iterator[RecordingProxy]:
    """A recording proxy in front of LiteLLM: point a connector at ``wire.base_url``."""
    with recording_proxy(litellm_url) as proxy:
        yield proxy


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as http:
        yield http
