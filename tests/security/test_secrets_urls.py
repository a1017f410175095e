"""Credentials in URLs: a provider's ``base_url`` or a webhook's ``url`` may carry a user
and password or a token in its query string. They are used for the request and shown
nowhere else: every logged, printed and stored URL keeps its host and path and loses
its userinfo and query. A URL may instead come from the environment
(``connector.base_url_env``, a webhook's ``url_env``); such a URL is a secret as a whole
and is shown by its variable's name.

Real processes (``salvagelane run``, ``runs show``, ``runs list``, ``check``) against a
real local provider and webhook, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

from salvagelane.definitions import load_instruction
from salvagelane.errors import DefinitionError
from tests.support.secrets_setup import (
    Project,
    Scripted,
    ScriptedServer,
    _private_state_home,
    assert_nowhere,
    chat_answer,
    database_url,
    postgres_database,
    provider,
    report_text,
    salvagelane,
    stored_texts,
    upgraded,
)

__all__ = ["_private_state_home", "database_url", "postgres_database", "provider"]

KEY_ENV = "SALVAGELANE_TEST_API_KEY"
KEY = "sk-urls-3f9a61c0e2d4b7-key"
URL_PASSWORD = "urlpw-7c1e9a55d3b8"
URL_TOKEN = "qtoken-b61f0e2a9c44"
HOOK_PASSWORD = "hookpw-4a8d2c7e1f06"
HOOK_SIG = "hooksig-93e5b0d7a2c1"
BASE_ENV = "SALVAGELANE_TEST_BASE_URL"
HOOK_ENV = "SALVAGELANE_TEST_HOOK_URL"
ENV_PATH_SECRET = "T0A1B2C3/B4D5E6F7/envhookpath9d8c7b6a5f4e"
ENV_QUERY_TOKEN = "envtoken-5e8a3c1d7b90"

CONNECTOR = "base_url: https://openrouter.ai/api/v1"
KEY_NAME = "api_key_env: OPENROUTER_API_KEY"


def _outputs(*procs: object) -> dict[str, str]:
    texts = {}
    for index, proc in enumerate(procs):
        texts[f"stdout {index}"] = proc.stdout  # type: ignore[attr-defined]
        texts[f"stderr {index}"] = proc.stderr  # type: ignore[attr-defined]
    return texts


def test_credentials_in_urls_reach_the_server_and_nothing_else(
    tmp_path: Path, provider: ScriptedServer, database_url: str
) -> None:
    port = provider.server_address[1]
    base_url = f"http://alice:{URL_PASSWORD}@127.0.0.1:{port}/v1?token={URL_TOKEN}"
    hook_url = f"http://hook:{HOOK_PASSWORD}@127.0.0.1:{port}/hook?sig={HOOK_SIG}"
    project = Project.create(tmp_path)
    project.edit(
        {CONNECTOR: f"base_url: {base_url}", KEY_NAME: f"api_key_env: {KEY_ENV}"},
        append=f"\nsinks:\n  - kind: webhook\n    url: {hook_url}\n    timeout_seconds: 5\n",
    )
    provider.script.extend(
        [
            chat_answer(report_text()),
            Scripted(status=400, body={"error": {"message": "signature rejected"}}),
        ]
    )
    database = upgraded(database_url)

    run = project.run(database, {KEY_ENV: KEY}, "--json")
    shown = salvagelane("runs", "show", json.loads(run.stdout)["run_id"], database=database)
    listed = salvagelane("runs", "list", database=database)

    # The run is stored; the sink failed, so the run exits 1 (issue 29.12) and says how to
    # deliver it again.
    assert run.returncode == 1, run.stderr
    # The credentials were used: the query strings reached the server, the endpoint path
    # was put before the query string.
    assert [request.path for request in provider.requests] == [
        f"/v1/chat/completions?token={URL_TOKEN}",
        f"/hook?sig={HOOK_SIG}",
    ]
    outcome = json.loads(run.stdout)
    assert outcome["status"] == "ok"
    # The run kept its definition, its URLs' credentials taken out (checked below).
    assert outcome["definition_version"] is not None
    shown_hook = f"http://[REDACTED]@127.0.0.1:{port}/hook?[REDACTED]"
    assert outcome["deliveries"][0]["target"] == shown_hook
    assert shown_hook in shown.stdout
    stored = stored_texts(database)
    assert stored[("sink_deliveries", "target")] == shown_hook
    request = json.loads(stored[("attempts", "request")])
    assert request["base_url"] == f"http://[REDACTED]@127.0.0.1:{port}/v1?[REDACTED]"
    for secret in (URL_PASSWORD, URL_TOKEN, HOOK_PASSWORD, HOOK_SIG):
        assert_nowhere(secret, database=database, outputs=_outputs(run, shown, listed))


def test_check_prints_a_rejected_url_without_its_credentials(tmp_path: Path) -> None:
    project = Project.create(tmp_path)
    project.edit(
        {CONNECTOR: f"base_url: ftp://alice:{URL_PASSWORD}@llm.example/v1?token={URL_TOKEN}"},
        append=(
            "\nsinks:\n  - kind: webhook\n"
            f"    url: ftp://hook:{HOOK_PASSWORD}@hooks.example/in?sig={HOOK_SIG}\n"
        ),
    )

    checked = salvagelane("check", str(project.instructions))

    assert checked.returncode == 1
    assert (
        'connector.base_url: expected an http:// or https:// URL, got "ftp://[REDACTED]@'
        'llm.example/v1?[REDACTED]"'
    ) in checked.stdout
    assert 'got "ftp://[REDACTED]@hooks.example/in?[REDACTED]"' in checked.stdout
    for secret in (URL_PASSWORD, URL_TOKEN, HOOK_PASSWORD, HOOK_SIG):
        assert secret not in checked.stdout + checked.stderr


def test_a_secret_given_where_a_variable_name_belongs_is_not_quoted(tmp_path: Path) -> None:
    project = Project.create(tmp_path)
    project.edit(
        {CONNECTOR: f"base_url_env: https://bot:{URL_PASSWORD}@llm.example/v1"},
        append=(
            "\nsinks:\n  - kind: webhook\n"
            f"    url_env: https://hooks.example/in?sig={HOOK_SIG}\n"
            f"    token_env: {HOOK_PASSWORD}\n"
        ),
    )

    checked = salvagelane("check", str(project.instructions))

    assert checked.returncode == 1
    not_shown = "got a value that is not a variable name (not shown: it may be a secret)"
    for field in ("connector.base_url_env", "sinks[0].url_env", "sinks[0].token_env"):
        assert f"{field}: expected the NAME of an environment variable" in checked.stdout
    assert checked.stdout.count(not_shown) == 3
    for secret in (URL_PASSWORD, HOOK_SIG, HOOK_PASSWORD):
        assert secret not in checked.stdout + checked.stderr


def test_urls_from_the_environment_are_used_and_shown_by_name(
    tmp_path: Path, provider: ScriptedServer, database_url: str
) -> None:
    port = provider.server_address[1]
    base_url = f"http://127.0.0.1:{port}/v1?token={ENV_QUERY_TOKEN}"
    hook_url = f"http://127.0.0.1:{port}/services/{ENV_PATH_SECRET}"
    project = Project.create(tmp_path)
    project.edit(
        {CONNECTOR: f"base_url_env: {BASE_ENV}", KEY_NAME: f"api_key_env: {KEY_ENV}"},
        append=f"\nsinks:\n  - kind: webhook\n    url_env: {HOOK_ENV}\n    timeout_seconds: 5\n",
    )
    provider.script.extend(
        [
            chat_answer(report_text()),
            Scripted(status=502, body={"error": {"message": f"no route to {hook_url}"}}),
            Scripted(status=400, body={"error": {"message": f"bad hook {hook_url}"}}),
        ]
    )
    database = upgraded(database_url)
    env = {KEY_ENV: KEY, BASE_ENV: base_url, HOOK_ENV: hook_url}

    run = project.run(database, env, "--json")
    shown = salvagelane("runs", "show", json.loads(run.stdout)["run_id"], database=database)

    # The report is stored; the sink failed, so the run exits 1 (issue 29.12).
    assert run.returncode == 1, run.stderr
    assert [request.path for request in provider.requests] == [
        f"/v1/chat/completions?token={ENV_QUERY_TOKEN}",
        f"/services/{ENV_PATH_SECRET}",
        f"/services/{ENV_PATH_SECRET}",
    ]
    outcome = json.loads(run.stdout)
    assert outcome["status"] == "ok"
    # The run kept its definition, its URLs' credentials taken out (checked below).
    assert outcome["definition_version"] is not None
    delivery = outcome["deliveries"][0]
    assert delivery["target"] == f"${HOOK_ENV}"
    assert delivery["error"].startswith(f"webhook delivery failed: ${HOOK_ENV}: HTTP 400")
    assert "bad hook [REDACTED]" in delivery["error"]
    stored = stored_texts(database)
    assert stored[("sink_deliveries", "target")] == f"${HOOK_ENV}"
    request = json.loads(stored[("attempts", "request")])
    assert (request["base_url"], request["base_url_env"]) == (None, BASE_ENV)
    outputs = _outputs(run, shown)
    for secret in (base_url, hook_url, ENV_PATH_SECRET, ENV_QUERY_TOKEN):
        assert_nowhere(secret, database=database, outputs=outputs)


def test_a_missing_url_variable_fails_the_attempt_and_names_the_variable(
    tmp_path: Path, provider: ScriptedServer, database_url: str
) -> None:
    project = Project.create(tmp_path)
    project.edit({CONNECTOR: f"base_url_env: {BASE_ENV}", KEY_NAME: f"api_key_env: {KEY_ENV}"})
    database = upgraded(database_url)

    run = project.run(database, {KEY_ENV: KEY}, "--json")

    assert run.returncode == 1
    outcome = json.loads(run.stdout)
    assert outcome["status"] == "failed"
    assert outcome["error"] == (
        f"environment variable {BASE_ENV} is not set: it must hold the connector's base URL"
    )
    assert provider.requests == []


def test_a_url_and_its_variable_are_exclusive(tmp_path: Path) -> None:
    both = Project.create(tmp_path / "both")
    both.edit(
        {CONNECTOR: f"{CONNECTOR}\n  base_url_env: {BASE_ENV}"},
        append=(
            "\nsinks:\n  - kind: webhook\n    url: https://hooks.example/in\n"
            f"    url_env: {HOOK_ENV}\n"
        ),
    )
    neither = Project.create(tmp_path / "neither")
    neither.edit({"  " + CONNECTOR + "\n": ""}, append="\nsinks:\n  - kind: webhook\n")
    misplaced = Project.create(tmp_path / "misplaced")
    misplaced.edit(
        {}, append=f"\nsinks:\n  - kind: json_file\n    path: out.json\n    url_env: {HOOK_ENV}\n"
    )

    messages = {}
    for name, project in (("both", both), ("neither", neither), ("misplaced", misplaced)):
        try:
            load_instruction(project.definition)
        except DefinitionError as exc:
            messages[name] = str(exc)

    assert (
        'connector: expected exactly one of "base_url", "base_url_env", got "base_url" and '
        in (messages["both"])
    )
    assert (
        'sinks[0]: expected exactly one of "url", "url_env", got "url" and "url_env"'
        in (messages["both"])
    )
    assert (
        'connector: expected exactly one of "base_url", "base_url_env", got none of them'
        in (messages["neither"])
    )
    assert (
        'sinks[0]: expected exactly one of "url", "url_env", got none of them'
        in (messages["neither"])
    )
    assert "sinks[0].url_env: expected no such field (only a webhook sink" in messages["misplaced"]
