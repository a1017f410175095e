"""The ``salvagelane salvage`` command, run as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from salvagelane.core import speedups

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
ITEM_SCHEMA = ROOT / "schemas" / "daily-triage-item.schema.json"
REPORT_SCHEMA = ROOT / "schemas" / "daily-triage-report.schema.json"

DEMO_ARGS = [
    "salvage",
    "--schema",
    str(ITEM_SCHEMA),
    "--items",
    "recommendations",
    "--max-items",
    "7",
    "--rank-key",
    "rank",
    "--allow",
    f"candidate={FIXTURE / 'workstreams.txt'}",
    "--finish-reason",
    "length",
]


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "salvagelane", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_daily_triage_fixture_keeps_seven_and_quarantines_the_cut_eighth() -> None:
    proc = run_cli(*DEMO_ARGS, str(FIXTURE / "raw.txt"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "partial"
    assert result["partial"] is True
    assert result["truncated"] is True
    assert result["document_valid"] is False
    assert result["finish_reason"] == "length"
    assert [item["data"]["rank"] for item in result["items"]] == [1, 2, 3, 4, 5, 6, 7]
    assert result["envelope"]["summary"].startswith("Sixteen active workstreams")
    [quarantined] = result["quarantined"]
    assert quarantined["reason"] == "truncated"
    assert quarantined["index"] == 7
    assert quarantined["repaired"]["rank"] == 8  # shown to the operator, never accepted
    assert result["counts"] == {
        "candidates": 8,
        "accepted": 7,
        "quarantined": 1,
        "by_reason": {"truncated": 1},
    }
    raw = (FIXTURE / "raw.txt").read_text(encoding="utf-8")
    complete = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))
    for item in result["items"]:
        start, end = item["span"]
        assert json.loads(raw[start:end]) == item["data"]
        assert item["data"] == complete["recommendations"][item["index"]]
    # The JSON breaks inside the 8th recommendation, near character 5,268.
    assert 5200 <= quarantined["span"][1] <= 5340


def test_summary_output_reads_as_a_report() -> None:
    proc = run_cli(*DEMO_ARGS, "--summary", str(FIXTURE / "raw.txt"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert "status       partial" in out
    assert "accepted     7 of 8 candidates" in out
    assert "quarantined  1 (truncated: 1)" in out
    assert "best-effort repair attached (not accepted)" in out


def test_reads_stdin_when_no_file_is_given() -> None:
    raw = b'Sure!\n{"summary": "s", "recommendations": []}'
    proc = run_cli("salvage", "--schema", str(ITEM_SCHEMA), "--items", "recommendations", stdin=raw)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "ok"
    assert result["envelope"] == {"summary": "s"}
    assert result["document_valid"] is False  # prose before the JSON


def test_complete_report_validates_against_the_report_schema_refs() -> None:
    proc = run_cli(
        "salvage",
        "--schema",
        str(REPORT_SCHEMA),
        "--schema-ref",
        str(ITEM_SCHEMA),
        "--items",
        "",
        stdin=b"[" + (FIXTURE / "complete.json").read_bytes() + b"]",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["counts"]["accepted"] == 1
    assert result["document_valid"] is True


def test_batch_writes_one_line_per_input_line_in_order() -> None:
    lines = [
        {"raw": '{"items": [{"a": 1}, {"a": 2}]}', "finish_reason": "stop"},
        {"raw": '{"items": [{"a": 1}, {"a": 2', "finish_reason": "max_tokens"},
        "not an object",
        {"raw": "\ud800 lone surrogate", "finish_reason": None},
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines).encode()
    schema = ROOT / "tests" / "fixtures" / "schemas" / "any-object.schema.json"
    proc = run_cli("salvage", "--schema", str(schema), "--items", "items", "--batch", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert len(out) == 4
    assert out[0]["status"] == "ok"
    assert out[0]["counts"]["accepted"] == 2
    assert out[1]["status"] == "partial"
    assert out[1]["finish_reason"] == "length"
    assert out[1]["counts"]["by_reason"] == {"truncated": 1}
    assert out[2] == {
        "line": 3,
        "error": 'expected a JSON object {"raw": string, "finish_reason": string|null}',
    }
    assert out[3]["status"] == "failed"


def test_batch_lines_are_ascii_whatever_the_output_held() -> None:
    # Result lines are written by orjson when they are ASCII; a line that would carry a
    # raw bidirectional override, an accent or a 30-digit integer is written escaped.
    raws = [
        '{"items": [{"a": "caf\u00e9 \u202e"}]} trailing \u202e',
        '{"items": [{"a": 123456789012345678901234567890}]}',
        '{"items": [{"a": 1.5, "b": [true, null]}]}',
    ]
    stdin = "".join(json.dumps({"raw": raw}) + "\n" for raw in raws).encode()
    schema = ROOT / "tests" / "fixtures" / "schemas" / "any-object.schema.json"
    proc = run_cli("salvage", "--schema", str(schema), "--items", "items", "--batch", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.isascii()
    out = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [[item["data"] for item in result["items"]] for result in out] == [
        [{"a": "caf\u00e9 \u202e"}],
        [{"a": 123456789012345678901234567890}],
        [{"a": 1.5, "b": [True, None]}],
    ]
    assert "\\u202e" in proc.stdout.decode().splitlines()[0]


def test_batch_summary_prints_a_line_per_input_line_and_the_totals() -> None:
    """Issue 13: --batch --summary printed JSON lines, silently ignoring --summary."""
    lines = [
        {"raw": '{"items": [{"a": 1}, {"a": 2}]}', "finish_reason": "stop"},
        {"raw": '{"items": [{"a": 1}, {"a": 2', "finish_reason": "max_tokens"},
        "not an object",
        {"raw": "nothing", "finish_reason": None},
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines).encode()
    schema = ROOT / "tests" / "fixtures" / "schemas" / "any-object.schema.json"
    proc = run_cli(
        "salvage", "--schema", str(schema), "--items", "items", "--batch", "--summary", stdin=stdin
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().splitlines() == [
        "line 1     ok       accepted 2 of 2 candidates, quarantined 0",
        "line 2     partial  accepted 1 of 2 candidates, quarantined 1 (truncated: 1); "
        "output truncated; items array not closed",
        'line 3     error    expected a JSON object {"raw": string, "finish_reason": string|null}',
        "line 4     failed   accepted 0 of 0 candidates, quarantined 0; "
        "items array 'items' not found",
        "total      4 line(s): 1 ok, 1 partial, 1 failed, 1 unreadable; "
        "accepted 3 of 4 candidates, quarantined 1 (truncated: 1)",
    ]


def test_bytes_that_are_not_utf8_are_named_as_bytes_with_their_offset(tmp_path: Path) -> None:
    """Issue 13: a Latin-1 0xE9 in model output read "lone surrogate U+DCE9" (the text is
    decoded with surrogateescape); input files said "not UTF-8 text (byte 6)"."""
    schema = tmp_path / "any.schema.json"
    schema.write_text('{"type": "object"}', encoding="utf-8")
    output = tmp_path / "raw.txt"
    output.write_bytes(b'[{"id": 1, "t": "caf\xe9"}, {"id": 2}]')

    summary = run_cli("salvage", "--schema", str(schema), "--items", "", "--summary", str(output))
    assert summary.returncode == 0, summary.stderr
    text = summary.stdout.decode()
    assert (
        "item 1: malformed at $.t: expected a string of valid UTF-8, "
        "received byte 0xE9 at offset 20"
    ) in text
    assert "surrogate" not in text.lower()
    assert "accepted     1 of 2 candidates" in text  # the same verdict as before

    as_json = run_cli("salvage", "--schema", str(schema), "--items", "", str(output))
    (quarantined,) = json.loads(as_json.stdout)["quarantined"]
    assert quarantined["error"]["code"] == "invalid_utf8"

    allow = tmp_path / "allowed.txt"
    allow.write_bytes(b"ok\ncaf\xe9\n")
    refused = run_cli(
        "salvage", "--schema", str(schema), "--items", "", f"--allow=t={allow}", str(output)
    )
    assert refused.returncode == 2
    assert refused.stderr.decode() == (
        f"salvagelane: error: allow-list {allow}: not UTF-8 text: "
        "byte 0xE9 at offset 6 is not valid UTF-8\n"
    )

    latin_schema = tmp_path / "latin.schema.json"
    latin_schema.write_bytes(b'{"description": "caf\xe9"}')
    refused = run_cli("salvage", "--schema", str(latin_schema), "--items", "", str(output))
    assert refused.returncode == 2
    assert "not UTF-8 text: byte 0xE9 at offset 20 is not valid UTF-8" in refused.stderr.decode()

    definitions = tmp_path / "instructions"
    definitions.mkdir()
    (definitions / "latin.yaml").write_bytes(b"id: latin\ndescription: caf\xe9\n")
    checked = run_cli("check", str(definitions))
    assert checked.returncode == 1
    assert "expected UTF-8 text: byte 0xE9 at offset 26 is not valid UTF-8" in (
        checked.stdout.decode()
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(
            ["--schema", "no/such/schema.json", "--items", "x"],
            "schema no/such/schema.json: cannot read",
            id="missing-schema-file",
        ),
        pytest.param(
            ["--schema", "{bad_json}", "--items", "x"],
            "not valid JSON at line 1 column 3",
            id="schema-not-json",
        ),
        pytest.param(
            ["--schema", "{not_a_schema}", "--items", "x"],
            "not a valid JSON Schema at type",
            id="schema-invalid",
        ),
        pytest.param(
            ["--schema", "{remote_ref}", "--items", "x"],
            "never fetches remote schemas",
            id="schema-remote-ref",
        ),
        pytest.param(
            ["--schema", "{schema}", "--items", "x", "--allow", "candidate=no/such/file.txt"],
            "allow-list no/such/file.txt: cannot read",
            id="unreadable-allow-list",
        ),
        pytest.param(
            ["--schema", "{schema}", "--items", "x", "--allow", "candidate"],
            "expected FIELD=FILE",
            id="allow-without-file",
        ),
        pytest.param(
            ["--schema", "{schema}", "--items", "a..b"],
            "empty key between dots",
            id="bad-items-path",
        ),
        pytest.param(
            ["--schema", "{schema}", "--items", "x", "--max-items", "many"],
            "'many' is not a valid integer",
            id="bad-option-value",
        ),
        pytest.param(
            ["--schema", "{schema}", "--items", "x", "--batch", "some-file.txt"],
            "--batch reads stdin",
            id="batch-with-file",
        ),
    ],
)
def test_unusable_options_exit_2_with_one_line(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    files = {
        "{bad_json}": "{ nope",
        "{not_a_schema}": '{"type": 12}',
        "{remote_ref}": '{"$ref": "http://127.0.0.1:9/evil.json"}',
        "{schema}": '{"type": "object"}',
    }
    resolved = []
    for arg in args:
        if arg in files:
            path = tmp_path / "schema.json"
            path.write_text(files[arg])
            arg = str(path)
        resolved.append(arg)
    proc = run_cli("salvage", *resolved, stdin=b"[]")
    stderr = proc.stderr.decode()
    assert proc.returncode == 2
    assert stderr.startswith("salvagelane: error: ")
    assert needle in stderr
    assert stderr.count("\n") == 1
    assert proc.stdout == b""


def test_version_and_help() -> None:
    version = run_cli("--version")
    assert version.returncode == 0
    assert b"salvagelane, version 0.1.0" in version.stdout
    assert (b"scan loops: compiled" in version.stdout) == speedups.COMPILED
    helptext = run_cli("salvage", "--help")
    assert helptext.returncode == 0
    assert b"--max-items" in helptext.stdout
