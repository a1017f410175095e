"""Instruction definitions: the bundled one, broken ones, and ``salvagelane check``."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from salvagelane.core import ItemSchema, salvage
from salvagelane.definitions import (
    UNCERTAINTY_SENTENCE,
    AllowListSource,
    ConnectorKind,
    Instruction,
    RetryOn,
    SinkKind,
    cron_problem,
    load_instruction,
    load_instructions,
    render_prompt,
    resolve_allow_lists,
    resolve_context,
)
from salvagelane.errors import ConfigurationError, DefinitionError
from tests.support.cli import clean_env
from tests.support.definitions import copy_project, edit

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "instructions" / "daily-triage.yaml"
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
INSTRUCTION_SCHEMA = ROOT / "schemas" / "instruction.schema.json"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(tmp_path)


def workstream_ids() -> list[str]:
    return (FIXTURE / "workstreams.txt").read_text(encoding="utf-8").split()


# --- The bundled definition ------------------------------------------------------------------


def test_bundled_definition_loads_with_every_section() -> None:
    instruction = load_instruction(BUNDLED)
    assert instruction.id == "daily-triage"
    assert instruction.schedule.cron == "20 5 * * *"
    assert instruction.schedule.timezone == "UTC"
    assert instruction.schedule.misfire_grace_seconds == 3600
    assert instruction.connector.kind is ConnectorKind.OPENAI
    assert instruction.connector.base_url == "https://openrouter.ai/api/v1"
    assert instruction.connector.api_key_env == "OPENROUTER_API_KEY"
    assert instruction.output.items_path == ("recommendations",)
    assert instruction.output.rank_key == "rank"
    assert instruction.output.item_schema_path == ROOT / "schemas" / "daily-triage-item.schema.json"
    assert instruction.guardrails.max_items == 8
    assert instruction.guardrails.allow_lists == (
        AllowListSource(field="candidate", context="workstreams"),
    )
    assert {name: source.kind for name, source in instruction.context.items()} == {
        "workstreams": "file",
        "today": "callable",
    }
    # `on:` is a YAML 1.1 boolean to a plain safe_load; here it stays the key "on".
    assert instruction.retry.attempts == 2
    assert instruction.retry.on == (RetryOn.NOTHING_SALVAGED,)


def test_bundled_definition_hash_is_over_its_canonical_json(
    daily_triage_schema: ItemSchema,
) -> None:
    instruction = load_instruction(BUNDLED)
    canonical = json.dumps(
        dict(instruction.definition), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert instruction.definition_sha256 == hashlib.sha256(canonical.encode()).hexdigest()
    assert instruction.output.item_schema.sha256 == daily_triage_schema.sha256


def test_bundled_context_resolves_to_the_known_workstreams_and_today() -> None:
    instruction = load_instruction(BUNDLED)
    before = datetime.now(UTC).date().isoformat()
    context = resolve_context(instruction)
    after = datetime.now(UTC).date().isoformat()
    assert [w["id"] for w in context["workstreams"]] == workstream_ids()
    assert all(isinstance(w["title"], str) and w["title"] for w in context["workstreams"])
    assert context["today"] in (before, after)
    assert resolve_allow_lists(instruction, context) == {"candidate": frozenset(workstream_ids())}


def test_bundled_prompt_renders_with_the_output_contract() -> None:
    instruction = load_instruction(BUNDLED)
    context = resolve_context(instruction)
    prompt = render_prompt(instruction, context)
    assert "Emit at most 8 items" in prompt.system
    assert prompt.system.rstrip().endswith(UNCERTAINTY_SENTENCE)
    assert UNCERTAINTY_SENTENCE == "If uncertain, emit fewer well-formed items rather than more."
    item_schema = json.dumps(dict(instruction.output.item_schema.schema), indent=2)
    assert item_schema in prompt.system
    assert '"recommendations"' in prompt.system
    assert f"Today is {context['today']}." in prompt.user
    for workstream in context["workstreams"]:
        assert f"- {workstream['id']}: {workstream['title']}\n" in prompt.user
    assert "{{" not in prompt.user
    assert "{%" not in prompt.user


def test_bundled_definition_salvages_the_truncated_fixture_like_the_demo() -> None:
    instruction = load_instruction(BUNDLED)
    allow_lists = resolve_allow_lists(instruction, resolve_context(instruction))
    raw = (FIXTURE / "raw.txt").read_text(encoding="utf-8")
    result = salvage(raw, instruction.salvage_policy(allow_lists), finish_reason="length")
    ranks = [item.data["rank"] for item in result.items if isinstance(item.data, dict)]
    assert ranks == [1, 2, 3, 4, 5, 6, 7]
    assert len(result.items) == 7
    assert [q.reason for q in result.quarantined] == ["truncated"]
    assert result.status == "partial"


def test_context_file_matches_the_fixture_allow_list() -> None:
    import yaml

    entries = yaml.safe_load((ROOT / "instructions/context/workstreams.yaml").read_text())
    assert [entry["id"] for entry in entries] == workstream_ids()
    assert len(entries) == 20


# --- Hashing and YAML reading ----------------------------------------------------------------


def test_hash_ignores_comments_and_layout_but_not_values(project: Path) -> None:
    definition = project / "instructions" / "daily-triage.yaml"
    original = load_instruction(definition).definition_sha256
    edit(definition, "  temperature: 0.2\n", "  # a comment\n  temperature:   0.2\n")
    assert load_instruction(definition).definition_sha256 == original
    edit(definition, "temperature:   0.2", "temperature: 0.3")
    assert load_instruction(definition).definition_sha256 != original


def test_yaml_scalars_follow_the_core_schema(project: Path) -> None:
    definition = project / "instructions" / "daily-triage.yaml"
    edit(
        definition,
        "context:\n",
        "context:\n  flags:\n    value: {on: yes, off: no, day: 2024-01-01, padded: 010, "
        "time: 1:20, big: 1e3, none: ~, real: true}\n",
    )
    context = resolve_context(load_instruction(definition))
    assert context["flags"] == {
        "on": "yes",
        "off": "no",
        "day": "2024-01-01",
        "padded": "010",
        "time": "1:20",
        "big": 1000.0,
        "none": None,
        "real": True,
    }


# --- Broken definitions --------------------------------------------------------------------

STAGES = ("load", "resolve", "allow_lists", "render")


@dataclass(frozen=True)
class Broken:
    id: str
    old: str  # replaced once in instructions/daily-triage.yaml
    new: str
    path: str  # the field path the message must name first
    expects: tuple[str, ...]  # what the message must say was expected (and received)
    stage: str = "load"  # the step that must catch it; the steps before it succeed
    files: dict[str, str] = field(default_factory=dict)  # written under the project first
    absent: tuple[str, ...] = ()  # never in the message


RAISING_MODULE = "def boom(**kwargs):\n    raise RuntimeError('feed unavailable')\n"
SET_MODULE = "def boom(**kwargs):\n    return {'ids': {1, 2}}\n"

BROKEN = [
    Broken(
        "unknown-connector-kind",
        "kind: openai",
        "kind: gpt",
        "connector.kind",
        ('expected one of "openai", "anthropic", "replay", got "gpt"',),
    ),
    Broken(
        "missing-required-field",
        "  timezone: UTC\n  misfire",
        "  misfire",
        "schedule.timezone",
        ("(required field), got nothing",),
    ),
    Broken(
        "extra-unknown-field",
        "  temperature: 0.2\n",
        "  temperature: 0.2\n  temprature: 0.3\n",
        "connector.temprature",
        ('got the unknown field "temprature"', 'did you mean "temperature"?'),
    ),
    Broken(
        "top-level-typo",
        "retry:",
        "retries:",
        "retry",
        ("required field", "got nothing"),
    ),
    Broken(
        "bad-cron-range",
        '"20 5 * * *"',
        '"20 25 * * *"',
        "schedule.cron",
        ("expected hour values from 0 to 23, got 25",),
    ),
    Broken(
        "cron-with-seven-fields",
        '"20 5 * * *"',
        '"0 0 20 5 * * *"',
        "schedule.cron",
        ("cron expression of 5 fields", "or 6 with seconds first", 'got "0 0 20 5 * * *"'),
    ),
    Broken(
        "cron-with-four-fields",
        '"20 5 * * *"',
        '"20 5 * *"',
        "schedule.cron",
        ("cron expression of 5 fields", 'got "20 5 * *"'),
    ),
    Broken(
        "cron-seconds-out-of-range",
        '"20 5 * * *"',
        '"60 20 5 * * *"',
        "schedule.cron",
        ("expected second values from 0 to 59, got 60",),
    ),
    Broken(
        "cron-that-never-fires",
        '"20 5 * * *"',
        '"0 0 30 2 *"',
        "schedule.cron",
        ("expected a schedule that can fire",),
    ),
    Broken(
        "bad-timezone",
        "  timezone: UTC\n  misfire",
        "  timezone: Mars/Olympus\n  misfire",
        "schedule.timezone",
        ('expected an IANA time zone name such as UTC or Europe/Berlin, got "Mars/Olympus"',),
    ),
    Broken(
        "missing-schema-file",
        "../schemas/daily-triage-item.schema.json",
        "../schemas/nope.schema.json",
        "output.item_schema",
        ("expected an existing file", '"../schemas/nope.schema.json"'),
    ),
    Broken(
        "invalid-schema-file",
        "../schemas/daily-triage-item.schema.json",
        "../schemas/broken.schema.json",
        "output.item_schema",
        ("expected a valid JSON Schema", "not a valid JSON Schema"),
        files={"schemas/broken.schema.json": '{"type": 5}'},
    ),
    Broken(
        "rank-key-not-in-item-schema",
        "rank_key: rank",
        "rank_key: rnak",
        "output.rank_key",
        ("expected a field of the item schema (rank, candidate,", 'got "rnak"'),
    ),
    Broken(
        "allow-list-names-unknown-context",
        "      context: workstreams\n",
        "      context: projects\n",
        "guardrails.allow_lists[0].context",
        ('expected the name of a context entry (workstreams, today), got "projects"',),
    ),
    Broken(
        "allow-list-file-missing",
        "      context: workstreams\n",
        "      file: context/nope.txt\n",
        "guardrails.allow_lists[0].file",
        ("expected an existing file", '"context/nope.txt"'),
    ),
    Broken(
        "allow-list-with-two-sources",
        "      context: workstreams\n",
        "      context: workstreams\n      values: [a, b]\n",
        "guardrails.allow_lists[0]",
        ('expected exactly one of "values", "file", "context", got "values" and "context"',),
    ),
    Broken(
        "duplicate-yaml-key",
        "  model: openai/gpt-4.1-mini\n",
        "  model: openai/gpt-4.1-mini\n  model: openai/gpt-4.1\n",
        "connector.model",
        ('expected each key once in a mapping, got a duplicate key "model" (first at line',),
    ),
    Broken(
        "api-key-instead-of-its-variable-name",
        "api_key_env: OPENROUTER_API_KEY",
        "api_key_env: sk-or-v1-0123456789abcdef",
        "connector.api_key_env",
        ("the NAME of an environment variable", "not shown: it may be a secret"),
        absent=("sk-or-v1",),
    ),
    Broken(
        "replay-without-fixture",
        "kind: openai",
        "kind: replay",
        "connector.fixture",
        ("required: a replay connector answers from a recorded fixture",),
    ),
    Broken(
        "unknown-retry-condition",
        "on: [nothing_salvaged]",
        "on: [nothing_salvaged, timeout]",
        "retry.on[1]",
        (
            'expected one of "nothing_salvaged", "truncated", "provider_error", "oversize", '
            '"quarantined", got "timeout"',
        ),
    ),
    Broken(
        "too-many-attempts",
        "attempts: 2",
        "attempts: 9",
        "retry.attempts",
        ("expected an integer from 1 to 5, got 9",),
    ),
    Broken(
        "undefined-template-variable",
        "Today is {{ today }}.",
        "Today is {{ todya }}.",
        "prompt.user",
        ('expected only variables defined in context (today, workstreams), got undefined "todya"',),
    ),
    Broken(
        "template-syntax-error",
        "Today is {{ today }}.",
        "Today is {{ today }.",
        "prompt.user",
        ("expected a valid Jinja2 template, got a syntax error at template line 1",),
    ),
    Broken(
        "context-callable-raises",
        "salvagelane.context_sources:today",
        "salvagelane_test_ctx_raises:boom",
        "context.today",
        ("salvagelane_test_ctx_raises:boom(**args)", "got RuntimeError: feed unavailable"),
        stage="resolve",
        files={"salvagelane_test_ctx_raises.py": RAISING_MODULE},
    ),
    Broken(
        "context-callable-module-missing",
        "salvagelane.context_sources:today",
        "salvagelane_test_ctx_absent:boom",
        "context.today.callable",
        ('expected an importable module, got "salvagelane_test_ctx_absent"',),
        stage="resolve",
    ),
    Broken(
        "context-callable-returns-a-set",
        "salvagelane.context_sources:today",
        "salvagelane_test_ctx_set:boom",
        "context.today",
        ("to return JSON data", "got a set at $.ids"),
        stage="resolve",
        files={"salvagelane_test_ctx_set.py": SET_MODULE},
    ),
    Broken(
        "context-file-with-duplicate-key",
        "file: context/workstreams.yaml",
        "file: context/dup.yaml",
        "context.workstreams.file",
        ('got a duplicate key "id"', "at line 2"),
        stage="resolve",
        files={"instructions/context/dup.yaml": "- id: a\n  id: b\n"},
    ),
    Broken(
        "json-context-file-with-duplicate-key",
        "file: context/workstreams.yaml",
        "file: context/dup.json",
        "context.workstreams.file",
        ("expected valid JSON in context/dup.json", 'expected unique keys, received "id" twice'),
        stage="resolve",
        files={"instructions/context/dup.json": '[{"id": "a", "id": "b"}]'},
    ),
    Broken(
        "allow-list-context-is-not-a-list",
        "    file: context/workstreams.yaml\n",
        "    value: {billing-migration: Move billing}\n",
        "guardrails.allow_lists[0].context",
        ('expected context value "workstreams" to be a non-empty list', "got a mapping"),
        stage="allow_lists",
    ),
    Broken(
        "undefined-attribute-at-render",
        "{{ workstream.title }}",
        "{{ workstream.name }}",
        "prompt.user",
        ("expected only defined variables and attributes", "has no attribute 'name'"),
        stage="render",
    ),
    Broken(
        "anthropic-version-on-openai",
        "  structured_output: false\n",
        '  structured_output: false\n  anthropic_version: "2023-06-01"\n',
        "connector.anthropic_version",
        ("only a connector of kind anthropic",),
    ),
    Broken(
        "stream-not-boolean",
        "  structured_output: false\n",
        "  structured_output: false\n  stream: sometimes\n",
        "connector.stream",
        ('got "sometimes"',),
    ),
    Broken(
        "sink-without-its-target",
        "\nretry:",
        "\nsinks:\n  - kind: webhook\nretry:",
        "sinks[0]",
        ('expected exactly one of "url", "url_env", got none of them',),
    ),
    Broken(
        "sink-with-another-kinds-field",
        "\nretry:",
        "\nsinks:\n  - kind: json_file\n    path: out.json\n    url: https://x.test/\nretry:",
        "sinks[0].url",
        ("only a webhook sink posts to a url",),
    ),
    Broken(
        "token-budget-factor-too-large",
        "  attempts: 2\n",
        "  attempts: 2\n  length_budget_factor: 20\n",
        "retry.length_budget_factor",
        ("expected a number from 1 to 8, got 20",),
    ),
    Broken(
        "sandbox-refuses-dunder-access",
        "Today is {{ today }}.",
        "Today is {{ today.__class__.__mro__ }}.",
        "prompt.user",
        ("unsafe",),
        stage="render",
    ),
]


@pytest.mark.parametrize("case", BROKEN, ids=[case.id for case in BROKEN])
def test_broken_definition_names_file_path_and_expectation(
    case: Broken, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for relative, text in case.files.items():
        (project / relative).write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(project))
    definition = project / "instructions" / "daily-triage.yaml"
    edit(definition, case.old, case.new)

    state: dict[str, Any] = {}
    steps: dict[str, Callable[[], object]] = {
        "load": lambda: state.setdefault("instruction", load_instruction(definition)),
        "resolve": lambda: state.setdefault("context", resolve_context(state["instruction"])),
        "allow_lists": lambda: resolve_allow_lists(state["instruction"], state["context"]),
        "render": lambda: render_prompt(state["instruction"], state["context"]),
    }
    for stage in STAGES[: STAGES.index(case.stage)]:
        steps[stage]()  # the steps before the one that must catch it succeed
    with pytest.raises(DefinitionError) as caught:
        steps[case.stage]()

    message = str(caught.value)
    assert message.startswith(f"{definition}: {case.path}: "), message
    for fragment in case.expects:
        assert fragment in message, message
    for fragment in case.absent:
        assert fragment not in message, message
    assert "\n" not in message
    assert case.path in caught.value.paths
    assert caught.value.source == str(definition)
    assert isinstance(caught.value, ConfigurationError)


def test_sinks_stream_and_token_budget_load_into_the_model(project: Path) -> None:
    definition = project / "instructions" / "daily-triage.yaml"
    edit(definition, "  structured_output: false\n", "  structured_output: false\n  stream: true\n")
    edit(
        definition,
        "  attempts: 2\n",
        "  attempts: 3\n  length_budget_factor: 1.5\n  max_output_tokens_ceiling: 9000\n",
    )
    edit(
        definition,
        "\nretry:",
        "\nsinks:\n"
        "  - kind: json_file\n    path: reports/{instruction}-{run_id}.json\n"
        "  - kind: webhook\n    url: https://hooks.example.com/triage\n"
        "    token_env: TRIAGE_HOOK_TOKEN\n    timeout_seconds: 5\n"
        "  - kind: callable\n    callable: mypkg.reports:publish\n"
        "retry:",
    )
    instruction = load_instruction(definition)
    assert instruction.connector.stream is True
    assert instruction.connector.anthropic_version is None
    assert (instruction.retry.attempts, instruction.retry.length_budget_factor) == (3, 1.5)
    assert instruction.retry.max_output_tokens_ceiling == 9000
    kinds = [sink.kind for sink in instruction.sinks]
    assert kinds == [SinkKind.JSON_FILE, SinkKind.WEBHOOK, SinkKind.CALLABLE]
    file_sink, webhook, call = instruction.sinks
    assert file_sink.path == definition.parent / "reports/{instruction}-{run_id}.json"
    assert (webhook.url, webhook.token_env, webhook.timeout_seconds) == (
        "https://hooks.example.com/triage",
        "TRIAGE_HOOK_TOKEN",
        5.0,
    )
    assert call.callable == "mypkg.reports:publish"
    assert [sink.target for sink in instruction.sinks] == [
        str(file_sink.path),
        "https://hooks.example.com/triage",
        "mypkg.reports:publish",
    ]


def test_several_problems_are_reported_together_in_document_order(project: Path) -> None:
    definition = project / "instructions" / "daily-triage.yaml"
    edit(definition, "kind: openai", "kind: gpt")
    edit(definition, "attempts: 2", "attempts: 0")
    with pytest.raises(DefinitionError) as caught:
        load_instruction(definition)
    message = str(caught.value)
    assert message.index("connector.kind:") < message.index("retry.attempts:")
    assert caught.value.paths == ("connector.kind", "retry.attempts")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "got an empty document"),
        ("- a\n- b\n", "(top level): expected a mapping, got a list"),
        ("id: [daily\n", "expected valid YAML, got a syntax error"),
        ("id: &a [*a]\n", "expected no recursive alias"),
        ("id: !!set {a}\n", "got a value tagged tag:yaml.org,2002:set"),
        ("1: x\n", "expected string keys, got the key 1"),
    ],
)
def test_unusable_yaml_is_a_definition_error(tmp_path: Path, text: str, expected: str) -> None:
    definition = tmp_path / "x.yaml"
    definition.write_text(text, encoding="utf-8")
    with pytest.raises(DefinitionError) as caught:
        load_instruction(definition)
    assert str(caught.value).startswith(f"{definition}: ")
    assert expected in str(caught.value)


def test_load_instructions_reads_every_definition_and_rejects_a_reused_id(project: Path) -> None:
    directory = project / "instructions"
    second = directory / "weekly-triage.yml"
    shutil.copy(directory / "daily-triage.yaml", second)
    edit(second, "id: daily-triage", "id: weekly-triage")
    edit(second, "file: context/workstreams.yaml", "file: ../instructions/context/workstreams.yaml")
    assert [i.id for i in load_instructions(directory)] == ["daily-triage", "weekly-triage"]

    edit(second, "id: weekly-triage", "id: daily-triage")
    with pytest.raises(DefinitionError) as caught:
        load_instructions(directory)
    assert str(caught.value).startswith(f"{second}: id: expected an id no other definition uses")
    assert str(directory / "daily-triage.yaml") in str(caught.value)


def test_load_instructions_needs_an_existing_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no such directory") as caught:
        load_instructions(tmp_path / "absent")
    assert not isinstance(caught.value, DefinitionError)


# --- The instruction schema and cron ---------------------------------------------------------


def _object_schemas(node: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if "properties" in node:
            found.append((where, node))
        for key, value in node.items():
            found += _object_schemas(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _object_schemas(value, f"{where}/{index}")
    return found


def test_instruction_schema_is_closed_and_documented() -> None:
    schema = json.loads(INSTRUCTION_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == "urn:salvagelane:schema:instruction"
    objects = [
        (where, node)
        for where, node in _object_schemas(schema, "#")
        if node.get("type") == "object"  # not the if/then/else clauses
    ]
    assert len(objects) >= 9
    for where, node in objects:
        assert node.get("additionalProperties") is False, where
        for name, prop in node["properties"].items():
            assert isinstance(prop, dict), f"{where}/{name}"
            assert prop.get("description"), f"{where}/{name}"


def test_instruction_schema_accepts_the_bundled_definition_as_plain_data() -> None:
    schema = json.loads(INSTRUCTION_SCHEMA.read_text(encoding="utf-8"))
    document = dict(load_instruction(BUNDLED).definition)
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(document)) == []
    document["connector"] = {**document["connector"], "api_key": "sk-x"}
    assert list(validator.iter_errors(document)) != []


@pytest.mark.parametrize(
    "expression",
    [
        "20 5 * * *",
        "*/15 * * * *",
        "0 9 * * mon-fri",
        "0 0 29 2 *",
        "0 0 1 jan,jul *",
        "5 4 * * 7",
        # Six fields: seconds first.
        "* * * * * *",
        "*/10 * * * * *",
        "30 20 5 * * *",
        "0,30 0 9 * * 1-5",
        "59 59 23 31 dec sat",
    ],
)
def test_cron_accepts(expression: str) -> None:
    assert cron_problem(expression) is None


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("60 * * * *", "expected minute values from 0 to 59, got 60"),
        ("0 0 0 * *", "expected day-of-month values from 1 to 31, got 0"),
        ("0 0 * 13 *", "expected month values from 1 to 12, got 13"),
        ("0 0 * * 8", "expected day-of-week values from 0 to 7, got 8"),
        ("0 0 * * funday", "expected the day-of-week field to be"),
        ("0 0 * xyz *", 'expected month values as numbers or jan-dec, got "xyz"'),
        ("0 5-3 * * *", 'expected a hour range low-high, got "5-3"'),
        ("*/0 * * * *", "expected a minute step from 1 to 60, got 0"),
        ("5/10 * * * *", "expected a step only after * or a range"),
        ("0 0 31 4,6 *", "never does"),
        (
            "0 0 * *",
            "expected 5 fields (minute hour day-of-month month day-of-week) "
            'or 6 with seconds first, got 4 in "0 0 * *"',
        ),
        ("* * * * * * *", 'or 6 with seconds first, got 7 in "* * * * * * *"'),
        ("", "got 0 in"),
        # With six fields the first is the second, and the others keep their meaning.
        ("60 * * * * *", "expected second values from 0 to 59, got 60"),
        ("*/0 * * * * *", "expected a second step from 1 to 60, got 0"),
        ("5/10 * * * * *", "expected a step only after * or a range in the second field"),
        ("0 60 * * * *", "expected minute values from 0 to 59, got 60"),
        ("0 0 0 0 * *", "expected day-of-month values from 1 to 31, got 0"),
        ("0 0 0 * * 8", "expected day-of-week values from 0 to 7, got 8"),
        ("0 0 0 31 4,6 *", "never does"),
    ],
)
def test_cron_rejects(expression: str, expected: str) -> None:
    problem = cron_problem(expression)
    assert problem is not None
    assert expected in problem


# --- salvagelane check -----------------------------------------------------------------------


KEY_SET = {"OPENROUTER_API_KEY": "sk-test-not-a-key"}  # the bundled definition's key variable


def run_check(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``salvagelane check ARGS`` with the bundled key variable set (unless ``env`` says
    otherwise: an unset one is a warning)."""
    return subprocess.run(
        [sys.executable, "-m", "salvagelane", "check", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(KEY_SET if env is None else env),
        timeout=120,
        check=False,
    )


def test_check_passes_the_bundled_definitions() -> None:
    for args in [("instructions",), ()]:  # the directory defaults to instructions/
        proc = run_check(*args, cwd=ROOT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout == (
            "ok  daily-triage  (instructions/daily-triage.yaml)\n"
            "  not run: context callable today (salvagelane.context_sources:today); the "
            "prompt was rendered with a placeholder for it (check --resolve imports and "
            "runs it)\n"
        )
        assert proc.stderr == ""


def test_check_reports_a_broken_definition_on_one_line(project: Path) -> None:
    edit(project / "instructions" / "daily-triage.yaml", "kind: openai", "kind: gpt")
    proc = run_check("instructions", cwd=project)
    assert proc.returncode == 1
    assert proc.stdout == (
        "error  instructions/daily-triage.yaml: connector.kind: expected one of "
        '"openai", "anthropic", "replay", got "gpt" (line 18)\n'
    )


def test_check_reports_every_definition_and_fails_on_any_error(project: Path) -> None:
    directory = project / "instructions"
    broken = directory / "a-broken.yaml"
    shutil.copy(directory / "daily-triage.yaml", broken)
    edit(broken, "id: daily-triage", "id: a-broken")
    edit(broken, "timezone: UTC\n  misfire", "timezone: Nowhere/Special\n  misfire")
    again = directory / "z-again.yaml"
    shutil.copy(directory / "daily-triage.yaml", again)
    proc = run_check("instructions", cwd=project)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("error  instructions/a-broken.yaml: schedule.timezone: ")
    assert lines[1] == "ok  daily-triage  (instructions/daily-triage.yaml)"
    assert lines[2].startswith("  not run: context callable today ")
    assert lines[3].startswith("error  instructions/z-again.yaml: id: expected an id no other")


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_check_without_definitions_is_a_usage_error(tmp_path: Path, make: str) -> None:
    if make == "empty":
        (tmp_path / "defs").mkdir()
    proc = run_check("defs", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("salvagelane: error: defs: ")


def test_instruction_is_immutable() -> None:
    instruction: Instruction = load_instruction(BUNDLED)
    with pytest.raises(AttributeError):
        instruction.id = "other"  # type: ignore[misc]
