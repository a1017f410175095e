"""Issue 29.1: a key with a control or non-ASCII character leaked whole.

`TEST_API_KEY=$'sk-secret-MID\\nNEWLINE-123'`: httpx refused the header and quoted it
as a bytes repr (`b'Bearer sk-secret-MID\\nNEWLINE-123'`), which the scrub (looking for
the raw key) missed, so the key reached `runs.error`, the logs and `run`'s output; the
local error was retried five times, and a non-ASCII key crashed the run.

Now such a key is refused when it is read, naming the variable and never the value; the
scrub also knows the escaped forms a repr or a JSON encoder writes; and a request the
client cannot write is not retried. Against a real local provider.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from salvagelane import environment
from salvagelane.connectors import OpenAICompatibleConnector, OpenAICompatibleSettings
from salvagelane.errors import ConnectorError, ProviderError, SinkError
from salvagelane.logs import REDACTED, clear_secrets, register_secret, scrub_text
from salvagelane.sinks.webhook import WebhookSink
from tests.support.provider import (
    REQUEST,
    FakeClock,
    ScriptedServer,
    connector_args,
    connector_options,
)

VARIABLE = "SALVAGELANE_TEST_UNPRINTABLE_KEY"
KEYS = {
    "newline": "sk-secret-MID\nNEWLINE-123",
    "tab": "sk-secret-MID\tTAB-123",
    "escape": "sk-secret-MID\x1b[2JESC-123",
    "c1": "sk-secret-MID\x85NEL-123",
    "non-ascii": "sk-secret-MID-ключ-123",
    "nbsp": "sk-secret-MID\u00a0NBSP-123",
}


@pytest.fixture(autouse=True)
def _fresh_secrets() -> Iterator[None]:
    clear_secrets()
    yield
    clear_secrets()


@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS.keys())
def test_such_a_key_is_refused_when_read_naming_the_variable(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VARIABLE, key)
    with pytest.raises(ConnectorError) as caught:
        environment.api_key(VARIABLE)
    message = str(caught.value)
    assert VARIABLE in message
    assert "printable ASCII" in message
    assert "secret" not in message
    assert "MID" not in message


def test_a_printable_key_is_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "  sk-Plain_key.123~!  ")
    assert environment.api_key(VARIABLE) == "sk-Plain_key.123~!"


@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS.keys())
def test_the_escaped_forms_of_a_secret_are_scrubbed(key: str) -> None:
    register_secret(key)
    header = f"Bearer {key}"
    echoes = {
        "bytes repr": f"Illegal header value {header.encode('utf-8')!r}",
        "str repr": f"got {header!r}",
        "json": json.dumps({"authorization": header}),
        "json ascii": json.dumps({"authorization": header}, ensure_ascii=True),
        "raw": header,
    }
    for form, text in echoes.items():
        scrubbed = scrub_text(text)
        assert REDACTED in scrubbed, form
        assert "MID" not in scrubbed, (form, scrubbed)


@pytest.mark.parametrize("key", [KEYS["newline"], KEYS["non-ascii"]], ids=["newline", "non-ascii"])
def test_a_request_the_client_cannot_write_fails_once_without_the_key(key: str) -> None:
    # The variable check is bypassed (a key_lookup hands the key over): the connector
    # itself must still neither retry nor quote it.
    clock = FakeClock()
    with ScriptedServer() as server, httpx.Client() as client:
        options: dict[str, Any] = connector_options(
            server, clock, model="m", structured_output=False, key_lookup=lambda name: key
        )
        connector = OpenAICompatibleConnector(
            client, **connector_args(OpenAICompatibleSettings, options)
        )
        with pytest.raises(ProviderError) as caught:
            connector.complete(REQUEST)
        assert server.requests == []  # nothing was sent
    error = caught.value
    assert error.retryable is False
    assert clock.sleeps == []  # and nothing was retried
    text = f"{error} {error!r} {error.args} {error.__cause__!r}"
    assert "MID" not in text
    assert "not printable ASCII" in str(error)


@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS.keys())
def test_a_webhook_token_is_refused_when_read_and_nothing_is_sent(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same key through a webhook's token_env: it reached sink_deliveries.error.
    monkeypatch.setenv(VARIABLE, key)
    with ScriptedServer() as server, httpx.Client() as client:
        sink = WebhookSink(client, url=f"{server.origin}/hook", token_env=VARIABLE)
        with pytest.raises(SinkError) as caught:
            sink.deliver({"run_id": "r", "items": []})
    message = str(caught.value)
    assert VARIABLE in message
    assert "MID" not in message
    assert not caught.value.retryable
    assert server.requests == []
