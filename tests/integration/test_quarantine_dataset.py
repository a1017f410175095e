"""Corrections become data (issue 33): ``quarantine export --format jsonl`` writes one
line per reviewed item, each valid against ``schemas/quarantine-export.schema.json``, and
a fixture captured after an approval records the operator's fix (``corrections.json``)
and still replays. Through the real command line (in this process), on SQLite and
PostgreSQL.

One database per test: the bundled truncated fixture replayed twice (each run's 8th item
cut off and quarantined) and a crafted output whose 2nd item breaks the item schema. The
first truncated item is approved with a corrected 8th item, the second rejected; the
schema one stays pending and must never be exported.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import sqlalchemy as sa

from salvagelane.errors import InternalError
from salvagelane.review.approval import reject_quarantined
from salvagelane.review.dataset import export_line, export_lines
from salvagelane.runtime.executor import Executor
from salvagelane.store import QuarantineFilter, Store
from salvagelane.vocabulary import ReviewStatus
from tests.support.cli import EIGHTH, FIXTURE, ROOT, upgraded
from tests.support.cli import salvagelane_here as salvagelane
from tests.support.provider import ScriptedServer
from tests.support.run_setup import (
    Project,
    chat_answer,
    items,
    openai_connector_for,
    provider,
    store,
)

__all__ = ["provider", "store"]

SCHEMA = json.loads((ROOT / "schemas" / "quarantine-export.schema.json").read_text("utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)
RAW = (FIXTURE / "raw.txt").read_text(encoding="utf-8")
COMPLETE = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))


def _ok(*args: str, database: str) -> str:
    proc = salvagelane(*args, database=database)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _run(database: str, fixture: Path = FIXTURE) -> str:
    out = _ok("run", "daily-triage", "--replay", str(fixture), "--json", database=database)
    run_id: str = json.loads(out)["run_id"]
    return run_id


def _lines(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n") or text == ""
    lines = [json.loads(line) for line in text.splitlines()]
    for line in lines:
        VALIDATOR.validate(line)  # raises with the first problem
    return lines


@pytest.fixture
def reviewed(database_url: str, tmp_path: Path) -> dict[str, Any]:
    """The database, its runs and items: approved (alice), rejected (bob), pending."""
    database = upgraded(database_url)
    approved_run, rejected_run = _run(database), _run(database)
    crafted = tmp_path / "schema-reject"
    crafted.mkdir()
    items = [dict(item, rank=rank) for rank, item in enumerate(COMPLETE["recommendations"][:3], 1)]
    items[1]["action"] = "panic"
    document = {"summary": "Three things matter today.", "recommendations": items}
    (crafted / "raw.txt").write_text(json.dumps(document, indent=2), encoding="utf-8")
    meta = {"finish_reason": "stop", "native_finish_reason": "stop", "model": "crafted"}
    (crafted / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    pending_run = _run(database, crafted)
    held = {
        item["run_id"]: item["id"]
        for item in json.loads(_ok("quarantine", "list", "--json", database=database))
    }
    corrected = tmp_path / "eighth.json"
    corrected.write_text(json.dumps(EIGHTH), encoding="utf-8")
    _ok(
        "quarantine", "approve", str(held[approved_run]), "--file", str(corrected),
        "--by", "alice", "--note", "re-typed from the ticket", database=database,
    )  # fmt: skip
    _ok(
        "quarantine", "reject", str(held[rejected_run]), "--note", "a duplicate",
        "--by", "bob", database=database,
    )  # fmt: skip
    return {
        "database": database,
        "approved": held[approved_run],
        "rejected": held[rejected_run],
        "pending": held[pending_run],
        "approved_run": approved_run,
        "rejected_run": rejected_run,
    }


def test_jsonl_export_is_one_valid_line_per_reviewed_item(
    reviewed: dict[str, Any], tmp_path: Path
) -> None:
    database = reviewed["database"]
    run = json.loads(_ok("runs", "show", reviewed["approved_run"], "--json", database=database))

    approved = salvagelane(
        "quarantine", "export", "--format", "jsonl", "--status", "approved", database=database
    )

    assert approved.returncode == 0, approved.stderr
    assert approved.stderr == "exported 1 approved item(s) to stdout\n"
    (line,) = _lines(approved.stdout)
    span = RAW[line["span_start"] : line["span_end"]]
    assert span.startswith('{\n      "rank": 8,')  # the cut-off 8th item, whole
    assert line == {
        "format": 1,
        "decision": "approved",
        "quarantine_id": reviewed["approved"],
        "run_id": reviewed["approved_run"],
        "instruction_id": "daily-triage",
        "attempt": 1,
        "source_index": 7,
        "reason": "truncated",
        "raw_text": span,
        "raw_from": "raw_output",
        "span_start": line["span_start"],
        "span_end": len(RAW),
        "sha256": line["sha256"],
        "correction_signal": {
            "code": "truncated",
            "path": "$",
            "expected": "a complete item",
            "received": "output that ends inside the item",
            "detail": f"cut at offset {len(RAW)}",
            "message": "truncated at $: expected a complete item, received output that "
            f"ends inside the item (cut at offset {len(RAW)})",
        },
        "reask": None,
        "repaired_candidate": line["repaired_candidate"],
        "corrected_item": EIGHTH,
        "approved_with": {
            "definition_sha256": run["definition_sha256"],
            "definition_version": run["definition_version"],
            "use_current": False,
        },
        "model": "reconstruction",
        "definition_sha256": run["definition_sha256"],
        "definition_version": run["definition_version"],
        "reviewed_by": "alice",
        "reviewed_at": line["reviewed_at"],
        "review_note": "re-typed from the ticket",
        "quarantined_at": line["quarantined_at"],
    }
    assert len(line["sha256"]) == 64
    assert line["repaired_candidate"]["rank"] == 8  # the best-effort repair, for contrast
    assert run["definition_version"] is not None

    rejected = _lines(
        _ok("quarantine", "export", "--format", "jsonl", "--status", "rejected", database=database)
    )
    assert [(x["quarantine_id"], x["decision"]) for x in rejected] == [
        (reviewed["rejected"], "rejected")
    ]
    assert rejected[0]["corrected_item"] is None
    assert rejected[0]["approved_with"] is None
    assert (rejected[0]["reviewed_by"], rejected[0]["review_note"]) == ("bob", "a duplicate")

    # Without --status: every reviewed item, oldest first; the pending one never.
    both = _ok("quarantine", "export", "--format", "jsonl", database=database)
    ids = [x["quarantine_id"] for x in _lines(both)]
    assert ids == sorted([reviewed["approved"], reviewed["rejected"]])
    assert reviewed["pending"] not in ids
    assert _ok(
        "quarantine", "export", "--format", "jsonl", "--reason", "schema", database=database
    ) == ""  # fmt: skip

    # --output writes the same lines into a file.
    out = tmp_path / "dataset.jsonl"
    written = salvagelane(
        "quarantine", "export", "--format", "jsonl", "--output", str(out), database=database
    )
    assert written.returncode == 0, written.stderr
    assert (written.stdout, written.stderr) == (
        "",
        f"exported 2 approved or rejected item(s) to {out}\n",
    )
    assert out.read_text(encoding="utf-8") == both

    unknown = salvagelane(
        "quarantine", "export", "--format", "jsonl", "--instruction", "nope", database=database
    )
    assert unknown.returncode == 2
    assert "nope" in unknown.stderr


def test_a_line_that_does_not_validate_is_an_internal_error_never_written(
    reviewed: dict[str, Any], tmp_path: Path
) -> None:
    database = reviewed["database"]
    engine = sa.create_engine(database)
    try:
        with engine.begin() as connection:  # a stored signal without its path
            connection.execute(
                sa.text("UPDATE quarantined_items SET error = :error WHERE id = :id"),
                {"error": json.dumps({"code": "x", "message": "x"}), "id": reviewed["approved"]},
            )
    finally:
        engine.dispose()
    out = tmp_path / "dataset.jsonl"
    out.write_text("the previous export\n", encoding="utf-8")

    failed = salvagelane(
        "quarantine", "export", "--format", "jsonl", "--output", str(out), database=database
    )

    assert failed.returncode == 1
    assert "export line does not match quarantine-export.schema.json" in failed.stderr
    assert "$.correction_signal: 'path' is a required property" in failed.stderr
    assert out.read_text(encoding="utf-8") == "the previous export\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".dataset")] == []
    with Store.open(database) as store:
        (item,) = store.quarantine.reviewed_items(QuarantineFilter(), [ReviewStatus.APPROVED])
    with pytest.raises(InternalError, match="'path' is a required property"):
        export_line(item)


def test_a_fixture_captured_after_an_approval_records_the_fix_and_replays(
    reviewed: dict[str, Any], tmp_path: Path
) -> None:
    database = reviewed["database"]
    (line,) = _lines(
        _ok("quarantine", "export", "--format", "jsonl", "--status", "approved", database=database)
    )
    fixture = tmp_path / "approved"

    exported = _ok(
        "quarantine", "export", str(reviewed["approved"]), "--to", str(fixture), database=database
    )

    assert "corrections  1 approved by an operator (corrections.json)\n" in exported
    corrections = json.loads((fixture / "corrections.json").read_text(encoding="utf-8"))
    assert corrections == {"format": 1, "corrections": [line]}
    # expected.json records what salvage did: the 7 kept items, the 8th quarantined.
    expected = json.loads((fixture / "expected.json").read_text(encoding="utf-8"))
    assert (len(expected["items"]), expected["quarantined"]) == (
        7,
        [{"index": 7, "reason": "truncated"}],
    )
    replayed = salvagelane("replay", str(fixture), database=database)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1 fixture(s): 1 same" in replayed.stdout

    # The rejected item's run: nothing fixed, no corrections.json; captured over the
    # approved one with --force, whose corrections.json must not survive.
    captured = salvagelane(
        "fixture", "capture", reviewed["rejected_run"], "--to", str(fixture), "--force",
        database=database,
    )  # fmt: skip
    assert captured.returncode == 0, captured.stderr
    assert "corrections" not in captured.stdout
    assert not (fixture / "corrections.json").exists()
    assert "1 fixture(s): 1 same" in _ok("replay", str(fixture), database=database)


def test_an_output_stored_clipped_exports_its_snippet(database_url: str, tmp_path: Path) -> None:
    """An output over max_output_bytes is quarantined whole (oversize) and stored clipped:
    its span is not all there, so the line carries the snippet and says so."""
    database = upgraded(database_url)
    big = tmp_path / "big"
    big.mkdir()
    item = dict(EIGHTH, why="y" * 1000)
    document = {"summary": "s", "recommendations": [item] * 300}
    (big / "raw.txt").write_text(json.dumps(document), encoding="utf-8")
    (big / "meta.json").write_text(json.dumps({"finish_reason": "stop"}), encoding="utf-8")
    proc = salvagelane("run", "daily-triage", "--replay", str(big), database=database)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # nothing usable
    (held,) = json.loads(_ok("quarantine", "list", "--json", database=database))
    _ok("quarantine", "reject", str(held["id"]), "--note", "too big", database=database)

    (line,) = _lines(_ok("quarantine", "export", "--format", "jsonl", database=database))

    assert (line["reason"], line["source_index"], line["decision"]) == (
        "oversize",
        None,
        "rejected",
    )
    assert line["span_end"] > 262144  # past what was stored
    assert (line["raw_from"], line["raw_text"]) == ("snippet", held["snippet"])


def test_an_item_still_rejected_after_a_re_ask_carries_both_signals(
    store: Store, provider: ScriptedServer, tmp_path: Path
) -> None:
    """retry.on: [quarantined] asked again for the 7th item and got it broken again: the
    line has the item's own signal and, under ``reask``, the follow-up's."""
    recommendations = items(7)
    good = dict(recommendations[6])
    recommendations[6] = dict(good, action="panic")
    answers = [recommendations, [dict(good, confidence=7)]]
    provider.script.extend(
        chat_answer(json.dumps({"summary": "Seven things.", "recommendations": answer}))
        for answer in answers
    )
    project = Project.create(tmp_path)
    instruction = project.instruction(
        **{
            "on: [nothing_salvaged]": "on: [nothing_salvaged, quarantined]",
            "attempts: 2": "attempts: 3",
        }
    )
    with httpx.Client() as client:
        connector_for = openai_connector_for(
            client, provider.base_url, key="sk-dataset-test-never-stored", max_attempts=1
        )
        Executor(store, connector_for=connector_for).run(instruction)
    (held,) = store.quarantine.list_quarantine()
    reject_quarantined(store, held.id, actor="carol", note="broken twice", now=held.created_at)

    (text,) = export_lines(store, QuarantineFilter(), [ReviewStatus.REJECTED])

    (line,) = _lines(text + "\n")
    assert (line["source_index"], line["correction_signal"]["path"]) == (6, "$.action")
    assert line["reask"]["attempt"] == 2
    (signal,) = line["reask"]["signals"]
    assert (signal["reason"], signal["path"]) == ("schema", "$.confidence")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--format", "jsonl", "--status", "pending"), "'pending' is not one of"),
        (("--format", "jsonl", "1"), "takes no ID, --to or --force"),
        (("1",), "needs the item's ID and --to DIR"),
        (("1", "--to", "x", "--status", "approved"), "--status: only with --format jsonl"),
        (("--format", "csv"), "'csv' is not one of"),
    ],
)
def test_export_refuses_options_that_do_not_go_together(
    args: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    proc = salvagelane("quarantine", "export", *args, database=f"sqlite:///{tmp_path / 'none.db'}")
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tmp_path / "none.db").exists()


def _kind(field: dict[str, Any]) -> str:
    if "const" in field:
        return f"`{json.dumps(field['const'])}`"
    if "enum" in field:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in field["enum"])
    if "oneOf" in field:
        return "object \\| null"
    kind = field.get("type")
    if kind is None:
        return "any JSON"
    return " \\| ".join(kind) if isinstance(kind, list) else str(kind)


def _table(fields: dict[str, Any]) -> str:
    rows = ["| field | type | meaning |", "| --- | --- | --- |"]
    for name, field in fields.items():
        meaning = field["description"].replace("|", "\\|")
        rows.append(f"| `{name}` | {_kind(field)} | {meaning} |")
    return "\n".join(rows)


def test_the_schema_is_documented_and_shipped() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["additionalProperties"] is False
    assert SCHEMA["required"] == list(SCHEMA["properties"])  # every field, always
    page = (ROOT / "docs" / "reference" / "quarantine-export.md").read_text("utf-8")
    # The page's tables are the schema's descriptions: a field changed in one only fails.
    assert _table(SCHEMA["properties"]) in page
    assert _table(SCHEMA["properties"]["correction_signal"]["properties"]) in page
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert include["schemas/quarantine-export.schema.json"] == (
        "salvagelane/quarantine-export.schema.json"
    )
