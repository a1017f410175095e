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
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from salvagelane import logs
from salvagelane.logs import REDACTED, clear_secrets, register_secret
from tests.support.secrets_setup import (
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
def registered() -> Iterator[None]:
    clear_secrets()
    register_secret(KEY)
    yield None
    clear_secrets()


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_the_scrub_catches_each_encoding(registered: None, encoding: str) -> None:
    echoed = ENCODINGS[encoding]
    assert leaks(echoed, KEY), "the test's own detector must see the leak"

    scrubbed = logs.scrub_text(f"provider said: invalid key {echoed}, try again")

    assert REDACTED in scrubbed
    assert leaks(scrubbed, KEY) == []
    assert scrubbed.startswith("provider said: invalid key ")
    assert scrubbed.endswith(", try again")


def test_the_scrub_leaves_text_without_the_key_alone(registered: None) -> None:
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
            "attempts: 2\n  on: [nothing_salvaged]": (
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

    # The report is stored; the sink failed, so the run exits 1 (issue 29.12).
    assert run.returncode == 1, run.stderr
    error = json.loads(run.stdout)["deliveries"][0]["error"]
    # Base64 of "Bearer <token>": the group mixing "Bearer " with the token's first 2
    # bytes ("sk") is left, the rest of the token's encoding is redacted.
    assert error.endswith(
        f"HTTP 403: token QmVhcmVyIHNr{REDACTED} / {REDACTED} / {REDACTED} refused"
    )
    assert_nowhere(KEY, database=database, outputs={"run": run.stdout, "log": run.stderr})


# --- the scrub's parts ---------------------------------------------------------------------------

_SECRETS = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=8, max_size=40
)
_AROUND = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=0, max_size=12
)
_ENCODERS = {
    "plain": lambda text: text,
    "upper": str.upper,
    "url": lambda text: quote(text, safe=""),
    "form": quote_plus,
    "escapes": _escaped,
    "base64": lambda text: _b64(text),
    "base64 url-safe": lambda text: _b64(text, urlsafe=True, pad=False),
}


@settings(max_examples=150, deadline=None)
@given(secret=_SECRETS, before=_AROUND, after=_AROUND, encoder=st.sampled_from(list(_ENCODERS)))
def test_no_encoding_of_a_secret_survives_the_scrub_whatever_surrounds_it(
    secret: str, before: str, after: str, encoder: str
) -> None:
    # The secret is encoded together with the text around it, as in a Basic or Bearer
    # header: base64 then depends on where the secret starts.
    echoed = _ENCODERS[encoder](before + secret + after)
    pattern = logs.secret_pattern([secret])
    assert pattern is not None

    scrubbed, count = pattern.subn(f"<{echoed}>")

    assert count >= 1
    assert leaks(scrubbed, secret) == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pw@llm.example/v1?token=t#frag", "https://[REDACTED]@llm.example/v1?[REDACTED]#[REDACTED]"),
        ("http://tok@127.0.0.1:8080/hook", "http://[REDACTED]@127.0.0.1:8080/hook"),
        ("https://[::1]:9/v1?a=b", "https://[::1]:9/v1?[REDACTED]"),
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("llm.example/v1", "llm.example/v1"),
        ("llm.example/v1?key=k", "[REDACTED]"),
        ("http://host:notaport/x", "[REDACTED]"),
    ],
)  # fmt: skip
def test_redact_url_keeps_host_and_path_only(url: str, shown: str) -> None:
    assert logs.redact_url(url) == shown


def test_a_url_from_the_environment_loses_its_path_too() -> None:
    shown = logs.redact_url("https://hooks.example/services/T0/B0/abcdef", keep_path=False)
    assert shown == "https://hooks.example/[REDACTED]"


def test_the_secrets_a_url_carries() -> None:
    inline = "https://bot:s3cret-pass@llm.example/v1?api-version=2024-06-01&sig=abcdef123456"
    assert logs.url_secrets(inline) == ["bot:s3cret-pass", "s3cret-pass", "abcdef123456"]
    assert logs.url_secrets("https://ghp_0123456789abcdef@git.example/x") == [
        "ghp_0123456789abcdef",
        "ghp_0123456789abcdef",
    ]
    whole = "https://hooks.example/services/T0/B0/0123456789abcdefXYZ"
    assert logs.url_secrets(whole, whole=True) == [whole, "0123456789abcdefXYZ"]


def test_a_text_that_lower_casing_lengthens_is_still_scrubbed_in_place(registered: None) -> None:
    # "İ".lower() is two characters: positions in the lower-cased text would be off.
    text = f"İİİ {KEY.upper()} İ"
    assert logs.scrub_text(text) == f"İİİ {REDACTED} İ"


def test_a_character_outside_the_bmp_is_matched_as_its_json_surrogate_pair() -> None:
    secret = "key-\U0001f511-0123456789"
    pattern = logs.secret_pattern([secret])
    assert pattern is not None
    echoed = json.dumps(secret)  # ensure_ascii: the emoji as \ud83d\udd11
    assert "\\ud83d\\udd11" in echoed
    assert pattern.subn(echoed) == (f'"{REDACTED}"', 1)
