"""The structured-output hint end to end (issue 28, section 5): the daily-triage definition
with ``structured_output: true``, run by the executor through each real connector against
the scripted provider (a real HTTP server on 127.0.0.1). The bodies the provider received
are held against the providers' documented subsets (tests/support/provider_schemas.py),
and each stored attempt records the hint it sent."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from salvagelane.connectors import AnthropicConnector, AnthropicSettings, Connector
from salvagelane.definitions import Instruction
from salvagelane.runtime.executor import Executor
from salvagelane.store import Store
from tests.support.definitions import copy_project, edit, run_measured
from tests.support.provider import Scripted, ScriptedServer, connector_args, provider_json
from tests.support.provider_schemas import assert_fits_anthropic, assert_fits_openai, schema_refs
from tests.support.run_setup import (
    JSON_HEADERS,
    Project,
    chat_answer,
    items,
    openai_connector_for,
    provider,
    store,
)

__all__ = ["provider", "store"]

KEY = "sk-hint-test-7a6b5c-never-stored"
REPORT = json.dumps({"summary": "Two things today.", "recommendations": items(2)})


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


def test_openai_gets_a_strict_bundled_capped_hint_and_the_attempt_records_it(
    project: Project, store: Store, provider: ScriptedServer
) -> None:
    instruction = project.instruction(**{"structured_output: false": "structured_output: true"})
    provider.script.append(chat_answer(REPORT))
    with httpx.Client() as client:
        connector_for = openai_connector_for(
            client, provider.base_url, key=KEY, structured_output=True, max_attempts=1
        )
        outcome = Executor(store, connector_for=connector_for).run(instruction)

    assert (outcome.status, outcome.kept) == ("ok", 2)
    (sent,) = provider.requests
    hint = sent.body["response_format"]["json_schema"]
    assert hint["strict"] is True
    assert_fits_openai(hint)
    assert all(ref.startswith("#/") for ref in schema_refs(hint["schema"]))
    assert hint["schema"]["properties"]["recommendations"]["maxItems"] == 8  # max_items
    (attempt,) = store.get_run(outcome.run_id).attempts
    recorded = attempt.request["schema_hint"]
    assert (recorded["sent"], recorded["strict"], recorded["provider"]) == (True, True, "openai")
    assert "$.properties.summary.maxLength" in recorded["left_out"]


def test_anthropic_gets_the_hint_without_its_unsupported_keywords(
    project: Project, store: Store, provider: ScriptedServer
) -> None:
    instruction = project.instruction(
        **{
            "structured_output: false": "structured_output: true",
            "kind: openai": "kind: anthropic",
        }
    )
    body = provider_json("anthropic-message.json")
    body["content"] = [{"type": "text", "text": REPORT}]
    provider.script.append(Scripted(body=json.dumps(body).encode(), headers=JSON_HEADERS))

    def connector_for(client: httpx.Client, definition: Instruction) -> Connector:
        options = {
            "base_url": provider.base_url,
            "model": definition.connector.model,
            "api_key_env": definition.connector.api_key_env,
            "key_lookup": lambda name: KEY,
            "structured_output": True,
            "max_attempts": 1,
        }
        return AnthropicConnector(client, **connector_args(AnthropicSettings, options))

    with httpx.Client() as client:
        outcome = Executor(
            store, connector_for=lambda definition: connector_for(client, definition)
        ).run(instruction)

    assert (outcome.status, outcome.kept) == ("ok", 2)
    (sent,) = provider.requests
    schema = sent.body["output_config"]["format"]["schema"]
    assert_fits_anthropic(schema)
    assert "maxItems" not in schema["properties"]["recommendations"]
    (attempt,) = store.get_run(outcome.run_id).attempts
    recorded = attempt.request["schema_hint"]
    assert (recorded["sent"], recorded["provider"]) == (True, "anthropic")
    assert "$.properties.recommendations.maxItems" in recorded["left_out"]


def test_check_says_which_validator_judges_the_items_and_what_the_hint_will_be(
    tmp_path: Path,
) -> None:
    project = copy_project(tmp_path)
    definition = project / "instructions" / "daily-triage.yaml"
    edit(definition, "structured_output: false", "structured_output: true")
    proc = run_measured("check", "instructions", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "  openai hint: strict (the provider enforces it)\n" in proc.stdout
    assert "$.properties.summary.maxLength" in proc.stdout
    assert "item schema: judged by jsonschema alone" not in proc.stdout

    item = project / "schemas" / "daily-triage-item.schema.json"
    edit(item, '"maxLength": 120', '"maxLength": 120,\n      "pattern": "^\\\\w[\\\\w-]*$"')
    edit(definition, "kind: openai", "kind: anthropic")
    proc = run_measured("check", "instructions", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "  item schema: judged by jsonschema alone, item by item (slower): "
        "at /properties/candidate/pattern: its pattern" in proc.stdout
    )
    assert "  anthropic hint: strict (the provider enforces it)\n" in proc.stdout
    assert "$.properties.recommendations.maxItems" in proc.stdout
