"""Values of the wrong shape at the command line (issue 29.11) and a failed delivery in
``run``'s exit status (issue 29.12), through the real command line (in this process).

Each refusal is exit 2 with one line on stderr, never a traceback, and stores nothing:
dates whose conversion to UTC leaves the calendar, ``inf`` and ``nan`` seconds, ids and
counts beyond any database integer, a malformed database URL, a byte that is not UTF-8
in an option or a database URL, a SQLite file another process keeps locked.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.cli import FIXTURE, ROOT, upgraded
from tests.support.cli import salvagelane_here as salvagelane

NOT_UTF8 = os.fsdecode(b"\xff")
"""The byte 0xFF as Python hands it over from argv (``\\udcff``): subprocess writes it
back as the byte."""
LATIN1_CAFE = os.fsdecode(b"caf\xe9")
LONG_NAME = "x" * 5000


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The bundled definition (with a json_file sink into ``out/``) and the fixture."""
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    definition = tmp_path / "instructions" / "daily-triage.yaml"
    text = definition.read_text(encoding="utf-8")
    sink = f"\nsinks:\n  - kind: json_file\n    path: {tmp_path}/out/report.json\nretry:\n"
    definition.write_text(text.replace("\nretry:\n", sink), encoding="utf-8")
    (tmp_path / "out").mkdir()
    return tmp_path


@pytest.fixture(scope="module")
def stored_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database holding one replayed run (one item quarantined), made once."""
    root = tmp_path_factory.mktemp("stored")
    database = upgraded(f"sqlite:///{root / 'salvagelane.db'}")
    run = salvagelane("run", "daily-triage", "--replay", str(FIXTURE), database=database)
    assert run.returncode == 0, run.stderr
    return root / "salvagelane.db"


@pytest.fixture
def stored(project: Path, stored_template: Path) -> str:
    """A copy of the stored database for this test: its URL."""
    shutil.copyfile(stored_template, project / "stored.db")
    return f"sqlite:///{project / 'stored.db'}"


def counts(database: str) -> tuple[int, int, int]:
    """Runs, quarantined items and review rows: what a refusal must leave as it was."""
    engine = sa.create_engine(database.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            return tuple(  # type: ignore[return-value]
                connection.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in ("runs", "quarantined_items", "quarantine_reviews")
            )
    finally:
        engine.dispose()


def assert_refused(proc: object, *expected: str) -> None:
    """Exit 2, one line on stderr naming what was wrong, no traceback."""
    code, out, err = proc.returncode, proc.stdout, proc.stderr  # type: ignore[attr-defined]
    shown = f"exit {code}\n--- stdout:\n{out}\n--- stderr:\n{err}"
    assert code == 2, shown
    assert "Traceback" not in out + err, shown
    assert len(err.splitlines()) == 1, shown
    assert err.startswith("salvagelane: error: "), shown
    for text in expected:
        assert text in err, shown
    assert "status       " not in out, shown  # no run printed as if it had started


FIRE = "2026-11-21T05:20:00Z"

REFUSED = [
    # (argv, what the one line says)
    (
        ["run", "daily-triage", "--scheduled-for", "0001-01-01T00:00:00+14:00"],
        "'--scheduled-for': expected a timestamp between 0001-01-01 and 9999-12-31 in UTC",
    ),
    (
        ["run", "daily-triage", "--scheduled-for", "9999-12-31T23:59:59-14:00"],
        "'--scheduled-for': expected a timestamp between 0001-01-01 and 9999-12-31 in UTC",
    ),
    (
        ["quarantine", "list", "--since", "0001-01-01T00:00:00+14:00"],
        "'--since': expected a date",
    ),
    (
        ["quarantine", "list", "--since", "9999-12-31T23:59:59-14:00"],
        "'--since': expected a date",
    ),
    (
        ["run", "daily-triage", "--scheduled-for", FIRE, "--stale-after", "inf"],
        "'--stale-after': expected a finite number of seconds, got 'inf'",
    ),
    (
        ["run", "daily-triage", "--scheduled-for", FIRE, "--stale-after", "nan"],
        "'--stale-after': expected a finite number of seconds, got 'nan'",
    ),
    (
        # 2,000 years back from now is before year 1: a moment no datetime holds.
        ["run", "daily-triage", "--scheduled-for", FIRE, "--stale-after", "63931459624"],
        "'--stale-after': expected at most 1000000000 seconds, got '63931459624'",
    ),
    (
        ["serve", "--shutdown-timeout", "nan"],
        "'--shutdown-timeout': expected a finite number of seconds",
    ),
    (
        ["quarantine", "show", "99999999999999999999999"],
        "no quarantined item has id 99999999999999999999999",
    ),
    # Beyond PostgreSQL's integer, within SQLite's.
    (["quarantine", "show", "2147483648"], "no quarantined item has id 2147483648"),
    (
        ["quarantine", "reject", "99999999999999999999999", "--note", "x"],
        "no quarantined item has id",
    ),
    (
        ["runs", "list", "--limit", "99999999999999999999999"],
        "'--limit': expected at most 2147483647",
    ),
    (
        ["runs", "list", "--database", "postgresql://x@[::1/x"],
        "database URL is not well formed: its port is not a number",
    ),
    (
        ["runs", "list", "--database", f"sqlite:///{NOT_UTF8}.db"],
        "'--database': byte 0xFF at offset 10 is not valid UTF-8",
    ),
    (
        ["quarantine", "reject", "1", "--note", "x", "--by", NOT_UTF8],
        "'--by': byte 0xFF at offset 0 is not valid UTF-8",
    ),
    (
        ["quarantine", "note", "1", LATIN1_CAFE],
        "'TEXT': byte 0xE9 at offset 3 is not valid UTF-8",
    ),
    (["runs", "show", NOT_UTF8], "'RUN_ID': byte 0xFF at offset 0 is not valid UTF-8"),
    # A host the socket layer cannot encode: TypeError at bind.
    (
        ["ui", "--host", os.fsdecode(b"\x80"), "--port", "0"],
        "'--host': expected an IP address or a host name, got '\\udc80'",
    ),
    (
        ["serve", "--metrics-host", os.fsdecode(b"\x80"), "--metrics-port", "0"],
        "'--metrics-host': expected an IP address or a host name",
    ),
    # A name the file system cannot take (ENAMETOOLONG): pathlib raised it as an OSError.
    (["check", LONG_NAME], "the system cannot look it up: File name too long"),
    (["replay", LONG_NAME], "the system cannot look it up: File name too long"),
    (["schedule", "--instructions", LONG_NAME], "the system cannot look it up"),
    (
        ["runs", "list", "--database", f"sqlite:///{LONG_NAME}"],
        "cannot open the database",
    ),
]


@pytest.mark.parametrize(("argv", "said"), REFUSED, ids=lambda value: repr(value)[:60])
def test_a_value_of_the_wrong_shape_is_one_line_and_exit_2(
    project: Path, stored: str, argv: list[str], said: str
) -> None:
    database = stored
    before = counts(database)
    proc = salvagelane(*argv, database=database, cwd=project)
    assert_refused(proc, said)
    assert counts(database) == before


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (f"sqlite:///{NOT_UTF8}.db", "byte 0xFF at offset 10 is not valid UTF-8"),
        ("postgresql://x@[::1/x", "its port is not a number"),
        ("sqlite:///salvagelane.db?timeout=inf", "timeout='inf': expected the busy timeout"),
        ("sqlite:///salvagelane.db?timeout=nan", "timeout='nan': expected the busy timeout"),
    ],
)
@pytest.mark.parametrize("command", [["runs", "list"], ["quarantine", "note", "1", "x"]])
def test_a_database_url_of_the_wrong_shape_in_the_environment_is_refused(
    project: Path, url: str, said: str, command: list[str]
) -> None:
    proc = salvagelane(*command, database=url, cwd=project)
    assert_refused(proc, said)
    assert not list(project.glob("*.db"))  # nothing created


def test_fire_times_at_the_ends_of_the_calendar_run_or_are_refused_in_one_line(
    project: Path, stored: str
) -> None:
    database = stored
    # Not a fire time: the nearest are named, whatever the year.
    for moment, nearest in (
        ("0001-01-01T00:00:00Z", "the nearest: after"),
        ("9999-12-31T23:59:59Z", "the nearest: before 9999-12-31T05:20:00Z"),
    ):
        proc = salvagelane(
            "run", "daily-triage", "--scheduled-for", moment, database=database, cwd=project
        )
        assert_refused(proc, nearest)
    # Forced, it runs as that fire (and fails: no API key here), with no traceback.
    for moment in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"):
        environ = {key: "" for key in os.environ if key.endswith("_API_KEY")}
        proc = salvagelane(
            "run", "daily-triage", "--scheduled-for", moment, "--force",
            database=database, cwd=project, env=environ,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        assert "status       failed" in proc.stdout


def test_an_id_beyond_the_database_integer_is_refused_on_both_databases(
    project: Path, database_url: str
) -> None:
    """2147483648 is past PostgreSQL's integer (SQLite's is wider): refused the same on
    both, before the database is asked."""
    database = upgraded(database_url)
    for argv in (
        ["quarantine", "show", "2147483648"],
        ["quarantine", "approve", "2147483648", "--stdin"],
        ["runs", "list", "--limit", "2147483648"],
    ):
        proc = salvagelane(*argv, database=database, cwd=project, input="{}")
        assert_refused(proc, "2147483648")


# --- a SQLite file locked when the command starts -----------------------------------


class WriteLock:
    """Another connection holding the database's write lock, as another process would."""

    def __init__(self, path: Path) -> None:
        self._connection = sqlite3.connect(path, isolation_level=None)

    def __enter__(self) -> WriteLock:
        self._connection.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc: object) -> None:
        self._connection.execute("ROLLBACK")
        self._connection.close()


@pytest.fixture
def locked(project: Path, tmp_path: Path) -> Iterator[str]:
    """A migrated SQLite database (busy timeout 1 s) whose write lock another connection
    holds."""
    path = tmp_path / "locked.db"
    database = upgraded(f"sqlite:///{path}?timeout=1")
    with WriteLock(path):
        yield database


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "daily-triage", "--replay", str(FIXTURE)],
        ["quarantine", "note", "1", "x"],
        ["runs", "redeliver", "--pending"],
        ["db", "upgrade"],
    ],
    ids=" ".join,
)
def test_a_sqlite_file_locked_at_start_is_exit_2(
    project: Path, locked: str, argv: list[str]
) -> None:
    proc = salvagelane(*argv, database=locked, cwd=project)
    assert_refused(proc, "cannot open the database", "database is locked")


def test_a_sqlite_file_locked_at_start_can_still_be_read(project: Path, locked: str) -> None:
    """Reads take no write lock (WAL): they are not refused."""
    proc = salvagelane("runs", "list", database=locked, cwd=project)
    assert proc.returncode == 0, proc.stderr


# --- issue 29.12: a delivery that failed ---------------------------------------------


def test_run_exits_1_when_a_sink_did_not_get_the_report_and_says_how_to_redeliver(
    project: Path, database_url: str
) -> None:
    database = upgraded(database_url)
    shutil.rmtree(project / "out")
    (project / "out").write_text("a file where the sink wants a directory", encoding="utf-8")

    run = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), database=database, cwd=project
    )

    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert "status       partial" in run.stdout  # the report is stored
    assert "json_file" in run.stdout
    assert "FAILED" in run.stdout
    run_id = run.stdout.split()[1]
    last = run.stderr.splitlines()[-1]
    assert last == (
        f"salvagelane: error: run {run_id} is stored, but 1 of 1 sinks did not get its "
        f"report; deliver it again with: salvagelane runs redeliver {run_id}"
    )

    # The command it names delivers the report once the sink can take it.
    (project / "out").unlink()
    (project / "out").mkdir()
    again = salvagelane(*last.split(": salvagelane ")[-1].split(), database=database, cwd=project)
    assert again.returncode == 0, again.stderr
    assert (
        json.loads((project / "out" / "report.json").read_text(encoding="utf-8"))["run_id"]
        == run_id
    )


def test_run_json_exits_1_too_when_a_sink_did_not_get_the_report(
    project: Path, database_url: str
) -> None:
    database = upgraded(database_url)
    shutil.rmtree(project / "out")
    (project / "out").write_text("not a directory", encoding="utf-8")

    run = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), "--json", database=database, cwd=project
    )

    assert run.returncode == 1, run.stderr
    document = json.loads(run.stdout)  # stdout stays one JSON document
    assert [d["ok"] for d in document["deliveries"]] == [False]
    assert f"salvagelane runs redeliver {document['run_id']}" in run.stderr


def test_run_exits_0_when_every_sink_got_the_report(project: Path, database_url: str) -> None:
    database = upgraded(database_url)
    run = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), database=database, cwd=project
    )
    assert run.returncode == 0, run.stderr
    assert "redeliver" not in run.stderr
    assert (project / "out" / "report.json").is_file()
