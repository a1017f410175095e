"""``salvagelane check`` as a first reviewer: every problem at once, unset variables,
an items path the envelope schema does not define; and the defaults of a definition
that writes only the required fields."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane.connectors import build_connector
from salvagelane.core import AcceptRepairs, Framing, Guardrails
from salvagelane.definitions import (
    GuardrailSpec,
    OutputSpec,
    RetryPolicy,
    Schedule,
    SinkSpec,
    check_instruction,
    load_instruction,
)
from salvagelane.definitions.fields import defaults, field_default, schema_fields
from salvagelane.definitions.model import EmailSpec
from salvagelane.errors import ConnectorError, DefinitionError
from tests.support.cli import salvagelane_here as salvagelane
from tests.support.definitions import copy_project, edit
from tests.support.provider import (  # the fixtures are used by name
    KEY_ENV,
    REQUEST,
    SECRET,
    Scripted,
    ScriptedServer,
    client,
    provider_json,
    server,
)

__all__ = ["client", "server"]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
KEY = {"OPENROUTER_API_KEY": "sk-test-not-a-key"}

MINIMAL = """\
id: minimal
description: The fewest fields a definition can have.
schedule:
  cron: "0 6 * * *"
  timezone: UTC
connector:
  kind: openai
  base_url: {base_url}
  model: local-model
  max_output_tokens: 512
  timeout_seconds: 30
prompt:
  system: You triage engineering workstreams.
  user: Rank the workstreams that deserve attention today.
output:
  envelope_schema: ../schemas/daily-triage-report.schema.json
  item_schema: ../schemas/daily-triage-item.schema.json
  items_path: recommendations
retry:
  attempts: 1
  on: []
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(tmp_path)


def minimal(project: Path, base_url: str = "http://127.0.0.1:9/v1") -> Path:
    definition = project / "instructions" / "minimal.yaml"
    definition.write_text(MINIMAL.format(base_url=base_url), encoding="utf-8")
    return definition


# --- Every problem, and the variables a definition names -------------------------------------


def line_of(path: Path, text: str) -> int:
    """The 1-based number of the line of ``path`` that holds ``text``."""
    [number] = [
        n for n, held in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text in held
    ]
    return number


def test_check_lists_four_problems_and_the_unset_key_variable(project: Path) -> None:
    """The issue's acceptance check: two problems the schema finds, two only the
    cross-checks find, and an unset key variable: all five reported, one line each."""
    definition = project / "instructions" / "daily-triage.yaml"
    edit(definition, "kind: openai", "kind: gpt")  # schema
    edit(definition, "attempts: 2", "attempts: 0")  # schema
    edit(definition, "  timezone: UTC\n  misfire", "  timezone: Mars/Olympus\n  misfire")
    edit(definition, "rank_key: rank", "rank_key: rnak")

    proc = salvagelane("check", "instructions", cwd=project, env={"OPENROUTER_API_KEY": ""})

    assert proc.returncode == 1, proc.stderr
    source = "instructions/daily-triage.yaml"
    assert proc.stdout.splitlines() == [
        f"error  {source}: schedule.timezone: expected an IANA time zone name such as UTC or "
        'Europe/Berlin, got "Mars/Olympus" (line 13)',
        f'error  {source}: connector.kind: expected one of "openai", "anthropic", "replay", '
        'got "gpt" (line 18)',
        f"error  {source}: output.rank_key: expected a field of the item schema (rank, "
        'candidate, action, why, confidence, wsjf), got "rnak" (line 52)',
        f"error  {source}: retry.attempts: expected an integer from 1 to 5, got 0 "
        f"(line {line_of(definition, 'attempts: 0')})",
        f"warning  {source}: connector.api_key_env: environment variable OPENROUTER_API_KEY is "
        "empty here: a run cannot call the model until it is set (line 21)",
    ]


def test_loading_lists_more_problems_than_three(project: Path) -> None:
    definition = project / "instructions" / "daily-triage.yaml"
    edit(definition, "kind: openai", "kind: gpt")
    edit(definition, "attempts: 2", "attempts: 0")
    edit(definition, "max_depth: 8", "max_depth: 0")
    edit(definition, "rank_key: rank", "rank_key: rnak")
    edit(definition, "Today is {{ today }}.", "Today is {{ todya }}.")
    with pytest.raises(DefinitionError) as caught:
        load_instruction(definition)
    assert caught.value.paths == (
        "connector.kind",
        "prompt.user",
        "output.rank_key",
        "guardrails.max_depth",
        "retry.attempts",
    )
    assert len(caught.value.problems) == 5
    assert "and 2 more" not in str(caught.value)  # what it said when it stopped at three


def test_every_env_field_is_warned_about_by_name_only(project: Path) -> None:
    definition = project / "instructions" / "daily-triage.yaml"
    edit(
        definition,
        "  base_url: https://openrouter.ai/api/v1\n",
        "  base_url_env: TRIAGE_BASE_URL\n",
    )
    edit(
        definition,
        "\nretry:",
        "\nsinks:\n  - kind: webhook\n    url_env: TRIAGE_HOOK_URL\n"
        "    token_env: TRIAGE_HOOK_TOKEN\nretry:",
    )
    secret = "https://hooks.example.test/secret-path-0123456789"
    env = {"OPENROUTER_API_KEY": "sk-test-secret-value", "TRIAGE_HOOK_URL": secret}

    proc = salvagelane("check", "instructions", cwd=project, env=env)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("warning")]
    assert [line.split(": ")[1] for line in warnings] == [
        "connector.base_url_env",
        "sinks[0].token_env",
    ]
    assert "TRIAGE_BASE_URL is not set here: a run cannot call the model" in warnings[0]
    assert "TRIAGE_HOOK_TOKEN is not set here: this sink cannot deliver" in warnings[1]
    assert secret not in proc.stdout
    assert "sk-test-secret-value" not in proc.stdout
    # Every *_env field of the schema is one check knows to read.
    env_fields = [field.path for field in schema_fields() if field.name.endswith("_env")]
    assert env_fields == [
        "connector.base_url_env",
        "connector.api_key_env",
        "sinks[].url_env",
        "sinks[].token_env",
        "notify[].webhook.url_env",
        "notify[].webhook.token_env",
        "notify[].email.username_env",
        "notify[].email.password_env",
    ]


def test_a_warning_fails_check_only_with_strict(project: Path) -> None:
    plain = salvagelane("check", "instructions", cwd=project)
    strict = salvagelane("check", "--strict", "instructions", cwd=project)
    with_key = salvagelane("check", "--strict", "instructions", cwd=project, env=KEY)
    assert (plain.returncode, strict.returncode, with_key.returncode) == (0, 1, 0)
    assert plain.stdout == strict.stdout
    assert "warning  instructions/daily-triage.yaml: connector.api_key_env: " in plain.stdout
    assert "warning" not in with_key.stdout


# --- The items path against the envelope schema ------------------------------------------------


def _envelope(project: Path, schema: dict[str, Any]) -> Path:
    (project / "schemas" / "daily-triage-report.schema.json").write_text(
        json.dumps(schema), encoding="utf-8"
    )
    return project / "instructions" / "daily-triage.yaml"


ITEMS_REF = {"type": "array", "items": {"$ref": "urn:salvagelane:schema:daily-triage-item"}}


@pytest.mark.parametrize(
    ("schema", "items_path", "expected"),
    [
        (
            {"type": "object", "properties": {"recommendations": {"type": "object"}}},
            "recommendations",
            'got "recommendations", which it types as object',
        ),
        (
            {
                "type": "object",
                "properties": {"data": {"type": "object", "properties": {"n": {"type": "string"}}}},
            },
            "data.n",
            'got "data.n", which it types as string',
        ),
        (
            {"type": "object", "properties": {"recommendations": ITEMS_REF}},
            "",
            'got "" (the report itself), which it types as object',
        ),
        (
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {"recommendations": ITEMS_REF},
            },
            "recs",
            'expected a field of the envelope schema (recommendations), got "recs"',
        ),
    ],
)
def test_an_items_path_that_is_no_array_of_the_envelope_is_a_problem(
    project: Path, schema: dict[str, Any], items_path: str, expected: str
) -> None:
    definition = _envelope(project, schema)
    edit(definition, "items_path: recommendations", f'items_path: "{items_path}"')
    with pytest.raises(DefinitionError) as caught:
        load_instruction(definition)
    assert caught.value.paths == ("output.items_path",)
    assert expected in str(caught.value)


def test_an_items_path_an_open_envelope_does_not_define_is_a_warning(project: Path) -> None:
    definition = _envelope(
        project,
        {
            "type": "object",
            "properties": {"summary": {"type": "string"}, "recommendations": ITEMS_REF},
        },
    )
    edit(definition, "items_path: recommendations", "items_path: recs")

    checked = check_instruction(definition)
    assert checked.warnings == (
        'output.items_path: the envelope schema does not define "recs" (it defines summary, '
        "recommendations): the model is shown that schema, and nothing in it asks for the "
        "items there",
    )
    proc = salvagelane("check", "--strict", "instructions", cwd=project, env=KEY)
    assert proc.returncode == 1
    assert "warning  instructions/daily-triage.yaml: output.items_path: " in proc.stdout
    edit(definition, "items_path: recs", "items_path: recommendations")
    assert check_instruction(definition).warnings == ()


# --- Defaults -----------------------------------------------------------------------------------


def test_a_definition_of_only_the_required_fields_loads_with_the_schema_defaults(
    project: Path,
) -> None:
    instruction = load_instruction(minimal(project))
    guardrails = instruction.guardrails
    assert guardrails == GuardrailSpec(
        max_items=field_default("guardrails.max_items"),
        max_depth=field_default("guardrails.max_depth"),
        max_string_length=field_default("guardrails.max_string_length"),
        max_output_bytes=field_default("guardrails.max_output_bytes"),
        coerce=field_default("guardrails.coerce"),
        allow_lists=(),
        accept_repairs=AcceptRepairs(field_default("guardrails.accept_repairs")),
        max_quarantined=field_default("guardrails.max_quarantined"),
    )
    assert (guardrails.max_items, guardrails.max_depth, guardrails.coerce) == (100, 32, False)
    connector = instruction.connector
    assert (connector.temperature, connector.structured_output, connector.stream) == (
        0.0,
        False,
        False,
    )
    assert connector.api_key_env is None
    assert instruction.output.rank_key is None
    assert instruction.output.framing is Framing.AUTO
    assert dict(instruction.context) == {}
    assert instruction.schedule.misfire_grace_seconds == 3600
    assert instruction.retry.length_budget_factor == 2.0
    # The version is over the document as written: defaults do not change it.
    assert "guardrails" not in instruction.definition


def test_try_answers_a_minimal_definition_with_a_sample(project: Path) -> None:
    minimal(project)
    proc = salvagelane(
        "try",
        "minimal",
        "--sample",
        str(FIXTURE / "raw.txt"),
        "--instructions",
        str(project / "instructions"),
        cwd=project,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # No rank_key, max_items 100: every complete item is kept, in the model's order.
    assert "kept         7 of 8 candidates" in proc.stdout
    assert "quarantined  1 (truncated 1)" in proc.stdout
    check = salvagelane("check", "--strict", "instructions", cwd=project, env=KEY)
    assert check.returncode == 0, check.stdout
    assert "ok  minimal  (instructions/minimal.yaml)" in check.stdout


def _default_of(cls: type, name: str) -> Any:
    [found] = [f for f in dataclasses.fields(cls) if f.name == name]
    return found.default


def test_the_schema_defaults_are_the_models_and_salvages() -> None:
    """One source of truth: the loader reads the schema's defaults; the dataclasses'
    own defaults (used by code building them directly) and the salvage command's
    guardrails must say the same."""
    schema = defaults()
    assert {
        "schedule.misfire_grace_seconds": _default_of(Schedule, "misfire_grace_seconds"),
        "guardrails.max_quarantined": _default_of(GuardrailSpec, "max_quarantined"),
        "guardrails.accept_repairs": _default_of(GuardrailSpec, "accept_repairs"),
        "output.framing": _default_of(OutputSpec, "framing"),
        "sinks[].timeout_seconds": _default_of(SinkSpec, "timeout_seconds"),
        "retry.length_budget_factor": _default_of(RetryPolicy, "length_budget_factor"),
        "guardrails.max_depth": _default_of(Guardrails, "max_depth"),
        "guardrails.max_string_length": _default_of(Guardrails, "max_string_length"),
        "guardrails.max_output_bytes": _default_of(Guardrails, "max_bytes"),
        "guardrails.coerce": _default_of(Guardrails, "coerce"),
        "notify[].webhook.timeout_seconds": _default_of(SinkSpec, "timeout_seconds"),
        "notify[].email.smtp_port": _default_of(EmailSpec, "smtp_port"),
        "notify[].email.starttls": _default_of(EmailSpec, "starttls"),
        "notify[].email.timeout_seconds": _default_of(EmailSpec, "timeout_seconds"),
    } == {path: schema[path] for path in schema if path not in _LOADER_ONLY}
    assert set(_LOADER_ONLY) <= set(schema)


# Defaults the dataclasses leave to the loader (no dataclass default to compare).
_LOADER_ONLY = (
    "connector.temperature",
    "connector.structured_output",
    "connector.stream",
    "guardrails",
    "guardrails.max_items",
    "guardrails.allow_lists",
    "context",
)


# --- A keyless connector -------------------------------------------------------------------------


def test_a_connector_without_a_key_variable_sends_no_authorization(
    project: Path, server: ScriptedServer, client: httpx.Client, monkeypatch: Any
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)  # set, but not named: never sent
    instruction = load_instruction(minimal(project, base_url=server.base_url))
    connector = build_connector(instruction.connector, client=client)
    server.script.append(Scripted(body=provider_json("openai-chat-completion.json")))
    connector.complete(REQUEST)
    [sent] = server.requests
    assert "authorization" not in sent.headers
    assert SECRET not in json.dumps(sent.headers)


def test_a_named_key_variable_that_is_unset_fails_the_call_clearly(
    project: Path, server: ScriptedServer, client: httpx.Client, monkeypatch: Any
) -> None:
    definition = minimal(project, base_url=server.base_url)
    edit(definition, "  model: local-model\n", f"  model: local-model\n  api_key_env: {KEY_ENV}\n")
    monkeypatch.delenv(KEY_ENV, raising=False)
    connector = build_connector(load_instruction(definition).connector, client=client)
    with pytest.raises(ConnectorError, match=f"environment variable {KEY_ENV} is not set"):
        connector.complete(REQUEST)
    assert server.requests == []
