"""A provider that echoes the key inside the completion (a model told its own prompt
headers, a proxy that reflects the request) does not get it stored: the key is
redacted from the output before the attempt is written, so the raw output, the report,
its items, the quarantine and a fixture captured from the run never hold it, and the
attempt records how many redactions were made (the one exception to "raw output is
stored byte for byte", ADR 0005).

Real processes against a real local provider, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from tests.support.secrets_setup import (
    Project,
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
    stored_texts,
    upgraded,
)

__all__ = ["_private_state_home", "database_url", "postgres_database", "provider"]

KEY_ENV = "SALVAGELANE_TEST_API_KEY"
KEY = "sk-Output-2c9e71b04f5a83d6"


def test_a_key_in_the_model_output_is_redacted_before_storage_and_recorded(
    tmp_path: Path, provider: ScriptedServer, database_url: str
) -> None:
    encoded = base64.b64encode(f"Bearer {KEY}".encode()).decode()
    text = report_text(
        f"Your key {KEY} was in the prompt headers.",
        broken=f'{{"rank": 3, "candidate": "ci-flaky-tests", "why": "{KEY.upper()} {encoded}"',
    )
    assert leaks(text, KEY)
    provider.script.append(chat_answer(text))
    project = Project.create(tmp_path)
    port = provider.server_address[1]
    project.edit(
        {
            "base_url: https://openrouter.ai/api/v1": f"base_url: http://127.0.0.1:{port}/v1",
            "api_key_env: OPENROUTER_API_KEY": f"api_key_env: {KEY_ENV}",
            "attempts: 2": "attempts: 1",
        }
    )
    database = upgraded(database_url)
    env = {KEY_ENV: KEY}

    run = project.run(database, env, "--json")
    outcome = json.loads(run.stdout)
    run_id = outcome["run_id"]
    shown = salvagelane("runs", "show", run_id, database=database)
    raw = salvagelane("runs", "show", run_id, "--raw", "1", database=database)
    quarantine = salvagelane("quarantine", "list", database=database)
    captured = salvagelane(
        "fixture", "capture", run_id, "--to", str(tmp_path / "fixture"), database=database,
        env=env,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    # Redaction keeps the JSON intact: both good items are kept, the broken one quarantined.
    assert (outcome["status"], outcome["kept"], outcome["quarantined"]) == ("partial", 2, 1)
    # "Bearer " is 7 bytes: the key's base64 starts 2 bytes in, at character 12.
    redacted = text.replace(KEY, "[REDACTED]").replace(KEY.upper(), "[REDACTED]")
    assert raw.stdout == redacted.replace(encoded[12:], "[REDACTED]")
    assert "Your key [REDACTED] was in the prompt headers." in raw.stdout
    stored = stored_texts(database)
    request = json.loads(stored[("attempts", "request")])
    assert request["redactions"] == [{"kind": "secret", "count": 3}]
    assert "Your key [REDACTED] was in the prompt headers." in stored[("report_items", "data")]
    assert "[REDACTED]" in stored[("quarantined_items", "snippet")]
    # The captured fixture is what was stored: nothing to refuse, nothing to leak.
    assert captured.returncode == 0, captured.stderr
    fixture_raw = (tmp_path / "fixture" / "raw.txt").read_text(encoding="utf-8")
    assert fixture_raw == raw.stdout
    files = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "fixture").iterdir()}
    assert_nowhere(
        KEY,
        database=database,
        outputs={
            "run": run.stdout + run.stderr,
            "show": shown.stdout + shown.stderr,
            "quarantine": quarantine.stdout + quarantine.stderr,
            **files,
        },
    )
