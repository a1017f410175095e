"""Paid model output is never lost: when the database refuses an attempt, its output goes
to the spool, and the next command (or ``salvagelane db recover``) imports it.

Real processes, a real local provider, real database failures: another connection holding
SQLite's write lock (``BEGIN IMMEDIATE``), SQLite's SQLITE_FULL (``max_page_count``, see
tests/support/full_database.py), a PostgreSQL lock timeout on the run row, and ``kill -9``
of an import.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.connectors import ReplayConnector
from salvagelane.definitions import load_instruction
from salvagelane.errors import AttemptNotStoredError, SpoolError
from salvagelane.runtime.executor import Executor
from salvagelane.store import Store, upgrade
from salvagelane.store.spool import Imported, Spool, SpooledAttempt, recover
from tests.support.cli import FIXTURE, ROOT, clean_env, command, salvagelane, upgraded
from tests.support.full_database import cap_at_current_size
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import (
    COMPLETE,
    JSON_HEADERS,
    Project,
    aimed_at,
    chat_answer,
    chat_completion,
    provider,
    replay_executor,
    store,
)

__all__ = ["provider", "store"]

SECRET = "sk-spool-test-7b3e91c2-never-on-disk"
KEY_ENV = "OPENROUTER_API_KEY"
FULL_DATABASE = ROOT / "tests" / "support" / "full_database.py"
WAIT = 90.0
"""Seconds a test waits for an event before it gives up (a hang, never a timing check)."""


# --- set-up ------------------------------------------------------------------------------------


def project(tmp_path: Path, provider: ScriptedServer) -> Path:
    """A copy of the instructions whose daily-triage calls ``provider``; its directory."""
    copy = Project.create(tmp_path)
    copy.edit(aimed_at(provider))
    return copy.instructions


def keep_the_definition(database: str, instructions: Path) -> None:
    """Store the version of daily-triage a run will keep, as the run would, so that a run
    on the capped database writes only its small run row before the attempt."""
    from salvagelane.definitions import snapshot_for_run
    from salvagelane.definitions.snapshot import without_secrets
    from salvagelane.store import DefinitionRecord

    instruction = load_instruction(instructions / "daily-triage.yaml")
    kept = without_secrets(snapshot_for_run(instruction), instruction.definition)
    assert kept is not None
    with Store.open(database) as store:
        store.keep_definition(
            DefinitionRecord(
                sha256=kept.sha256,
                instruction_id=instruction.id,
                definition_sha256=instruction.definition_sha256,
                content=kept.to_json(),
            ),
            now=datetime.now(UTC),
        )


def output(padding: int = 0) -> str:
    """A complete report, non-ASCII included, then ``padding`` characters of prose (text
    after the report is kept in the raw output and ignored by salvage)."""
    text = json.dumps(COMPLETE, indent=2, ensure_ascii=False)
    return text + "\n\nNotes: déjà vu ✓ " + "n" * padding + "\n"


def chat_then(content: str, action: Any) -> Scripted:
    """``content``, sent only after ``action`` ran (the request has arrived by then)."""
    return Scripted(
        chunks=[json.dumps(chat_completion(content)).encode()],
        stall_after=0,
        stall=0.0,
        on_stall=action,
        resume=True,
        headers=JSON_HEADERS,
    )


def start(*args: str, database: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    extra = {"SALVAGELANE_DATABASE_URL": database, KEY_ENV: SECRET, **(env or {})}
    return subprocess.Popen(
        command(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=clean_env(extra),
    )


def spool_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.spool")) if directory.is_dir() else []


def wait_for_spool_file(directory: Path, process: subprocess.Popen[str]) -> Path:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if found := spool_files(directory):
            return found[0]
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"exited {process.returncode} without spooling:\n{err}")
        time.sleep(0.02)
    raise AssertionError(f"no spool file appeared in {directory}")


def attempts_of(database: str, run_id: str) -> list[Any]:
    # Store.open, not the CLI: every command would import the spool first.
    with Store.open(database, auto_upgrade=False) as store:
        return list(store.get_run(run_id).attempts)


def run_of(database: str, run_id: str) -> Any:
    with Store.open(database, auto_upgrade=False) as store:
        return store.get_run(run_id)


def assert_stored_exactly(database: str, run_id: str, content: str) -> None:
    """The run holds one attempt, whose ``runs show --raw 1`` is ``content`` exactly."""
    (attempt,) = attempts_of(database, run_id)
    assert attempt.number == 1
    assert (attempt.raw_length, attempt.stored_length) == (len(content.encode()),) * 2
    raw = subprocess.run(
        command("runs", "show", run_id, "--raw", "1"),
        capture_output=True,
        cwd=ROOT,
        env=clean_env({"SALVAGELANE_DATABASE_URL": database}),
        timeout=WAIT,
        check=False,
    )
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout == content.encode("utf-8")
    assert b"clipped" not in raw.stderr


def assert_holds_no_secret(path: Path) -> None:
    data = path.read_bytes()
    assert SECRET.encode() not in data
    assert KEY_ENV.encode() in data  # the variable's name is recorded, never its value


class SqliteWriteLock:
    """Another connection holding the database's write lock, as another process would."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._connection: sqlite3.Connection | None = None
        self.taken = threading.Event()

    def take(self) -> None:
        connection = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        connection.execute("BEGIN IMMEDIATE")
        self._connection = connection
        self.taken.set()

    def release(self) -> None:
        if self._connection is not None:
            self._connection.execute("ROLLBACK")
            self._connection.close()
            self._connection = None


# --- (a) a database locked by another process -------------------------------------------------


@pytest.mark.parametrize("importer", ["db recover", "the next run"])
def test_an_output_the_locked_database_refused_is_spooled_and_imported(
    tmp_path: Path, provider: ScriptedServer, importer: str
) -> None:
    db_file = tmp_path / "locked.db"
    # A short busy timeout (the store's is 30 s) so the refusal comes quickly.
    database = upgraded(f"sqlite:///{db_file}?timeout=3")
    instructions = project(tmp_path, provider)
    content = output()
    lock = SqliteWriteLock(db_file)
    provider.script.append(chat_then(content, lock.take))
    spool = tmp_path / "salvagelane-spool"  # the default: beside the database file

    run = start("run", "daily-triage", "--instructions", str(instructions), database=database)
    try:
        path = wait_for_spool_file(spool, run)
    finally:
        lock.release()
    _, err = run.communicate(timeout=WAIT)

    assert lock.taken.is_set()
    assert run.returncode == 1, err
    assert f"its output was spooled to {path}" in err
    assert "database is locked" in err
    assert "salvagelane db recover" in err
    run_id = path.name.split(".")[0]
    assert path.name == f"{run_id}.1.spool"
    assert_holds_no_secret(path)
    refused = run_of(database, run_id)
    assert refused.attempts == []
    assert refused.status == "failed"
    assert refused.error is not None
    assert str(path) in refused.error

    if importer == "db recover":
        recovered = salvagelane("db", "recover", database=database)
        assert recovered.returncode == 0, recovered.stderr
        assert f"imported: attempt 1 of run {run_id}" in recovered.stdout
        assert recovered.stdout.endswith("1 imported, 0 could not be imported\n")
    else:
        provider.script.append(chat_answer(output()))
        again = salvagelane(
            "run", "daily-triage", "--instructions", str(instructions),
            database=database, env={KEY_ENV: SECRET},
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "spool.imported" in again.stderr
        assert run_id in again.stderr

    assert spool_files(spool) == []
    assert_stored_exactly(database, run_id, content)
    assert run_of(database, run_id).status == "failed"  # the run's end stays as recorded
    nothing = salvagelane("db", "recover", database=database)
    assert (nothing.returncode, nothing.stdout.splitlines()[-1]) == (0, "nothing to recover")


# --- (b) a full database ----------------------------------------------------------------------


def test_an_output_the_full_database_refused_is_spooled_and_the_next_run_imports_it(
    tmp_path: Path, provider: ScriptedServer
) -> None:
    db_file = tmp_path / "full.db"
    database = upgraded(f"sqlite:///{db_file}")
    instructions = project(tmp_path, provider)
    keep_the_definition(database, instructions)  # a full disk leaves no room for it
    spool = tmp_path / "elsewhere" / "spool"  # SALVAGELANE_SPOOL_DIR wins over the default
    env = {KEY_ENV: SECRET, "SALVAGELANE_SPOOL_DIR": str(spool)}
    content = output(padding=64 * 1024)  # needs new pages, which the full file cannot get
    provider.script.append(chat_answer(content))

    full = subprocess.run(
        [sys.executable, str(FULL_DATABASE), "run", "daily-triage",
         "--instructions", str(instructions)],
        capture_output=True, text=True, cwd=ROOT, timeout=WAIT, check=False,
        env=clean_env({"SALVAGELANE_DATABASE_URL": database, **env}),
    )  # fmt: skip

    assert full.returncode == 1, full.stderr
    (path,) = spool_files(spool)
    assert "database or disk is full" in full.stderr
    assert f"its output was spooled to {path}" in full.stderr
    assert not (tmp_path / "salvagelane-spool").exists()
    assert_holds_no_secret(path)
    run_id = path.name.split(".")[0]
    assert attempts_of(database, run_id) == []
    assert str(path) in (run_of(database, run_id).error or "")

    provider.script.append(chat_answer(output()))
    again = salvagelane(
        "run", "daily-triage", "--instructions", str(instructions), database=database, env=env
    )

    assert again.returncode == 0, again.stderr
    assert "spool.imported" in again.stderr
    assert spool_files(spool) == []
    assert_stored_exactly(database, run_id, content)


# --- (c) a crash or an error while importing ---------------------------------------------------


def test_an_import_that_fails_or_dies_after_its_commit_leaves_the_file_and_imports_once(
    tmp_path: Path, provider: ScriptedServer
) -> None:
    db_file = tmp_path / "full.db"
    database = upgraded(f"sqlite:///{db_file}")
    instructions = project(tmp_path, provider)
    keep_the_definition(database, instructions)  # a full disk leaves no room for it
    spool = tmp_path / "salvagelane-spool"
    content = output(padding=64 * 1024)
    provider.script.append(chat_answer(content))
    capped = [sys.executable, str(FULL_DATABASE)]
    environ = clean_env({"SALVAGELANE_DATABASE_URL": database, KEY_ENV: SECRET})

    def full_database(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*capped, *args], capture_output=True, text=True, cwd=ROOT, env=environ,
            timeout=WAIT, check=False,
        )  # fmt: skip

    assert full_database("run", "daily-triage", "--instructions", str(instructions)).returncode
    (path,) = spool_files(spool)
    run_id = path.name.split(".")[0]
    spooled = path.read_bytes()

    # The import itself is refused (the database is still full): the file stays.
    failed = full_database("db", "recover")
    assert failed.returncode == 1, failed.stderr
    assert f"NOT imported, kept: {path}: " in failed.stdout
    assert "database or disk is full" in failed.stdout
    assert failed.stdout.endswith("0 imported, 1 could not be imported\n")
    assert path.read_bytes() == spooled
    assert attempts_of(database, run_id) == []

    imported = salvagelane("db", "recover", database=database)
    assert imported.returncode == 0, imported.stderr
    assert spool_files(spool) == []

    # What a crash between the import's commit and the file's removal leaves behind: the
    # attempt stored and the file still there. It is recognised, not stored twice.
    path.write_bytes(spooled)
    again = salvagelane("db", "recover", database=database)
    assert again.returncode == 0, again.stderr
    assert f"already stored, removed: attempt 1 of run {run_id}" in again.stdout
    assert spool_files(spool) == []
    assert_stored_exactly(database, run_id, content)


# --- PostgreSQL: a lock timeout on the run row, and kill -9 mid-import --------------------------


@pytest.mark.postgres
def test_postgres_refusing_an_attempt_spools_it_and_a_killed_import_is_retried_once(
    tmp_path: Path, provider: ScriptedServer, request: pytest.FixtureRequest
) -> None:
    from tests.support.postgres import PostgresDatabase

    postgres: PostgresDatabase = request.getfixturevalue("postgres_database")
    postgres.reset()
    database = upgraded(postgres.url)
    # The server gives up on a lock after 2 s instead of waiting for ever.
    impatient = database + "?options=-c%20lock_timeout%3D2000"
    instructions = project(tmp_path, provider)
    spool = tmp_path / "xdg-state" / "salvagelane" / "spool"  # the default for PostgreSQL
    content = output()
    engine = sa.create_engine(database)
    holder: list[sa.Connection] = []

    def lock_the_runs() -> None:
        connection = engine.connect()
        connection.exec_driver_sql("SELECT id FROM runs FOR UPDATE")
        holder.append(connection)

    def release() -> None:
        while holder:
            connection = holder.pop()
            connection.rollback()
            connection.close()

    try:
        provider.script.append(chat_then(content, lock_the_runs))
        refused = salvagelane(
            "run", "daily-triage", "--instructions", str(instructions),
            database=impatient, env={KEY_ENV: SECRET},
        )  # fmt: skip
        release()

        assert refused.returncode == 1, refused.stderr
        (path,) = spool_files(spool)
        assert f"its output was spooled to {path}" in refused.stderr
        assert "lock timeout" in refused.stderr
        assert_holds_no_secret(path)
        run_id = path.name.split(".")[0]
        # The run row stayed locked, so its end could not be recorded either.
        assert run_of(database, run_id).status == "running"
        assert attempts_of(database, run_id) == []

        # An import blocked inside its transaction (the run row locked again) is killed.
        lock_the_runs()
        recovering = start("db", "recover", database=database)
        _wait_for_a_lock_wait(engine, recovering)
        recovering.send_signal(signal.SIGKILL)
        recovering.communicate(timeout=WAIT)
        release()
        assert recovering.returncode == -signal.SIGKILL
        assert spool_files(spool) == [path]
        assert attempts_of(database, run_id) == []

        recovered = salvagelane("db", "recover", database=database)
        assert recovered.returncode == 0, recovered.stderr
        assert f"imported: attempt 1 of run {run_id}" in recovered.stdout
        assert spool_files(spool) == []
        assert_stored_exactly(database, run_id, content)
    finally:
        release()
        engine.dispose()


def _wait_for_a_lock_wait(engine: sa.Engine, process: subprocess.Popen[str]) -> None:
    """Until another session of this database waits for a lock (the import's insert)."""
    deadline = time.monotonic() + WAIT
    with engine.connect() as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            ).scalar_one()
            watcher.rollback()
            if waiting:
                return
            if process.poll() is not None:
                raise AssertionError(f"recover ended ({process.returncode}) without waiting")
            time.sleep(0.02)
    raise AssertionError("no import ever waited for the lock")


def test_the_spool_directory_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from salvagelane import environment

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert environment.spool_dir("sqlite:///data/x.db") == tmp_path / "data" / "salvagelane-spool"
    assert environment.spool_dir(f"sqlite:///{tmp_path}/y.db?timeout=2") == (
        tmp_path / "salvagelane-spool"
    )
    pg = "postgresql://u:pw@db.example/prod"
    assert environment.spool_dir(pg) == tmp_path / "state" / "salvagelane" / "spool"
    assert environment.spool_dir("sqlite://") == tmp_path / "state" / "salvagelane" / "spool"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert environment.spool_dir(pg) == tmp_path / "home" / ".local" / "state" / "salvagelane" / (
        "spool"
    )
    monkeypatch.setenv("SALVAGELANE_SPOOL_DIR", "chosen")
    assert environment.spool_dir(pg) == tmp_path / "chosen"


# --- the spool file and the import, in process --------------------------------------------------


NOW = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)


def spooled(
    database: str, run_id: str, raw: bytes | None = b'{"a": 1}\xff', **changes: Any
) -> SpooledAttempt:
    values: dict[str, Any] = {
        "database": database,
        "run_id": run_id,
        "number": 1,
        "started_at": NOW,
        "finished_at": NOW + timedelta(seconds=3),
        "request": {"model": "m", "api_key_env": KEY_ENV, "user": "line 1\nline 2 \udcff"},
        "raw_output": raw,
        "raw_length": None if raw is None else len(raw) + 10,
        "raw_sha256": None if raw is None else "f" * 64,
        "finish_reason": "stop",
        "native_finish_reason": "end_turn",
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
        "model": "m-1",
        "request_id": "req-9",
        "latency_seconds": 1.5,
        "http_status": 200,
        "provider_error": None,
        "stream_error": "cut \u2028 here",
    }
    values.update(changes)
    return SpooledAttempt(**values)


def new_run(store: Store) -> str:
    return store.start_run(
        instruction_id="daily-triage",
        definition_sha256="d" * 64,
        trigger="manual",
        scheduled_for=None,
        now=NOW,
    )


def test_a_spool_file_holds_every_field_and_the_exact_bytes(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "new" / "spool")
    entry = spooled("sqlite:////x.db", "0f0e0d0c-run")

    path = spool.write(entry)

    assert path == tmp_path / "new" / "spool" / "0f0e0d0c-run.1.spool"
    assert spool.read(path) == entry
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "new" / "spool").stat().st_mode & 0o777 == 0o700
    header, body = path.read_bytes().split(b"\n", 1)
    assert body == b'{"a": 1}\xff'
    assert header.isascii()
    assert sorted(p.name for p in spool.directory.iterdir()) == [path.name]  # no temp file
    no_output = spooled("sqlite:////x.db", "0f0e0d0c-run", raw=None, number=2)
    assert spool.read(spool.write(no_output)) == no_output
    assert spool.files() == [path, spool.directory / "0f0e0d0c-run.2.spool"]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda data: data[:-1], "expected 9 bytes of output, found 8 (cut short?)"),
        (lambda data: data[:-1] + b"X", "the output does not match its SHA-256"),
        (lambda data: data.split(b"\n", 1)[0], "no header line"),
        (lambda data: b"{}\n", "expected format 'salvagelane-spool/1', got None"),
    ],
)
def test_a_damaged_spool_file_is_refused_naming_it(
    tmp_path: Path, damage: Any, problem: str
) -> None:
    spool = Spool(tmp_path)
    path = spool.write(spooled("d", "run-1"))
    path.write_bytes(damage(path.read_bytes()))

    with pytest.raises(SpoolError) as caught:
        spool.read(path)

    assert str(caught.value) == f"{path}: damaged spool file: {problem}"


def test_importing_is_idempotent_and_keeps_what_it_cannot_import(
    store: Store, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool")
    finished = new_run(store)
    store.fail_run(finished, finished_at=NOW, error="the database refused attempt 1")
    kept_run = new_run(store)
    entry = spooled(store.identity, finished)
    first = spool.write(entry)
    conflicting = spool.write(spooled(store.identity, kept_run, raw=b"one"))
    store.import_spooled_attempt(spooled(store.identity, kept_run, raw=b"another"))
    unknown = spool.write(spooled(store.identity, "9e9e9e9e-not-here"))
    elsewhere = spool.write(spooled("postgresql://u:***@other/db", "8d8d8d8d-elsewhere"))
    damaged = spool.write(spooled(store.identity, "7c7c7c7c-damaged"))
    damaged.write_bytes(damaged.read_bytes()[:-2])

    recovery = recover(store, spool)

    assert [r.path for r in recovery.imported] == [first]
    assert not first.exists()
    assert {r.path: r.problem for r in recovery.failed} == {
        conflicting: f"run {kept_run} already has an attempt 1 with another output: "
        "nothing was overwritten",
        unknown: "run 9e9e9e9e-not-here is not in this database (was it replaced?)",
        damaged: f"{damaged}: damaged spool file: expected 9 bytes of output, found 7 (cut short?)",
    }
    assert [r.path for r in recovery.elsewhere] == [elsewhere]
    assert all(path.exists() for path in (conflicting, unknown, elsewhere, damaged))
    detail = store.get_run(finished)
    assert detail.status == "failed"  # imported whatever the run's status, which stays
    (attempt,) = detail.attempts
    assert attempt.raw_output is not None
    assert attempt.raw_output.encode("utf-8", "surrogateescape") == entry.raw_output
    assert (attempt.raw_length, attempt.raw_sha256) == (entry.raw_length, entry.raw_sha256)
    assert attempt.request == entry.request
    assert (attempt.started_at, attempt.finished_at) == (entry.started_at, entry.finished_at)
    assert (attempt.stream_error, attempt.request_id, attempt.usage) == (
        entry.stream_error,
        entry.request_id,
        entry.usage,
    )
    assert [a.raw_output for a in store.get_run(kept_run).attempts] == ["another"]

    # The same file again (a crash after the commit left it): recognised, not stored twice.
    spool.write(entry)
    again = recover(store, spool)
    assert [(r.path, r.outcome) for r in again.files if r.removed] == [
        (first, Imported.ALREADY_STORED)
    ]
    assert len(store.get_run(finished).attempts) == 1


def test_db_recover_exits_1_naming_what_it_kept(tmp_path: Path) -> None:
    database = upgraded(f"sqlite:///{tmp_path / 'r.db'}")
    spool = Spool(tmp_path / "salvagelane-spool")
    with Store.open(database) as store:
        identity = store.identity
    missing = spool.write(spooled(identity, "6b6b6b6b-gone"))
    other = spool.write(spooled("sqlite:////elsewhere.db", "5a5a5a5a-other"))

    proc = salvagelane("db", "recover", database=database)

    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"{database}: spool {spool.directory}",
        f"  NOT imported, kept: {missing}: run 6b6b6b6b-gone is not in this database "
        "(was it replaced?)",
        f"  left for its database: {other.name}: attempt 1 of run 5a5a5a5a-other was spooled "
        "for sqlite:////elsewhere.db, not this database",
        "0 imported, 1 could not be imported, 1 left for another database",
    ]
    assert missing.exists()
    assert other.exists()
    missing.unlink()
    only_other = salvagelane("db", "recover", database=database)
    assert only_other.returncode == 0, only_other.stdout


def test_when_the_spool_fails_too_the_error_says_both(tmp_path: Path) -> None:
    # SQLITE_FULL for real (max_page_count on every connection of this store's engine),
    # and a spool directory that cannot be created (a file stands in its way).
    database = f"sqlite:///{tmp_path / 'full.db'}"
    upgrade(database)
    keep_the_definition(database, ROOT / "instructions")  # a full disk leaves no room for it
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("in the way", encoding="utf-8")
    instruction = load_instruction(ROOT / "instructions" / "daily-triage.yaml")
    with Store.open(database) as store:
        engine = store._engine  # the test-only event needs the store's own engine
        engine.dispose()
        sa.event.listen(engine, "connect", cap_at_current_size)
        executor = replay_executor(store, spool=Spool(blocker / "spool"))
        with pytest.raises(AttemptNotStoredError) as caught:
            executor.run(instruction)
        sa.event.remove(engine, "connect", cap_at_current_size)
        engine.dispose()
        (run,) = store.list_runs()
        detail = store.get_run(run.id)

    error = caught.value
    assert error.spool_file is None
    message = str(error)
    assert message.startswith(f"attempt 1 of run {run.id} could not be stored (")
    assert "database or disk is full" in message
    assert f"spooling its output failed too ({blocker / 'spool'}/{run.id}.1.spool: " in message
    assert message.endswith("): it is lost")
    assert (detail.status, detail.error, detail.attempts) == ("failed", message, [])


def test_an_output_whose_run_row_vanished_is_spooled_too(store: Store, tmp_path: Path) -> None:
    # Someone deleted the run's row during the model call: the output is still kept.
    instruction = load_instruction(ROOT / "instructions" / "daily-triage.yaml")
    replay = ReplayConnector(FIXTURE)

    class DeletingTheRun:
        def complete(self, request: Any) -> Any:
            with store._engine.begin() as connection:  # the store's own database
                connection.exec_driver_sql("DELETE FROM runs")
            return replay.complete(request)

    spool = Spool(tmp_path / "spool")
    executor = Executor(store, connector_for=lambda spec: DeletingTheRun(), spool=spool)

    with pytest.raises(AttemptNotStoredError) as caught:
        executor.run(instruction)

    (path,) = spool.files()
    assert caught.value.spool_file == str(path)
    assert "no run with id" in str(caught.value)
    entry = spool.read(path)
    assert entry.raw_output == (FIXTURE / "raw.txt").read_bytes()
    assert store.list_runs() == []
    (kept,) = recover(store, spool).failed  # kept and reported, never deleted
    assert kept.problem == f"run {entry.run_id} is not in this database (was it replaced?)"
    assert path.exists()
