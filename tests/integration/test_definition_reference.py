"""docs/reference/definition.md is what the schema says, and its example is a definition
that loads and checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from salvagelane.definitions import check_instruction
from salvagelane.definitions.validation import instruction_schema
from tests.support.cli import salvagelane
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "reference" / "definition-example.yaml"


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    return load_script("definition_reference")


def test_the_reference_is_what_the_script_generates(reference: ModuleType) -> None:
    written = (ROOT / "docs" / "reference" / "definition.md").read_text(encoding="utf-8")
    assert written == reference.generated(), (
        "docs/reference/definition.md differs from the schema: run "
        "scripts/definition_reference.py --write"
    )


def _properties(node: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every property subschema anywhere in ``node``, the then/else clauses' included
    (not the ``if`` conditions: they test a value, they declare no field)."""
    if isinstance(node, dict):
        for name, child in (node.get("properties") or {}).items():
            yield f"{where}/properties/{name}", child
        for key, child in node.items():
            if key != "if":
                yield from _properties(child, f"{where}/{key}")
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _properties(child, f"{where}/{index}")


def test_every_schema_property_has_a_description() -> None:
    found = list(_properties(instruction_schema(), "#"))
    assert len(found) > 60
    undescribed = [where for where, schema in found if not schema.get("description")]
    assert undescribed == []


def test_every_field_of_the_reference_is_listed(reference: ModuleType) -> None:
    text = reference.generated()
    for path in ("id", "guardrails.max_items", "guardrails.allow_lists[].field", "sinks[].url_env"):
        assert f"| `{path}` |" in text
    assert "| `guardrails.max_depth` | integer, at least 1 | no | `32` |" in text
    assert "| `connector.api_key_env` | string | no |  |" in text


def test_the_example_definition_loads_and_checks(tmp_path: Path) -> None:
    checked = check_instruction(EXAMPLE)
    assert checked.instruction.id == "example-triage"
    assert checked.warnings == ()
    env = {
        "OPENROUTER_API_KEY": "sk-test-not-a-key",
        "TRIAGE_WEBHOOK_URL": "https://hooks.example.test/t",
        "TRIAGE_WEBHOOK_TOKEN": "t",
    }
    proc = salvagelane("check", "--strict", str(EXAMPLE.parent), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok  example-triage  ")
