"""``salvagelane quarantine`` through the real command line (in this process), on SQLite and
PostgreSQL.

Runs come from the bundled truncated fixture (7 kept items, the 8th cut off and
quarantined) and from a fixture written here whose 2nd recommendation has an action the
item schema does not allow.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from salvagelane.store import Store
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.cli import (
    EIGHTH,
    FIXTURE,
    ROOT,
    clean_env,
    command,
    upgraded,
)
from tests.support.cli import (
    salvagelane_here as salvagelane,
)
from tests.support.history import seed

COMPLETE = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))


def run_fixture(database: str, fixture: Path = FIXTURE) -> str:
    proc = salvagelane("run", "daily-triage", "--replay", str(fixture), "--json", database=database)
    assert proc.returncode == 0, proc.stderr
    run_id: str = json.loads(proc.stdout)["run_id"]
    return run_id


def listed(database: str, *args: str) -> list[dict[str, Any]]:
    proc = salvagelane("quarantine", "list", "--json", *args, database=database)
    assert proc.returncode == 0, proc.stderr
    items: list[dict[str, Any]] = json.loads(proc.stdout)
    return items


def report_of(database: str, run_id: str) -> dict[str, Any]:
    proc = salvagelane("runs", "show", run_id, "--json", database=database)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)["report"]
    return report


@pytest.fixture
def schema_fixture(tmp_path: Path) -> Path:
    """A complete answer of three recommendations; the 2nd has action "panic"."""
    items = [dict(item, rank=rank) for rank, item in enumerate(COMPLETE["recommendations"][:3], 1)]
    items[1]["action"] = "panic"
    fixture = tmp_path / "schema-reject"
    fixture.mkdir()
    document = {"summary": "Three things matter today.", "recommendations": items}
    (fixture / "raw.txt").write_text(json.dumps(document, indent=2), encoding="utf-8")
    meta = {"finish_reason": "stop", "native_finish_reason": "stop", "model": "crafted"}
    (fixture / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return fixture


def test_list_is_newest_first_and_show_marks_the_span(
    database_url: str, schema_fixture: Path
) -> None:
    database = upgraded(database_url)
    truncated_run = run_fixture(database)
    schema_run = run_fixture(database, schema_fixture)

    table = salvagelane("quarantine", "list", database=database)

    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:9] == [
        "ID", "CREATED", "(UTC)", "INSTRUCTION", "RUN", "ITEM", "REASON", "STATUS", "ERROR",
    ]  # fmt: skip
    # ITEM numbers the output's items from 1, as every text does (ADR 0018).
    assert [row.split()[4:7] for row in rows] == [
        [schema_run[:8], "2", "schema"],
        [truncated_run[:8], "8", "truncated"],
    ]
    assert "schema at $.action: expected one of" in rows[0]
    items = listed(database)
    assert [item["id"] for item in items] == sorted((item["id"] for item in items), reverse=True)
    assert [item["reason"] for item in listed(database, "--reason", "truncated")] == ["truncated"]
    assert listed(database, "--status", "approved") == []
    assert len(listed(database, "--since", "2000-01-01", "--limit", "1")) == 1
    assert listed(database, "--since", "2999-01-01T00:00:00Z") == []
    assert listed(database, "--reason", "allow_list") == []  # a reason that matches nothing
    bad_since = salvagelane("quarantine", "list", "--since", "yesterday", database=database)
    assert bad_since.returncode == 2
    assert "expected a date" in bad_since.stderr

    show = salvagelane("quarantine", "show", str(items[1]["id"]), database=database)

    assert show.returncode == 0, show.stderr
    out = show.stdout
    assert f"run          {truncated_run}  (partial), attempt 1" in out
    assert "model        reconstruction, finish length" in out
    assert "  path       $\n" in out
    # The span is marked inside the raw text around it: the 7th item ends just before.
    context = out.split("(the item between ⟦ and ⟧):\n", 1)[1]
    before, marked = context.split("⟦", 1)
    assert '"score": 7.2' in before
    assert marked.startswith('{\n      "rank": 8,')
    assert marked.split("⟧", 1)[0].endswith("[pg_part")
    assert "repaired candidate (for review; never accepted on its own):" in out
    assert "review       pending" in out
    detail = json.loads(
        salvagelane("quarantine", "show", str(items[1]["id"]), "--json", database=database).stdout
    )
    assert detail["provenance"]["attempt"] == 1
    assert detail["raw_span"].startswith('{\n      "rank": 8,')


def test_approve_checks_the_guardrails_and_audits_every_attempt(
    database_url: str, tmp_path: Path
) -> None:
    database = upgraded(database_url)
    run_id = run_fixture(database)
    (held,) = listed(database)
    qid = str(held["id"])

    def approve(item: dict[str, Any], *args: str) -> Any:
        path = tmp_path / "item.json"
        path.write_text(json.dumps(item), encoding="utf-8")
        return salvagelane(
            "quarantine", "approve", qid, "--file", str(path), "--by", "alice", *args,
            database=database,
        )  # fmt: skip

    wrong_schema = approve(dict(EIGHTH, action="panic"))
    assert wrong_schema.returncode == 1
    assert "reason    schema" in wrong_schema.stderr
    assert "path      $.action" in wrong_schema.stderr
    assert 'received  "panic"' in wrong_schema.stderr
    wrong_list = approve(dict(EIGHTH, candidate="made-up-stream"))
    assert wrong_list.returncode == 1
    assert "reason    allow_list" in wrong_list.stderr
    assert "path      $.candidate" in wrong_list.stderr
    # With max_items lowered to 7 in a copy of the definition and --use-current, a correct
    # 8th item breaks it: the report already holds 7, and an operator's item never
    # displaces a kept one.
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    definition = tmp_path / "instructions" / "daily-triage.yaml"
    text = definition.read_text(encoding="utf-8")
    assert "  max_items: 8\n" in text
    definition.write_text(text.replace("max_items: 8", "max_items: 7"), encoding="utf-8")
    instructions = ("--instructions", str(tmp_path / "instructions"), "--note", "re-typed")
    too_many = approve(EIGHTH, *instructions, "--use-current")
    assert too_many.returncode == 1
    assert "reason    over_limit" in too_many.stderr
    assert "expected  at most 7 items in the report" in too_many.stderr
    assert too_many.stderr.startswith(
        f"note: using the current definition of daily-triage ({definition}), not the version "
        f"run {run_id[:8]} was made with (stored "
    )
    report = report_of(database, run_id)
    assert (len(report["items"]), report["partial"], report["counts"]["accepted"]) == (7, True, 7)
    assert listed(database)[0]["review_status"] == "pending"

    # Without --use-current the run's own version (stored with it, max_items 8) decides,
    # whatever --instructions holds: the same item passes.
    approved = approve(EIGHTH, *instructions)

    assert approved.returncode == 0, approved.stderr
    assert approved.stderr == ""
    # Nothing is held back any more, but the model's output was cut off: the run and its
    # report stay partial, and every view says so.
    assert approved.stdout == (
        f"approved #{qid}: added to the report of run {run_id[:8]} (8 items now)\n"
        f"run {run_id[:8]}: partial, kept 8 of 8 candidates, quarantined 0; the model's "
        "output was cut off (truncated): no review makes it ok; 1 item approved by an "
        "operator (origin operator)\n"
    )
    report = report_of(database, run_id)
    assert [item["origin"] for item in report["items"]] == ["model"] * 7 + ["operator"]
    assert report["items"][-1]["data"] == EIGHTH
    assert (report["status"], report["partial"]) == ("partial", True)
    assert report["counts"] == {
        "candidates": 8,
        "accepted": 8,
        "quarantined": 0,
        "by_reason": {},
        "envelope_issues": 0,
        "operator_approved": 1,
    }
    detail = json.loads(salvagelane("quarantine", "show", qid, "--json", database=database).stdout)
    assert (detail["review_status"], detail["reviewed_by"]) == ("approved", "alice")
    trail = [(r["action"], (r["error"] or {}).get("reason")) for r in detail["reviews"]]
    assert trail == [
        ("approve_refused", "schema"),
        ("approve_refused", "allow_list"),
        ("approve_refused", "over_limit"),
        ("approve", None),
    ]
    shown = salvagelane("quarantine", "show", qid, database=database).stdout
    assert "audit trail (4)" in shown
    assert "approve         by alice: re-typed" in shown

    again = approve(EIGHTH, *instructions, "--use-current")
    assert again.returncode == 2
    assert "expected a pending item, it is approved" in again.stderr
    reject = salvagelane("quarantine", "reject", qid, "--note", "x", database=database)
    assert reject.returncode == 2
    assert "cannot reject" in reject.stderr
    unknown = salvagelane("quarantine", "approve", "424242", "--stdin", database=database)
    assert unknown.returncode == 2
    assert "no quarantined item with id 424242" in unknown.stderr
    both = salvagelane("quarantine", "approve", qid, "--stdin", "--edit", database=database)
    assert both.returncode == 2
    assert "exactly one of --edit, --file, --stdin" in both.stderr


def test_approve_in_the_editor_clears_partial_under_the_bundled_definition(
    database_url: str, schema_fixture: Path, tmp_path: Path
) -> None:
    database = upgraded(database_url)
    run_id = run_fixture(database, schema_fixture)
    (held,) = listed(database)
    assert (held["reason"], held["repaired"]) == ("schema", None)
    corrected = dict(COMPLETE["recommendations"][1], rank=2)
    saved = tmp_path / "corrected.json"
    saved.write_text(json.dumps(corrected, indent=2), encoding="utf-8")
    # click.edit runs `$EDITOR "<file>"` through the shell: this editor saves our text.
    editor = (
        f'{sys.executable} -c "import shutil,sys; shutil.copy(sys.argv[1], sys.argv[2])" {saved}'
    )

    approved = salvagelane(
        "quarantine", "approve", str(held["id"]), "--edit", "--by", "bob",
        database=database, env={"EDITOR": editor, "VISUAL": editor},
    )  # fmt: skip

    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines()[1] == (
        f"run {run_id[:8]}: ok, kept 3 of 3 candidates, quarantined 0; "
        "1 item approved by an operator (origin operator)"
    )
    assert approved.stderr == ""  # the bundled definition is the one the run used
    report = report_of(database, run_id)
    assert (report["status"], report["partial"]) == ("ok", False)
    assert report["items"][-1]["data"] == corrected
    assert report["counts"]["by_reason"] == {}


def test_reject_note_and_bulk_reject(database_url: str, schema_fixture: Path) -> None:
    database = upgraded(database_url)
    first, second = run_fixture(database), run_fixture(database)
    run_fixture(database, schema_fixture)
    truncated = listed(database, "--reason", "truncated")
    schema = listed(database, "--reason", "schema")
    assert [item["run_id"] for item in truncated] == [second, first]

    noted = salvagelane(
        "quarantine", "note", str(schema[0]["id"]), "ask the owner", "--by", "carol",
        database=database,
    )  # fmt: skip
    assert noted.returncode == 0, noted.stderr
    assert noted.stdout == f"noted #{schema[0]['id']} [pending]\n"
    rejected = salvagelane(
        "quarantine", "reject", str(truncated[1]["id"]), "--note", "old run", database=database
    )
    assert rejected.returncode == 0, rejected.stderr
    assert rejected.stdout.startswith(f"rejected #{truncated[1]['id']} (truncated, run ")
    no_note = salvagelane("quarantine", "reject", str(truncated[0]["id"]), database=database)
    assert no_note.returncode == 2

    declined = salvagelane(
        "quarantine", "list", "--reason", "truncated", "--reject-all", "--note", "noise",
        database=database, input="n\n",
    )  # fmt: skip
    assert declined.returncode == 1  # declined: nothing changed
    assert "reject 1 pending quarantined item(s) (reason truncated)?" in declined.stderr
    bulk = salvagelane(
        "quarantine", "list", "--reason", "truncated", "--reject-all", "--note", "noise",
        "--yes", "--by", "dave", database=database,
    )  # fmt: skip

    assert bulk.returncode == 0, bulk.stderr
    assert bulk.stdout == "rejected 1 pending item(s)\n"
    statuses = {item["id"]: item["review_status"] for item in listed(database)}
    assert statuses == {
        truncated[0]["id"]: "rejected",
        truncated[1]["id"]: "rejected",
        schema[0]["id"]: "pending",
    }
    detail = json.loads(
        salvagelane(
            "quarantine", "show", str(truncated[0]["id"]), "--json", database=database
        ).stdout
    )
    assert [(r["action"], r["actor"], r["note"]) for r in detail["reviews"]] == [
        ("bulk_reject", "dave", "noise")
    ]
    schema_detail = json.loads(
        salvagelane("quarantine", "show", str(schema[0]["id"]), "--json", database=database).stdout
    )
    assert [(r["action"], r["actor"]) for r in schema_detail["reviews"]] == [("note", "carol")]
    nothing = salvagelane(
        "quarantine", "list", "--reason", "truncated", "--reject-all", "--note", "again",
        database=database,
    )  # fmt: skip
    assert nothing.stdout == "rejected 0 pending item(s)\n"
    needs_note = salvagelane("quarantine", "list", "--reject-all", "--yes", database=database)
    assert needs_note.returncode == 2
    assert "--reject-all needs --note" in needs_note.stderr


def test_export_writes_the_fixture_of_the_items_run_and_replay_reproduces_it(
    database_url: str, tmp_path: Path
) -> None:
    database = upgraded(database_url)
    run_id = run_fixture(database)
    (item,) = json.loads(salvagelane("quarantine", "list", "--json", database=database).stdout)
    to = tmp_path / "exported"

    exported = salvagelane(
        "quarantine", "export", str(item["id"]), "--to", str(to), database=database
    )

    assert exported.returncode == 0, exported.stderr
    assert f"run          {run_id}, attempt 1" in exported.stdout
    assert f"quarantined  #{item['id']} (item 8 of the output): truncated" in exported.stdout
    assert (to / "raw.txt").read_bytes() == (FIXTURE / "raw.txt").read_bytes()
    replayed = salvagelane("replay", str(to), database=database)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1 fixture(s): 1 same" in replayed.stdout
    unknown = salvagelane(
        "quarantine", "export", "999999", "--to", str(tmp_path / "x"), database=database
    )
    assert unknown.returncode == 2
    assert "999999" in unknown.stderr
    assert not (tmp_path / "x").exists()


def test_bulk_reject_rejects_only_the_items_it_asked_about(database_url: str) -> None:
    """Issue 29.7: an item quarantined while ``--reject-all`` waits for its answer is not
    among those it asked about, and stays pending."""
    database = upgraded(database_url)
    now = datetime.now(UTC)
    with Store.open(database) as store:
        asked_run = seed(
            store, at=now, status=RunStatus.PARTIAL, trigger=Trigger.MANUAL, reasons=("truncated",)
        )
        [asked_item] = [q.id for q in store.get_run(asked_run).quarantined]
    proc = subprocess.Popen(
        command("quarantine", "list", "--reason", "truncated", "--reject-all", "--note", "noise"),
        env=clean_env({"SALVAGELANE_DATABASE_URL": database}),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        question = ""
        while not question.endswith("[y/N]: "):
            character = proc.stderr.read(1)
            assert character, f"no question asked: {question}"
            question += character
        assert "reject 1 pending quarantined item(s) (reason truncated)?" in question
        with Store.open(database) as store:
            later_run = seed(
                store,
                at=now,
                status=RunStatus.PARTIAL,
                trigger=Trigger.MANUAL,
                reasons=("truncated",),
            )
            [later_item] = [q.id for q in store.get_run(later_run).quarantined]
        out, errors = proc.communicate("y\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 0, errors
    assert out == "rejected 1 pending item(s)\n"
    statuses = {item["id"]: item["review_status"] for item in listed(database)}
    assert statuses == {asked_item: "rejected", later_item: "pending"}
