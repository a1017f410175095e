"""Sinks against the real file system and real imports: JSON files, callables, build_sinks.

Delivering to a run's sinks, whatever fails on the way, is tested through the outbox in
test_deliveries.py.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _sink_targets
import httpx
import pytest

from salvagelane.definitions.model import SinkKind, SinkSpec
from salvagelane.errors import ConfigurationError, SinkError
from salvagelane.sinks import (
    CallableSink,
    JsonFileSink,
    WebhookSink,
    build_sinks,
)
from salvagelane.sinks import json_file as json_file_module

PAYLOAD: dict[str, Any] = {
    "run_id": "2026-11-21T0700-ab12",
    "instruction": "daily-triage",
    "status": "partial",
    "partial": True,
    "finish_reason": "length",
    "counts": {"kept": 2, "quarantined": 1},
    "envelope": {"summary": "Two workstreams need attention."},
    "items": [
        {"title": "Fix the flaky deploy", "priority": 1},
        {"title": "Answer the audit", "priority": 2},
    ],
}


@pytest.fixture(autouse=True)
def _fresh_targets() -> Iterator[None]:
    _sink_targets.received.clear()
    yield
    _sink_targets.received.clear()


def _payload(**changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(PAYLOAD), **changes}


def _leftovers(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.endswith(".tmp"))


# --- JSON file sink ------------------------------------------------------------------------


def test_json_file_sink_fills_placeholders_creates_directories_and_writes_pretty_json(
    tmp_path: Path,
) -> None:
    sink = JsonFileSink(tmp_path / "reports" / "{instruction}" / "{run_id}.json")
    payload = _payload()

    sink.deliver(payload)

    written = tmp_path / "reports" / "daily-triage" / "2026-11-21T0700-ab12.json"
    text = written.read_text(encoding="utf-8")
    assert json.loads(text) == PAYLOAD
    assert text.startswith('{\n  "run_id"')
    assert text.endswith("}\n")
    assert payload == PAYLOAD
    assert _leftovers(written.parent) == []
    assert sink.target == str(tmp_path / "reports" / "{instruction}" / "{run_id}.json")


def test_json_file_sink_writes_through_a_temporary_file_in_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = tmp_path / "daily-triage.json"
    destination.write_text('{"old": true}\n', encoding="utf-8")
    seen: list[tuple[Path, Path, str, str]] = []
    real_replace = os.replace

    def watching_replace(source: Any, target: Any) -> None:
        # At the rename the new report is complete and the old one still untouched.
        seen.append(
            (Path(source), Path(target), Path(source).read_text("utf-8"), destination.read_text())
        )
        real_replace(source, target)

    monkeypatch.setattr(json_file_module.os, "replace", watching_replace)
    JsonFileSink(tmp_path / "{instruction}.json").deliver(_payload())

    ((source, target, new_text, old_text),) = seen
    assert source.parent == target.parent == tmp_path
    assert source != target
    assert target == destination
    assert json.loads(new_text) == PAYLOAD
    assert old_text == '{"old": true}\n'
    assert json.loads(destination.read_text(encoding="utf-8")) == PAYLOAD
    assert _leftovers(tmp_path) == []


def test_json_file_sink_keeps_the_old_report_when_the_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = tmp_path / "daily-triage.json"
    destination.write_text('{"old": true}\n', encoding="utf-8")

    def failing_replace(source: Any, target: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json_file_module.os, "replace", failing_replace)
    with pytest.raises(SinkError, match="could not write the report") as caught:
        JsonFileSink(tmp_path / "{instruction}.json").deliver(_payload())

    assert caught.value.target == str(destination)
    assert isinstance(caught.value.__cause__, OSError)
    assert destination.read_text(encoding="utf-8") == '{"old": true}\n'
    assert _leftovers(tmp_path) == []


def test_json_file_sink_reads_the_run_id_from_the_configured_field(tmp_path: Path) -> None:
    sink = JsonFileSink(tmp_path / "{run_id}.json", run_id_field="attempt_id")

    sink.deliver(_payload(attempt_id=42))

    assert json.loads((tmp_path / "42.json").read_text(encoding="utf-8"))["attempt_id"] == 42


def test_escaped_braces_are_literal(tmp_path: Path) -> None:
    JsonFileSink(tmp_path / "{{literal}}-{run_id}.json").deliver(_payload(run_id="r1"))

    assert (tmp_path / "{literal}-r1.json").is_file()


@pytest.mark.parametrize(
    ("template", "shown"),
    [
        ("reports/{date}.json", "{date}"),
        ("reports/{}.json", "{}"),
        ("reports/{0}.json", "{0}"),
        ("reports/{run_id:>12}.json", "{run_id:>12}"),
        ("reports/{run_id!r}.json", "{run_id!r}"),
        ("reports/{run_id.hex}.json", "{run_id.hex}"),
        ("reports/{instruction[0]}.json", "{instruction[0]}"),
    ],
)
def test_unknown_or_formatted_placeholders_are_a_configuration_error(
    template: str, shown: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        JsonFileSink(Path(template))

    message = str(caught.value)
    assert template in message
    assert "expected only the placeholders {run_id}, {instruction}" in message
    assert f"got {shown}" in message


def test_a_malformed_template_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="malformed template"):
        JsonFileSink(Path("reports/{run_id.json"))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("run_id", "../../escaped"),
        ("run_id", ".."),
        ("run_id", "a/b"),
        ("run_id", "/etc/passwd"),
        ("run_id", "a\\b"),
        ("run_id", "x..y"),
        ("run_id", ""),
        ("instruction", "../daily"),
        ("instruction", "nested/name"),
    ],
)
def test_a_payload_value_that_could_leave_the_directory_is_refused(
    tmp_path: Path, field: str, value: str
) -> None:
    reports = tmp_path / "reports"
    sink = JsonFileSink(reports / "{instruction}-{run_id}.json")

    with pytest.raises(
        SinkError, match=f"expected the payload's '{field}' to be a plain"
    ) as caught:
        sink.deliver(_payload(**{field: value}))

    assert caught.value.target == sink.target
    assert list(tmp_path.rglob("*")) == []


@pytest.mark.parametrize("value", [None, True, 1.5, ["r1"]])
def test_a_run_id_that_is_not_a_string_or_integer_is_refused(tmp_path: Path, value: Any) -> None:
    with pytest.raises(SinkError, match="expected the payload's 'run_id' to be a string"):
        JsonFileSink(tmp_path / "{run_id}.json").deliver(_payload(run_id=value))


def test_an_unwritable_directory_is_a_sink_error_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "reports"
    blocker.write_text("a file where the directory should be", encoding="utf-8")
    sink = JsonFileSink(blocker / "{run_id}.json")

    with pytest.raises(SinkError) as caught:
        sink.deliver(_payload(run_id="r1"))

    expected_path = str(blocker / "r1.json")
    assert caught.value.target == expected_path
    assert str(caught.value).startswith(f"{expected_path}: could not write the report")
    assert isinstance(caught.value.__cause__, OSError)


def test_a_payload_that_is_not_json_is_a_sink_error(tmp_path: Path) -> None:
    sink = JsonFileSink(tmp_path / "{run_id}.json")

    with pytest.raises(SinkError, match="expected a JSON-ready payload"):
        sink.deliver(_payload(run_id="r1", counts={"ratio": float("nan")}))

    assert not (tmp_path / "r1.json").exists()


# --- Callable sink -------------------------------------------------------------------------


def test_callable_sink_passes_the_payload() -> None:
    CallableSink("_sink_targets:record").deliver(_payload())

    assert _sink_targets.received == [PAYLOAD]


def test_callable_sink_resolves_a_dotted_name() -> None:
    CallableSink("_sink_targets:Consumer.take").deliver(_payload())

    assert _sink_targets.received == [PAYLOAD]


def test_callable_sink_hands_over_a_deep_copy_the_function_cannot_alter_the_report() -> None:
    payload = _payload()

    CallableSink("_sink_targets:tamper").deliver(payload)

    assert payload == PAYLOAD  # nested lists and dicts included
    (given,) = _sink_targets.received
    assert given["status"] == "tampered"
    assert given is not payload


def test_an_exception_in_the_function_becomes_a_sink_error() -> None:
    with pytest.raises(SinkError) as caught:
        CallableSink("_sink_targets:refuse").deliver(_payload(run_id="r9"))

    assert str(caught.value) == (
        "callable sink _sink_targets:refuse: the function raised "
        "RuntimeError: downstream refused run r9"
    )
    assert caught.value.target == "_sink_targets:refuse"
    assert isinstance(caught.value.__cause__, RuntimeError)


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        (
            "salvagelane_no_such_module:deliver",
            "expected an importable module 'salvagelane_no_such_module', got ModuleNotFoundError",
        ),
        ("_sink_targets:missing", "expected '_sink_targets' to have 'missing'"),
        ("_sink_targets:Consumer.gone", "got no attribute 'gone'"),
        ("_sink_targets:not_callable", "expected a callable, got a int"),
    ],
)
def test_an_unusable_reference_is_a_sink_error_at_delivery(reference: str, expected: str) -> None:
    sink = CallableSink(reference)  # imported lazily: constructing it does not fail

    with pytest.raises(SinkError) as caught:
        sink.deliver(_payload())

    assert str(caught.value).startswith(f"callable sink {reference}: ")
    assert expected in str(caught.value)
    assert caught.value.target == reference


@pytest.mark.parametrize("reference", ["no_colon", ":function", "module:", "module:a..b"])
def test_a_malformed_reference_is_a_configuration_error(reference: str) -> None:
    with pytest.raises(ConfigurationError, match="expected 'module:function'"):
        CallableSink(reference)


# --- build_sinks ---------------------------------------------------------------------------


def test_build_sinks_makes_one_sink_per_spec_in_order(tmp_path: Path) -> None:
    specs = [
        SinkSpec(kind=SinkKind.JSON_FILE, path=tmp_path / "{run_id}.json"),
        SinkSpec(kind=SinkKind.WEBHOOK, url="https://hooks.example.test/reports"),
        SinkSpec(kind=SinkKind.CALLABLE, callable="_sink_targets:record"),
    ]
    with httpx.Client() as client:
        sinks = build_sinks(specs, client=client)

    assert [type(sink) for sink in sinks] == [JsonFileSink, WebhookSink, CallableSink]
    assert sinks[0].target == str(tmp_path / "{run_id}.json")
    assert sinks[2].target == "_sink_targets:record"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (SinkSpec(kind=SinkKind.JSON_FILE), "sinks[0] (json_file): expected a path"),
        (SinkSpec(kind=SinkKind.WEBHOOK), "sinks[0] (webhook): expected a url"),
        (SinkSpec(kind=SinkKind.CALLABLE), "sinks[0] (callable): expected a callable"),
    ],
)
def test_build_sinks_refuses_a_spec_without_its_destination(spec: SinkSpec, expected: str) -> None:
    with httpx.Client() as client, pytest.raises(ConfigurationError, match=re.escape(expected)):
        build_sinks([spec], client=client)
