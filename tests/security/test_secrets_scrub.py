"""A provider (or webhook) that echoes the key back in an error does not get it into a
log line, an error message or the database, whatever encoding it echoes it in:
URL-encoded, base64 (standard or URL-safe, padded or not, alone or inside a longer
encoded text at any alignment), upper-cased, or as JSON ``\\u`` escapes, in full or
in part.

Real processes against a real local provider, on SQLite and PostgreSQL; the encodings
one by one against the scrub itself.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from _secrets_support import (
    Project,
    Scripted,
    ScriptedServer,
    _private_state_home,
    assert_nowhere,
    chat_answer,
    database_url,
    leaks,
    postgres_database,
    provider,
    report_text,
    salvagelane,
    upgraded,
)

from salvagelane import logs
from salvagelane.logs import REDACTED, clear_secrets, register_secret

__all__ = ["_private_state_home", "database_url", "postgres_database", "provider"]

KEY_ENV = "SALVAGELANE_TEST_API_KEY"
# Characters that URL encoding and base64 both change, so every encoding differs.
KEY = "sk-Echo/7f3e+9d1c=a5b2:never~stored"


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(char):04x}" for char in text)


def _b64(text: str, *, urlsafe: bool = False, pad: bool = True) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    encoded = encode(text.encode()).decode()
    return encoded if pad else encoded.rstrip("=")


ENCODINGS = {
    "url-encoded": quote(KEY, safe=""),
    "url-encoded, / kept": quote(KEY),
    "form-encoded": quote_plus(KEY),
    "url-encoded, lower-case hex": quote(KEY, safe="").lower(),
    "base64": _b64(KEY),
    "base64 url-safe, no padding": _b64(KEY, urlsafe=True, pad=False),
    "base64 at offset 1": _b64("Bearer " + KEY),  # 7 bytes before it: 7 % 3 == 1
    "base64 at offset 2": _b64("user:" + KEY),  # Basic auth: 5 % 3 == 2
    "base64 at offset 0, text around": _b64("id=" + KEY + "&x=1"),  # 3 % 3 == 0
    "upper-case": KEY.upper(),
    "mixed case": KEY.swapcase(),
    "\\u escapes": _escaped(KEY),
    "\\u escapes, upper-case hex": _escaped(KEY).upper().replace("\\U", "\\u"),
    "\\u escapes in part": KEY[:5] + _escaped(KEY[5:12]) + KEY[12:],
}


@pytest.fixture
def registered() -> object:
    clear_secrets()
    register_secret(KEY)
    yield None
    clear_secrets()


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_the_scrub_catches_each_encoding(registered: object, encoding: str) -> None:
    echoed = ENCODINGS[encoding]
    assert leaks(echoed, KEY), "the test's own detector must see the leak"

    scrubbed = logs.scrub_text(f"provider said: invalid key {echoed}, try again")

    assert REDACTED in scrubbed
    assert leaks(scrubbed, KEY) == []
    assert scrubbed.startswith("provider said: invalid key ")
    assert scrubbed.endswith(", try again")


def test_the_scrub_leaves_text_without_the_key_alone(registered: object) -> None:
    text = "sk-Echo is a prefix, 7f3e+9d1c a fragment, c2stRWNobw== the base64 of sk-Echo"
    assert logs.scrub_text(text) == text


def test_echoed_keys_reach_no_log_error_or_column(
    tmp_path: Path, provider: ScriptedServer, database_url: str
) -> None:
    # Each attempt's error echoes up to three encodings; an error inside a 200 answer is
    # retried by the run, up to 5 attempts, so all of them are stored and logged.
    echoes = list(ENCODINGS.values())
    groups = [echoes[i : i + 3] for i in range(0, len(echoes), 3)]
    assert len(groups) == 5
    for group in groups:
        message = "invalid key " + " or ".join(group)
        provider.script.append(
            Scripted(status=200, body={"error": {"code": "400", "message": message}})
        )
    project = Project.create(tmp_path)
    port = provider.server_address[1]
    project.edit(
        {
            "base_url: https://openrouter.ai/api/v1": f"base_url: http://127.0.0.1:{port}/v1",
            "api_key_env: OPENROUTER_API_KEY": f"api_key_env: {KEY_ENV}",
            "attempts: 2\n  on: [nothing_salvaged, truncated]": (
                "attempts: 5\n  on: [nothing_salvaged, truncated, provider_error]"
            ),
        }
    )
    database = upgraded(database_url)

    run = project.run(database, {KEY_ENV: KEY}, "--json")
    run_id = json.loads(run.stdout)["run_id"]
    shown = salvagelane("runs", "show", run_id, database=database)

    assert run.returncode == 1, run.stderr
    assert len(provider.requests) == 5
    outcome = json.loads(run.stdout)
    assert (outcome["status"], outcome["attempts"]) == ("failed", 5)
    assert outcome["error"].startswith("http://127.0.0.1")
    assert f"invalid key {REDACTED} or {REDACTED}" in outcome["error"]
    assert run.stderr.count('"event": "attempt.provider_error"') == 5
    assert_nowhere(
        KEY,
        database=database,
        outputs={"run": run.stdout, "log": run.stderr, "show": shown.stdout + shown.stderr},
    )


def test_a_webhook_echoing_its_token_stores_no_trace_of_it(
    tmp_path: Path, provider: ScriptedServer, database_url: str
) -> None:
    token_env = "SALVAGELANE_TEST_HOOK_TOKEN"
    echo = f"token {_b64('Bearer ' + KEY)} / {quote_plus(KEY)} / {KEY.upper()} refused"
    provider.script.extend(
        [chat_answer(report_text()), Scripted(status=403, body={"error": {"message": echo}})]
    )
    project = Project.create(tmp_path)
    port = provider.server_address[1]
    project.edit(
        {
            "base_url: https://openrouter.ai/api/v1": f"base_url: http://127.0.0.1:{port}/v1",
            "api_key_env: OPENROUTER_API_KEY": "api_key_env: SALVAGELANE_TEST_OTHER_KEY",
        },
        append=(
            f"\nsinks:\n  - kind: webhook\n    url: http://127.0.0.1:{port}/hook\n"
            f"    token_env: {token_env}\n"
        ),
    )
    database = upgraded(database_url)

    run = project.run(
        database, {"SALVAGELANE_TEST_OTHER_KEY": "sk-other-4471aa90", token_env: KEY}, "--json"
    )

    assert run.returncode == 0, run.stderr  # the report is stored; the sink failed
    error = json.loads(run.stdout)["deliveries"][0]["error"]
    # Base64 of "Bearer <token>": the group mixing "Bearer " with the token's first 2
    # bytes ("sk") is left, the rest of the token's encoding is redacted.
    assert error.endswith(
        f"HTTP 403: token QmVhcmVyIHNr{REDACTED} / {REDACTED} / {REDACTED} refused"
    )
    assert_nowhere(KEY, database=database, outputs={"run": run.stdout, "log": run.stderr})
