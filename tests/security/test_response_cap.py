"""The HTTP response cap follows the definition's ``guardrails.max_output_bytes``, and a
response over it is stored bounded, never dropped.

Before, a fixed 4 MiB cap on the response body overrode a larger ``max_output_bytes``,
and a non-streamed answer over it stored nothing at all (the attempt was a provider
error). Now a non-streamed body may be ``6 * max_output_bytes`` plus 1 MiB of envelope
(JSON escapes make the text at most 6 times longer), at most 64 MiB; past it the text
that arrived is kept, stored clipped to ``max_output_bytes`` with its length and
SHA-256, and the attempt says why. A stream is read until its text passes
``max_output_bytes``, however long its framing.

The real connector factory, executor and store against a real local provider, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane.connectors import build_connector
from salvagelane.definitions import Instruction, load_instruction
from salvagelane.runtime.executor import Executor
from salvagelane.store import AttemptView, Store, upgrade
from tests.support.secrets_setup import (
    SSE_HEADERS,
    Project,
    Scripted,
    ScriptedServer,
    _private_state_home,
    database_url,
    postgres_database,
    provider,
    report_text,
    sse_event,
)

__all__ = ["_private_state_home", "database_url", "postgres_database", "provider"]

MiB = 1024 * 1024
KEY_ENV = "SALVAGELANE_TEST_API_KEY"
KEY = "sk-cap-6e1d0c9b8a7f"


def definition(
    tmp_path: Path, port: int, *, kind: str, max_output_bytes: int, stream: bool
) -> Instruction:
    project = Project.create(tmp_path)
    return load_instruction(
        project.edit(
            {
                "kind: openai": f"kind: {kind}",
                "base_url: https://openrouter.ai/api/v1": f"base_url: http://127.0.0.1:{port}/v1",
                "api_key_env: OPENROUTER_API_KEY": f"api_key_env: {KEY_ENV}",
                "max_output_bytes: 262144": f"max_output_bytes: {max_output_bytes}",
                "structured_output: false": (
                    f"structured_output: false\n  stream: {str(stream).lower()}"
                ),
                "attempts: 2": "attempts: 1",
            }
        )
    )


def padded_report(size: int) -> str:
    """A valid report of ``size`` bytes: two items, then whitespace."""
    text = report_text()
    filler = size - len(text.encode())
    assert filler > 0
    padded = text[:-1] + " " * filler + text[-1:]
    assert len(padded.encode()) == size
    return padded


def flood(size: int) -> str:
    """``size`` bytes of a report whose summary never ends, with characters JSON escapes."""
    head = '{"summary": "'
    unit = 'quote " backslash \\ tab \t é ✓ '
    body = unit * ((size - len(head)) // len(unit.encode()) + 1)
    text = (head + body).encode()[:size].decode("utf-8", "ignore")
    return text + "z" * (size - len(text.encode()))


def answer(kind: str, text: str) -> Scripted:
    body: dict[str, Any]
    if kind == "openai":
        body = {
            "id": "gen-1",
            "model": "test/model",
            "choices": [
                {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20},
        }
    else:
        body = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "test/model",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 20},
        }
    return Scripted(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


def streamed(text: str, piece: int = 64 * 1024) -> Scripted:
    """An OpenAI-compatible event stream delivering ``text`` in ``piece``-character deltas."""
    chunks = [
        sse_event(
            {
                "id": "gen-1",
                "model": "test/model",
                "choices": [{"index": 0, "delta": {"content": text[i : i + piece]}}],
            }
        )
        for i in range(0, len(text), piece)
    ]
    chunks.append(
        sse_event({"id": "gen-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    )
    chunks.append(sse_event("[DONE]"))
    return Scripted(chunks=chunks, headers=SSE_HEADERS)


def run_once(instruction: Instruction, database_url: str) -> tuple[Any, AttemptView]:
    upgrade(database_url)
    with Store.open(database_url) as store, httpx.Client() as client:
        executor = Executor(
            store,
            connector_for=lambda spec: build_connector(spec.connector, client=client),
        )
        outcome = executor.run(instruction)
        (attempt,) = store.get_run(outcome.run_id).attempts
    return outcome, attempt


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_an_answer_over_the_old_4_mib_cap_within_max_output_bytes_is_stored_in_full(
    tmp_path: Path, provider: ScriptedServer, database_url: str, stream: bool
) -> None:
    text = padded_report(6 * MiB)
    provider.script.append(streamed(text) if stream else answer("openai", text))
    instruction = definition(
        tmp_path, provider.server_address[1], kind="openai", max_output_bytes=8 * MiB, stream=stream
    )

    outcome, attempt = run_once(instruction, database_url)

    assert (attempt.provider_error, attempt.stream_error) == (None, None)
    assert attempt.raw_output == text
    assert (attempt.raw_length, attempt.stored_length, attempt.clipped) == (6 * MiB, 6 * MiB, False)
    assert attempt.raw_sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert (outcome.status, outcome.kept) == ("ok", 2)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_body_over_the_cap_is_stored_bounded_and_marked_never_dropped(
    tmp_path: Path, provider: ScriptedServer, database_url: str, kind: str
) -> None:
    cap = 1 * MiB
    text = flood(12 * MiB)
    provider.script.append(answer(kind, text))
    instruction = definition(
        tmp_path, provider.server_address[1], kind=kind, max_output_bytes=cap, stream=False
    )

    outcome, attempt = run_once(instruction, database_url)

    # The body cap is 6 * 1 MiB + 1 MiB: reading stopped there, and what arrived is kept.
    assert attempt.provider_error is None
    assert attempt.stream_error is not None
    assert "response body exceeds 7340032 bytes" in attempt.stream_error
    assert "stopped reading" in attempt.stream_error
    full = text.encode()
    assert attempt.clipped
    assert attempt.stored_length == cap
    assert attempt.raw_output is not None
    assert attempt.raw_output.encode("utf-8", "surrogateescape") == full[:cap]
    # Length and hash describe the text as received: the beginning of the answer.
    assert attempt.raw_length is not None
    assert cap < attempt.raw_length < 7 * MiB
    assert attempt.raw_sha256 == hashlib.sha256(full[: attempt.raw_length]).hexdigest()
    assert attempt.finish_reason == "error"
    assert outcome.status == "failed"
    assert outcome.quarantined == {"oversize": 1}


def test_a_stream_past_max_output_bytes_stops_and_is_stored_bounded(
    tmp_path: Path, provider: ScriptedServer, database_url: str
) -> None:
    cap = 1 * MiB
    text = flood(5 * MiB)
    provider.script.append(streamed(text))
    instruction = definition(
        tmp_path, provider.server_address[1], kind="openai", max_output_bytes=cap, stream=True
    )

    outcome, attempt = run_once(instruction, database_url)

    assert attempt.stream_error is not None
    assert f"passed max_output_bytes ({cap} bytes)" in attempt.stream_error
    assert attempt.clipped
    assert attempt.stored_length == cap
    assert attempt.raw_output is not None
    assert attempt.raw_output.encode("utf-8", "surrogateescape") == text.encode()[:cap]
    assert attempt.raw_length is not None
    # Reading stopped at the first delta past the cap, not at the end of the stream.
    assert cap < attempt.raw_length < 2 * MiB
    assert outcome.quarantined == {"oversize": 1}
