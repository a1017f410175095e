"""One story per run, bounded refusals, no database that keeps nothing: through the real command
line (in this process).

Regression tests of what users saw: counts that disagreed between views after an
approval, a refused approval that stored its whole 50 MB payload, ``run --json`` and the
store disagreeing on a failed run's finish reason, and runs "stored" in an in-memory
database that vanished when the command exited.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.errors import DatabaseUrlError
from salvagelane.store import database_url as normalise_url
from tests.support.cli import FIXTURE, ROOT, upgraded
from tests.support.cli import salvagelane_here as salvagelane

COMPLETE = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))
EIGHTH = dict(COMPLETE["recommendations"][7], rank=8)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The bundled definitions (their max_items of 8 leaves room for the truncated
    fixture's cut item, so it can be approved), and a fixture whose 2nd of 3 items has a
    bad action."""
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    assert "  max_items: 8\n" in (tmp_path / "instructions" / "daily-triage.yaml").read_text()
    items = [dict(item, rank=rank) for rank, item in enumerate(COMPLETE["recommendations"][:3], 1)]
    items[1]["action"] = "panic"
    fixture = tmp_path / "schema-reject"
    fixture.mkdir()
    document = {"summary": "Three things matter today.", "recommendations": items}
    (fixture / "raw.txt").write_text(json.dumps(document, indent=2), encoding="utf-8")
    (fixture / "meta.json").write_text('{"finish_reason": "stop"}', encoding="utf-8")
    return tmp_path


def in_project(project: Path, *args: str, database: str) -> Any:
    return salvagelane(*args, "--instructions", str(project / "instructions"), database=database)


def run_json(project: Path, fixture: Path, database: str) -> dict[str, Any]:
    proc = in_project(project, "run", "daily-triage", "--replay", str(fixture), "--json",
                      database=database)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    printed: dict[str, Any] = json.loads(proc.stdout)
    return printed


def held_id(database: str, run_id: str) -> str:
    proc = salvagelane("quarantine", "list", "--json", database=database)
    (item,) = [item for item in json.loads(proc.stdout) if item["run_id"] == run_id]
    return str(item["id"])


def views(database: str, run_id: str) -> dict[str, tuple[Any, ...]]:
    """(status, partial, kept, quarantined) of the run in every view the CLI has."""
    listed = json.loads(salvagelane("runs", "list", "--json", database=database).stdout)
    (summary,) = [run for run in listed if run["id"] == run_id]
    shown = json.loads(salvagelane("runs", "show", run_id, "--json", database=database).stdout)
    report = shown["report"]
    table = salvagelane("runs", "list", database=database).stdout.splitlines()
    (row,) = [line for line in table if line.startswith(run_id[:8])]
    cells = row.split()  # RUN, CREATED (2), INSTRUCTION, TRIGGER, FIRE ("-"), STATUS...
    status = cells[6]
    kept, quarantined = cells[-3:-1]
    return {
        "runs list --json": (
            summary["status"],
            summary["status"] == "partial",
            summary["kept_count"],
            summary["quarantined_count"],
        ),
        "runs show --json": (
            shown["status"],
            shown["status"] == "partial",
            shown["kept_count"],
            shown["quarantined_count"],
        ),
        "runs show --json report": (
            report["status"],
            report["partial"],
            report["counts"]["accepted"],
            report["counts"]["quarantined"],
        ),
        "runs list": (status, status == "partial", int(kept), int(quarantined)),
    }


def test_after_approvals_and_rejections_every_view_tells_one_story(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    database = upgraded(database_url)
    approved_run = run_json(project, project / "schema-reject", database)["run_id"]
    rejected_run = run_json(project, project / "schema-reject", database)["run_id"]
    cut_run = run_json(project, FIXTURE, database)["run_id"]
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(dict(COMPLETE["recommendations"][1], rank=2)), encoding="utf-8")
    eighth = tmp_path / "eighth.json"
    eighth.write_text(json.dumps(EIGHTH), encoding="utf-8")

    approved = in_project(project, "quarantine", "approve", held_id(database, approved_run),
                          "--file", str(fixed), database=database)  # fmt: skip
    rejected = salvagelane("quarantine", "reject", held_id(database, rejected_run),
                           "--note", "not ours", database=database)  # fmt: skip
    cut = in_project(project, "quarantine", "approve", held_id(database, cut_run),
                     "--file", str(eighth), database=database)  # fmt: skip

    assert approved.returncode == 0, approved.stderr
    assert rejected.returncode == 0, rejected.stderr
    assert cut.returncode == 0, cut.stderr
    # Nothing held back: ok in every view, the approval's answer included.
    assert set(views(database, approved_run).values()) == {("ok", False, 3, 0)}
    # A rejected item stays held back: partial everywhere.
    assert set(views(database, rejected_run).values()) == {("partial", True, 2, 1)}
    # The cut item approved: nothing held back, but the output was cut off, so partial
    # everywhere (the user saw "partial: no" here, and QUAR 1 in runs list).
    assert set(views(database, cut_run).values()) == {("partial", True, 8, 0)}
    assert f"run {approved_run[:8]}: ok, kept 3 of 3 candidates, quarantined 0" in approved.stdout
    assert f"run {cut_run[:8]}: partial, kept 8 of 8 candidates, quarantined 0" in cut.stdout
    # The run view says whose items are in the report.
    shown = salvagelane("runs", "show", approved_run, database=database).stdout
    assert "status       ok\n             1 item approved by an operator (origin operator)" in (
        shown
    )
    assert '"action": "start"' in shown.split("items (3)")[1].splitlines()[3]
    assert shown.split("items (3)")[1].splitlines()[3].endswith("[operator]")
    listed = salvagelane("runs", "list", database=database).stdout
    assert "ok (1 approved)" in listed


def test_a_failed_run_prints_the_finish_reason_the_store_keeps(
    database_url: str, project: Path
) -> None:
    database = upgraded(database_url)
    # The provider is never reached: the key's variable is unset (a fixture without
    # raw.txt no longer does it: `run --replay` refuses one before storing a run).
    definition = project / "instructions" / "daily-triage.yaml"
    text = definition.read_text(encoding="utf-8")
    definition.write_text(
        text.replace("api_key_env: OPENROUTER_API_KEY", "api_key_env: SALVAGELANE_TEST_UNSET"),
        encoding="utf-8",
    )

    proc = in_project(project, "run", "daily-triage", "--json", database=database)

    assert proc.returncode == 1, proc.stderr
    printed = json.loads(proc.stdout)
    shown = json.loads(
        salvagelane("runs", "show", printed["run_id"], "--json", database=database).stdout
    )
    (listed,) = json.loads(salvagelane("runs", "list", "--json", database=database).stdout)
    assert printed["finish_reason"] == shown["finish_reason"] == listed["finish_reason"] == "error"
    assert (printed["status"], shown["status"], listed["status"]) == ("failed",) * 3
    assert printed["error"] == shown["error"]
    assert printed["error"].startswith("environment variable SALVAGELANE_TEST_UNSET is not set")
    text = in_project(project, "run", "daily-triage", database=database)
    assert "finish       error\n" in text.stdout


def _database_bytes(path: Path) -> int:
    """The SQLite database's size on disk: the file and its WAL and shared-memory files."""
    return sum(
        candidate.stat().st_size
        for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
        if candidate.exists()
    )


def test_a_refused_50_mb_approval_grows_the_database_by_far_less_than_1_mb(
    project: Path, tmp_path: Path
) -> None:
    path = tmp_path / "bounded.db"
    database = upgraded(f"sqlite:///{path}")
    run_id = run_json(project, project / "schema-reject", database)["run_id"]
    qid = held_id(database, run_id)
    huge = tmp_path / "huge.json"
    with huge.open("w", encoding="utf-8") as out:
        out.write('{"rank": 2, "why": "')
        for _ in range(50):
            out.write("x" * (1 << 20))
        out.write('"}')
    payload = huge.read_bytes()
    wordy = tmp_path / "wordy.json"  # under the byte cap, refused by the guardrails
    wordy.write_text(json.dumps({"rank": 2, "why": "y" * 200_000}), encoding="utf-8")
    before = _database_bytes(path)

    refused = in_project(project, "quarantine", "approve", qid, "--file", str(huge),
                         "--by", "mallory", database=database)  # fmt: skip
    also_refused = in_project(project, "quarantine", "approve", qid, "--file", str(wordy),
                              database=database)  # fmt: skip

    grown = _database_bytes(path) - before
    assert grown < 1 << 20, f"the database grew by {grown} bytes"
    assert refused.returncode == 1, refused.stderr
    assert "reason    oversize" in refused.stderr
    assert f"received  {len(payload)} bytes" in refused.stderr
    assert also_refused.returncode == 1, also_refused.stderr
    assert "reason    too_long" in also_refused.stderr
    detail = json.loads(salvagelane("quarantine", "show", qid, "--json", database=database).stdout)
    assert detail["review_status"] == "pending"
    first, second = detail["reviews"]
    assert (first["action"], first["actor"], first["error"]["reason"]) == (
        "approve_refused",
        "mallory",
        "oversize",
    )
    assert first["after"]["input"] == {
        "bytes": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "head": payload[:4096].decode("utf-8"),
        "clipped": True,
    }
    assert second["after"]["input"]["bytes"] == wordy.stat().st_size
    assert len(second["after"]["input"]["head"].encode("utf-8")) == 4096
    assert second["error"]["reason"] == "too_long"
    # Nothing but the audit trail changed.
    assert set(views(database, run_id).values()) == {("partial", True, 2, 1)}


KEEP_NOTHING = [
    "sqlite://",
    "sqlite:///",
    "sqlite:///:memory:",
    "sqlite:///file:runs?mode=memory&uri=true",
]


@pytest.mark.parametrize("url", KEEP_NOTHING)
def test_a_run_on_a_database_that_keeps_nothing_is_refused(url: str) -> None:
    proc = salvagelane("run", "daily-triage", "--replay", str(FIXTURE), "--database", url)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""  # no "details salvagelane runs show ID" for a run kept nowhere
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"salvagelane: error: {url}")
    assert "keeps nothing" in line
    assert "give a database file (sqlite:///salvagelane.db" in line


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--poll", "1"),
        ("quarantine", "approve", "1", "--stdin"),
        ("quarantine", "reject", "1", "--note", "x"),
        ("quarantine", "note", "1", "x"),
        ("quarantine", "list", "--reject-all", "--note", "x", "--yes"),
        ("quarantine", "list"),
        ("quarantine", "export", "1", "--to", "exported"),
        ("runs", "redeliver", "00000000-0000"),
        ("runs", "list"),
        ("runs", "show", "00000000-0000"),
        ("fixture", "capture", "00000000-0000", "--to", "captured"),
        ("db", "upgrade"),
        ("db", "current"),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_every_command_that_opens_the_store_refuses_a_database_that_keeps_nothing(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    # Read-only commands refuse too: an in-memory database has nothing to read.
    proc = salvagelane(*args, database="sqlite:///:memory:", cwd=tmp_path, input="")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sqlite:///:memory:: an in-memory SQLite database keeps nothing" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written anywhere


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        *((url, False) for url in KEEP_NOTHING),
        ("sqlite+pysqlite:///:memory:", False),
        ("sqlite:///file::memory:?cache=shared&uri=true", False),
        ("sqlite:///file:runs?vfs=memdb&uri=true", False),
        ("sqlite:///file:?uri=true", False),  # SQLite's temporary database
        ("sqlite:///salvagelane.db", True),
        ("sqlite:////var/lib/salvagelane/runs.db", True),
        ("sqlite:///file:/var/lib/runs.db?mode=rwc&uri=true", True),
        ("postgresql://user@host/db", True),
    ],
)
def test_database_url_refuses_exactly_the_databases_that_keep_nothing(url: str, kept: bool) -> None:
    if kept:
        assert sa.make_url(normalise_url(url)).get_backend_name() in ("sqlite", "postgresql")
    else:
        with pytest.raises(DatabaseUrlError, match="keeps nothing"):
            normalise_url(url)
