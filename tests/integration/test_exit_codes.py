"""The exit-code contract (docs/reference/cli.md, "Exit status"), as one table over every
command.

0 done (a partial run is done); 1 a run, a delivery or a definition failed, or a
confirmation was declined (and nothing changed); 2 something to fix in the command, its
files, its database or its environment, refused before anything is stored or printed as
if started; 130 Ctrl-C, and only that. A bare command group prints its help and exits 0.

Every row runs ``salvagelane ARGS`` as a real process in a project of its own, and checks
more than the code: a row that must not change anything (every refusal, every read) leaves
the database's runs, quarantine and audit trail, and the project's files, exactly as they
were; read commands create no database. Rows that need a database run on SQLite and
PostgreSQL. :func:`test_every_command_has_rows` fails when a command has no row.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
import sqlalchemy as sa

from salvagelane.store import QuarantineFilter, Store, upgrade
from tests.support.cli import EIGHTH, FIXTURE, ROOT, clean_env, command, salvagelane_here
from tests.support.serve import ServeProcess

SCHEMA = "schemas/daily-triage-item.schema.json"
DROP_DAC = [
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
]
"""As root, run without the capabilities that ignore file permissions: a read-only
directory is then read-only for the command, as for any other user."""


# --- the project each row runs in ---------------------------------------------------------------


@dataclass(frozen=True)
class Project:
    """A directory with the bundled definition (plus a json_file sink writing into
    ``out/``), fixtures that replay, fail or cannot be read, an invalid definition,
    corrected items, and the database (``data/salvagelane.db`` on SQLite)."""

    root: Path
    database: str
    backend: str
    values: dict[str, str] = field(default_factory=dict)

    @property
    def database_file(self) -> Path:
        return self.root / "data" / "salvagelane.db"


def make_project(root: Path, database: str, backend: str) -> Project:
    shutil.copytree(ROOT / "instructions", root / "instructions")
    shutil.copytree(ROOT / "schemas", root / "schemas")
    (root / "out").mkdir()
    (root / "data").mkdir()
    definition = root / "instructions" / "daily-triage.yaml"
    text = definition.read_text(encoding="utf-8")
    sink = f"\nsinks:\n  - kind: json_file\n    path: {root}/out/report.json\nretry:\n"
    # The bundled max_items of 8 leaves room for the truncated fixture's cut item (7 kept).
    assert "  max_items: 8\n" in text
    text = text.replace("\nretry:\n", sink)
    definition.write_text(text, encoding="utf-8")
    fixtures = root / "fixtures"
    shutil.copytree(FIXTURE, fixtures / "truncated")
    (fixtures / "no-raw").mkdir()  # a directory without raw.txt
    (fixtures / "no-raw" / "meta.json").write_text('{"finish_reason": "stop"}', encoding="utf-8")
    (fixtures / "nothing").mkdir()  # an answer with nothing to salvage: a failed run
    (fixtures / "nothing" / "raw.txt").write_text("I cannot help with that.", encoding="utf-8")
    shutil.copytree(FIXTURE, fixtures / "differs")
    expected = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
    expected["status"] = "ok"
    (fixtures / "differs" / "expected.json").write_text(json.dumps(expected), encoding="utf-8")
    (root / "broken").mkdir()
    (root / "broken" / "broken.yaml").write_text("id: broken\nversion: 1\n", encoding="utf-8")
    (root / "no-definitions").mkdir()
    (root / "good-item.json").write_text(json.dumps(EIGHTH), encoding="utf-8")
    (root / "bad-item.json").write_text(json.dumps({**EIGHTH, "action": "panic"}), encoding="utf-8")
    reviewers = "alice:alice-token-0123456789abcdef\nbob:bob-token-0123456789abcdef\n"
    for name, mode in (("reviewers.txt", 0o600), ("reviewers-open.txt", 0o644)):
        (root / name).write_text(reviewers, encoding="utf-8")
        (root / name).chmod(mode)
    return Project(root=root, database=database, backend=backend)


def store_run(project: Project, migrated: Path) -> None:
    """Store one replayed run of the truncated fixture (7 kept, 1 quarantined), as
    ``run --replay`` would, and remember its id and the quarantined item's. A SQLite
    database starts as a copy of ``migrated`` (the migrations take most of the time)."""
    import httpx

    from salvagelane.connectors import ReplayConnector
    from salvagelane.definitions import load_instruction
    from salvagelane.runtime.executor import Executor
    from salvagelane.sinks import build_sinks
    from salvagelane.vocabulary import Trigger

    if project.backend == "sqlite":
        shutil.copyfile(migrated, project.database_file)
    else:
        upgrade(project.database)
    definition = load_instruction(project.root / "instructions" / "daily-triage.yaml")
    with Store.open(project.database) as store, httpx.Client() as client:
        outcome = Executor(
            store,
            connector_for=lambda spec: ReplayConnector(FIXTURE),
            sinks_for=lambda spec: build_sinks(spec.sinks, client=client),
        ).run(definition, trigger=Trigger.REPLAY)
        (item,) = store.quarantine.list_quarantine(QuarantineFilter())
    project.values.update(run=outcome.run_id, item=str(item.id))


def snapshot(project: Project) -> Any:
    """What the database holds (runs with their figures and deliveries, quarantined items
    with their review trail), or that it holds no tables, or that there is no file."""
    if project.backend == "sqlite" and not project.database_file.exists():
        return "no database file"
    engine = sa.create_engine(project.database.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            if not sa.inspect(connection).get_table_names():
                return "no tables"
    finally:
        engine.dispose()
    with Store.open(project.database, auto_upgrade=False) as store:
        runs = [repr(run) for run in store.list_runs(limit=1000)]
        items = store.quarantine.list_quarantine(QuarantineFilter(review_status=None, limit=None))
        reviews = [repr(store.quarantine.get_quarantine(item.id)) for item in items]
    return runs, reviews


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` (but the database's own, compared by content), with its
    size and modification time."""
    found: dict[str, tuple[int, int]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith("salvagelane.db"):
            status = path.stat()
            found[str(path.relative_to(root))] = (status.st_size, status.st_mtime_ns)
        elif path.name.startswith("salvagelane.db"):
            found[str(path.relative_to(root))] = (-1, -1)  # present (content: snapshot)
    return found


# --- running a row ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


Runner = Callable[["Row", Project, list[str]], Result]


def run_plain(row: Row, project: Project, argv: list[str]) -> Result:
    """The command, in this process (:func:`salvagelane_here`: the same environment,
    working directory, pipes and exit status); as a process of its own for the first row
    of each exit code, so every code is also seen leaving a real process."""
    if row.name not in REAL_PROCESS_ROWS:
        here = salvagelane_here(
            *argv,
            cwd=project.root,
            env={"SALVAGELANE_DATABASE_URL": project.database},
            input=row.input,
        )
        return Result(here.returncode, here.stdout, here.stderr)
    proc = subprocess.run(
        command(*argv),
        input=row.input,
        capture_output=True,
        text=True,
        cwd=project.root,
        env=clean_env({"SALVAGELANE_DATABASE_URL": project.database}),
        timeout=120,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_without_api_key(row: Row, project: Project, argv: list[str]) -> Result:
    """The command with the instruction's API key variable unset."""
    environ = clean_env({"SALVAGELANE_DATABASE_URL": project.database})
    environ.pop("OPENROUTER_API_KEY", None)
    proc = subprocess.run(
        command(*argv),
        capture_output=True,
        text=True,
        cwd=project.root,
        env=environ,
        timeout=120,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_interrupted_at_prompt(row: Row, project: Project, argv: list[str]) -> Result:
    """Start the command, wait for its confirmation prompt, press Ctrl-C (SIGINT)."""
    err = bytearray()
    prompted = threading.Event()
    with subprocess.Popen(
        command(*argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=project.root,
        env=clean_env({"SALVAGELANE_DATABASE_URL": project.database}),
        # A test run started in the background inherits SIGINT ignored: Ctrl-C must count.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as proc:
        assert proc.stderr is not None
        assert proc.stdout is not None
        stderr = proc.stderr

        def read() -> None:
            while chunk := stderr.read1(4096):  # type: ignore[attr-defined]
                err.extend(chunk)
                if b"[y/N]: " in err:
                    prompted.set()
            prompted.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert prompted.wait(60), "no confirmation prompt"
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
            out = proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            reader.join(timeout=10)
    return Result(code, out.decode(), err.decode())


def finish(serve: ServeProcess) -> None:
    """Kill ``serve`` if it still runs, and close its pipes."""
    serve.kill()
    for stream in (serve.proc.stdout, serve.proc.stderr):
        if stream is not None:
            stream.close()


def run_beside_a_serve(row: Row, project: Project, argv: list[str]) -> Result:
    """Run the command while a first ``serve`` leads on the same database, then check
    that the first one is unharmed and stops cleanly (exit 0 on SIGTERM)."""
    first = ServeProcess(
        ["--instructions", "instructions"],
        cwd=project.root,
        env={"SALVAGELANE_DATABASE_URL": project.database},
        name="first",
    )
    try:
        first.wait_for_line(r"^salvagelane serve: ", timeout=60)
        result = run_plain(row, project, argv)
        assert first.proc.poll() is None, first.describe()
        assert first.stop(signal.SIGTERM, timeout=60) == 0, first.describe()
    finally:
        finish(first)
    return result


def run_serve_until_started(row: Row, project: Project, argv: list[str]) -> Result:
    """``serve``: wait for its banner, then stop it as a supervisor does (SIGTERM)."""
    serve = ServeProcess(
        argv[1:],  # ServeProcess adds "serve"
        cwd=project.root,
        env={"SALVAGELANE_DATABASE_URL": project.database},
    )
    try:
        serve.wait_for_line(r"^salvagelane serve: ", timeout=60)
        code = serve.stop(signal.SIGTERM, timeout=60)
    finally:
        finish(serve)
    return Result(code, serve.stdout, "\n".join(serve.stderr_lines))


def run_worker_until_started(row: Row, project: Project, argv: list[str]) -> Result:
    """``worker``: wait until it takes runs, then stop it as a supervisor does (SIGTERM)."""
    worker = ServeProcess(
        argv[1:],  # ServeProcess adds the subcommand
        cwd=project.root,
        env={"SALVAGELANE_DATABASE_URL": project.database},
        subcommand="worker",
    )
    try:
        worker.wait_for_line(r"^worker: running queued runs", timeout=60)
        code = worker.stop(signal.SIGTERM, timeout=60)
    finally:
        finish(worker)
    return Result(code, worker.stdout, "\n".join(worker.stderr_lines))


def queue_a_run(project: Project) -> None:
    """A run claimed ``queued`` with its job, as ``serve --dispatch queue`` claims one
    (``{queued}`` names it)."""
    from datetime import UTC, datetime

    from salvagelane.definitions import load_instruction
    from salvagelane.runtime.dispatch import QueueDispatch
    from salvagelane.vocabulary import Trigger

    definition = load_instruction(project.root / "instructions" / "daily-triage.yaml")
    with Store.open(project.database) as store:
        dispatch = QueueDispatch(project.database, store)
        dispatch.open()
        try:
            run_id = dispatch.enqueue(
                definition,
                scheduled_for=datetime(2026, 11, 23, 5, 20, tzinfo=UTC),
                trigger=Trigger.SCHEDULE,
                retry_of=None,
                now=datetime.now(UTC),
            )
        finally:
            dispatch.close()
    project.values.update(queued=run_id)


def run_ui_until_started(row: Row, project: Project, argv: list[str]) -> Result:
    """``ui``: wait for the URL it prints once it answers, then stop it with Ctrl-C."""
    with subprocess.Popen(
        command(*argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=project.root,
        env=clean_env({"SALVAGELANE_DATABASE_URL": project.database}),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        lines: list[str] = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("open "):
                    break
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=60)
            lines.append(proc.stdout.read())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        return Result(code, "".join(lines), proc.stderr.read())


def read_only_directory_works(directory: Path) -> str | None:
    """Why a read-only directory cannot be simulated here, or None when it can."""
    probe = directory / "probe"
    prefix = DROP_DAC if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        return "running as root without setpriv: a read-only directory cannot be simulated"
    mode = directory.stat().st_mode
    directory.chmod(0o555)
    try:
        proc = subprocess.run([*prefix, "touch", str(probe)], capture_output=True, check=False)
    finally:
        directory.chmod(mode)
    if proc.returncode == 0:
        probe.unlink()
        return f"{directory} stayed writable after chmod 555 (as uid {os.geteuid()})"
    return None


def run_in_read_only_directory(row: Row, project: Project, argv: list[str]) -> Result:
    """The database's directory made read-only (mode 555) for the command, also as root
    (without the capabilities that bypass permissions)."""
    data = project.database_file.parent
    if (why := read_only_directory_works(data)) is not None:
        pytest.skip(why)
    prefix = DROP_DAC if os.geteuid() == 0 else []
    assert not os.access(data, os.W_OK) or prefix, "the directory is writable"
    mode = data.stat().st_mode
    data.chmod(0o555)
    try:
        proc = subprocess.run(
            [*prefix, *command(*argv)],
            capture_output=True,
            text=True,
            cwd=project.root,
            env=clean_env({"SALVAGELANE_DATABASE_URL": project.database}),
            timeout=120,
            check=False,
        )
    finally:
        data.chmod(stat.S_IMODE(mode))
    return Result(proc.returncode, proc.stdout, proc.stderr)


# --- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """``salvagelane ARGV`` (``{name}`` fields filled from the project: ``run``, ``item``,
    ``root``, ``db``, ``data``) exits ``code``, with stdout and stderr containing ``out``
    and ``err``.

    ``database``: ``None`` (the command opens none; the row runs once, on SQLite),
    ``"missing"`` (no SQLite file; a PostgreSQL database without tables) or ``"stored"``
    (migrated, one replayed run stored). ``changes``: the row may change the database or
    the project's files; every other row must leave both as they were.
    """

    name: str
    argv: tuple[str, ...]
    code: int
    database: str | None = "stored"
    out: str | None = None
    err: str | None = None
    changes: bool = False
    input: str | None = None
    backends: tuple[str, ...] = ("sqlite", "postgres")
    runner: Runner = run_plain
    prepare: Callable[[Project], None] | None = None
    old: str = ""
    """What the code before the contract did, for a row that fixed it."""


def block_the_sink(project: Project) -> None:
    """A file where the json_file sink wants its directory: the delivery fails."""
    shutil.rmtree(project.root / "out")
    (project.root / "out").write_text("not a directory", encoding="utf-8")


def row(name: str, args: str, *, code: int, **options: Any) -> Row:
    """A row; ``args`` split as a shell would (``{name}`` fields are filled later)."""
    return Row(name=name, argv=tuple(shlex.split(args)), code=code, **options)


def group_help(group: str) -> Row:
    words = f"salvagelane {group}".strip()
    return row(
        f"bare {words}",
        group,
        code=0,
        database=None,
        out=f"Usage: {words} [OPTIONS] COMMAND [ARGS]...",
        old="exit 2, the help squashed into one line as an error",
    )


NO_DB: dict[str, Any] = {"database": None}
SQLITE: dict[str, Any] = {"backends": ("sqlite",)}
POSTGRES: dict[str, Any] = {"backends": ("postgres",)}
MISSING: dict[str, Any] = {"database": "missing"}
RO_DIR: dict[str, Any] = {"runner": run_in_read_only_directory, "backends": ("sqlite",)}
REPLAY = "run daily-triage --replay fixtures/truncated"
SALVAGE = f"salvage --schema {SCHEMA} --items recommendations"
MYSQL = "--database mysql://user@host/db"
REJECT_ALL = "quarantine list --reject-all --note noise"
UNWRITABLE = "no write permission on directory {data}"

ROWS: list[Row] = [
    # --- bare groups and the top level
    group_help(""),
    group_help("db"),
    group_help("fixture"),
    group_help("quarantine"),
    group_help("runs"),
    row("top-level help", "--help", code=0, out="Commands:", **NO_DB),
    row("version", "--version", code=0, out="salvagelane, version", **NO_DB),
    row("unknown command", "nonsense", code=2, err="No such command 'nonsense'", **NO_DB),
    row("unknown subcommand", "db nonsense", code=2, err="No such command", **NO_DB),
    # --- database URLs: refused before anything is opened or created
    row("unsupported database", f"runs list {MYSQL}", code=2, err="unsupported database", **NO_DB),
    row("not a URL", "runs list --database foo", code=2, err="not well formed", **NO_DB),
    row("run, unsupported database", f"{REPLAY} {MYSQL}", code=2, err="unsupported", **NO_DB),
    row(
        "run on a database that keeps nothing",
        f"{REPLAY} --database sqlite:///:memory:",
        code=2,
        err="keeps nothing",
        **NO_DB,
    ),
    row("db upgrade, not a URL", "db upgrade --database foo", code=2, err="not well", **NO_DB),
    row("db recover, unsupported", f"db recover {MYSQL}", code=2, err="unsupported", **NO_DB),
    row("serve, unsupported database", f"serve {MYSQL}", code=2, err="unsupported", **NO_DB),
    row("ui, unsupported database", f"ui {MYSQL}", code=2, err="unsupported", **NO_DB),
    row(
        "a PostgreSQL server that refuses the connection",
        "runs list --database postgresql://nobody@127.0.0.1:1/none",
        code=2,
        err="cannot open the database: connection failed",
        old="exit 1",
        **NO_DB,
    ),
    row(
        "a run on a SQLite file in a missing directory",
        f"{REPLAY} --database sqlite:///{{root}}/nowhere/x.db",
        code=2,
        err="directory {root}/nowhere does not exist",
        old='exit 1, "unable to open database file"',
        **NO_DB,
    ),
    # --- salvage, check, schedule, replay: no database
    row(
        "salvage, partial",
        f"{SALVAGE} fixtures/truncated/raw.txt",
        code=0,
        out='"partial"',
        **NO_DB,
    ),
    row(
        "salvage of a refusal: done, its status says failed",
        f"{SALVAGE} fixtures/nothing/raw.txt",
        code=0,
        out='"status": "failed"',
        **NO_DB,
    ),
    row(
        "salvage without a schema",
        "salvage --items recommendations fixtures/truncated/raw.txt",
        code=2,
        err="Missing option '--schema'",
        **NO_DB,
    ),
    row("check", "check instructions", code=0, out="ok  daily-triage", **NO_DB),
    row("check, invalid", "check broken", code=1, out="error  broken/broken.yaml", **NO_DB),
    row("check, missing directory", "check nowhere", code=2, err="nowhere", **NO_DB),
    row(
        "check with the key variable unset: a warning, still valid",
        "check instructions",
        code=0,
        out="warning  instructions/daily-triage.yaml: connector.api_key_env",
        runner=run_without_api_key,
        **NO_DB,
    ),
    row(
        "check --strict with the key variable unset: the warning fails it",
        "check --strict instructions",
        code=1,
        out="OPENROUTER_API_KEY is not set here",
        runner=run_without_api_key,
        **NO_DB,
    ),
    row("schedule", "schedule", code=0, out="daily-triage", **NO_DB),
    row(
        "schedule of an invalid definition",
        "schedule --instructions broken",
        code=1,
        err="broken/broken.yaml",
        old="exit 2",
        **NO_DB,
    ),
    row("schedule, missing directory", "schedule --instructions nowhere", code=2, **NO_DB),
    row("replay, same", "replay --use-current fixtures/truncated", code=0, out="1 same", **NO_DB),
    row(
        "replay, differs", "replay --use-current fixtures/differs", code=1, out="1 differs", **NO_DB
    ),
    row("replay without a path", "replay", code=2, err="Missing argument", **NO_DB),
    # --- eval (the calls themselves: tests/integration/test_eval.py)
    row(
        "eval, a fixture recorded before prompts were kept",
        "eval fixtures/truncated --no-store",
        code=0,
        out="changes: 0 better, 0 worse, 0 same, 1 skipped",
        **NO_DB,
    ),
    row("eval, no such fixture", "eval fixtures/nope", code=2, err="fixtures/nope", **NO_DB),
    row(
        "eval, --concurrency 0",
        "eval fixtures/truncated --concurrency 0",
        code=2,
        err="--concurrency",
        **NO_DB,
    ),
    # --- try and prompt: a dry run opens no database, writes no sink file
    row("try, partial", "try daily-triage --sample fixtures/truncated", code=0, out="partial"),
    row(
        "try, nothing usable",
        "try daily-triage --sample fixtures/nothing",
        code=1,
        out="status       failed",
        **NO_DB,
    ),
    row(
        "try --live with its API key not set: the run would fail",
        "try daily-triage --live",
        code=1,
        out="environment variable OPENROUTER_API_KEY is not set",
        runner=run_without_api_key,
        **NO_DB,
    ),
    row("try, no answer chosen", "try daily-triage", code=2, err="expected --sample", **NO_DB),
    row(
        "try with a fixture without raw.txt",
        "try daily-triage --sample fixtures/no-raw",
        code=2,
        err="raw.txt",
        **NO_DB,
    ),
    row("prompt", "prompt daily-triage", code=0, out="--- user prompt ---", **NO_DB),
    row("prompt, unknown instruction", "prompt nope", code=2, err="no instruction", **NO_DB),
    # --- init: no database
    row("init", "init demo", code=0, out="wrote", changes=True, **NO_DB),
    row(
        "init over an existing project",
        "init .",
        code=2,
        err="already exist; nothing was written",
        **NO_DB,
    ),
    # --- run
    row("run, partial", REPLAY, code=0, out="status       partial", changes=True),
    row(
        "run, failed",
        "run daily-triage --replay fixtures/nothing",
        code=1,
        out="status       failed",
        changes=True,
    ),
    row(
        "run, a sink that did not get the report",
        REPLAY,
        code=1,
        out="FAILED",
        err="deliver it again with: salvagelane runs redeliver",
        changes=True,
        prepare=block_the_sink,
        old="exit 0: nothing retries the delivery in cron mode (issue 29.12)",
    ),
    row(
        # Not a refusal (2): a scheduled fire must leave a failed run in run health.
        "run with its API key not set: a failed run",
        "run daily-triage",
        code=1,
        out="environment variable OPENROUTER_API_KEY is not set",
        changes=True,
        runner=run_without_api_key,
    ),
    row(
        "run --replay of a directory without raw.txt",
        "run daily-triage --replay fixtures/no-raw",
        code=2,
        err="fixtures/no-raw/raw.txt: cannot read",
        old="exit 1, a failed run stored",
    ),
    row(
        "run --replay of a directory without raw.txt, on a new database",
        "run daily-triage --replay fixtures/no-raw",
        code=2,
        err="fixtures/no-raw/raw.txt: cannot read",
        old="exit 1, the database created, a failed run stored",
        **MISSING,
        **SQLITE,
    ),
    row("run an unknown instruction", "run nope", code=2, err="no instruction 'nope'", **SQLITE),
    row(
        "run an invalid definition",
        "run broken/broken.yaml --replay fixtures/truncated",
        code=1,
        err="broken/broken.yaml",
        old="exit 2",
    ),
    row(
        "run, a fire time without a zone",
        "run daily-triage --scheduled-for 2026-11-21T05:20:00",
        code=2,
        err="with a zone",
        **SQLITE,
    ),
    row(
        "run on a PostgreSQL database never migrated",
        REPLAY,
        code=2,
        err="salvagelane db upgrade",
        **MISSING,
        **POSTGRES,
    ),
    # --- runs
    row("runs list", "runs list", code=0, out="daily-triage  replay"),
    row("runs list, an instruction", "runs list --instruction daily-triage", code=0),
    row(
        "runs list of an instruction without runs",
        "runs list --instruction nope",
        code=2,
        err='no stored run has instruction "nope"; instructions with stored runs in',
        old='exit 0, "no runs stored yet" although runs exist',
    ),
    row("runs list --limit 0", "runs list --limit 0", code=2, err="--limit", **SQLITE),
    row(
        "runs list on a missing SQLite file",
        "runs list",
        code=2,
        err="no database at {data}/salvagelane.db",
        old='exit 0, the database created, "no runs stored yet"',
        **MISSING,
        **SQLITE,
    ),
    row(
        "runs list on a PostgreSQL database never migrated",
        "runs list",
        code=2,
        err="salvagelane db upgrade",
        **MISSING,
        **POSTGRES,
    ),
    row("runs show", "runs show {run}", code=0, out="report       partial"),
    row("runs show, unknown run", "runs show deadbeef", code=2, err="deadbeef"),
    row(
        "runs show on a missing SQLite file",
        "runs show deadbeef",
        code=2,
        err="no database at",
        old="the database created",
        **MISSING,
        **SQLITE,
    ),
    row("runs redeliver", "runs redeliver {run}", code=0, out="json_file", changes=True),
    row("runs redeliver --pending", "runs redeliver --pending", code=0, out="nothing to deliver"),
    row(
        "runs redeliver to a sink that fails",
        "runs redeliver {run}",
        code=1,
        out="failed",
        changes=True,
        prepare=block_the_sink,
    ),
    row("runs redeliver, no run", "runs redeliver", code=2, err="RUN_ID or", **SQLITE),
    row(
        "runs cancel of a queued run",
        "runs cancel {queued}",
        code=0,
        out="cancelled: run {queued} (daily-triage) was queued",
        changes=True,
        prepare=queue_a_run,
        **POSTGRES,
    ),
    row(
        "runs cancel of a run that has ended",
        "runs cancel {run}",
        code=2,
        err="run {run} has ended (partial): nothing to cancel",
    ),
    # --- quarantine
    row("quarantine list", "quarantine list", code=0, out="truncated  pending"),
    row(
        "quarantine list of a reason that matches nothing",
        "quarantine list --reason schema",
        code=0,
        out="no quarantined items with reason schema",
        old='"no quarantined items match"',
    ),
    row(
        "quarantine list of an unknown reason",
        "quarantine list --reason nope",
        code=2,
        err="expected one of oversize, too_deep, too_long, truncated, malformed",
        old="exit 0, matching nothing",
    ),
    row(
        "quarantine list of an instruction without runs",
        "quarantine list --instruction nope",
        code=2,
        err="instructions with stored runs in",
        old="exit 0, matching nothing",
    ),
    row(
        "quarantine list on a missing SQLite file",
        "quarantine list",
        code=2,
        err="no database at",
        old="the database created",
        **MISSING,
        **SQLITE,
    ),
    row(
        "quarantine list --reject-all, declined",
        REJECT_ALL,
        code=1,
        input="n\n",
        err="nothing rejected",
        old="exit 130",
    ),
    row(
        "quarantine list --reject-all, no answer on stdin",
        REJECT_ALL,
        code=2,
        input="",
        err="give --yes",
        old="exit 130",
    ),
    row(
        "quarantine list --reject-all, Ctrl-C at the prompt",
        REJECT_ALL,
        code=130,
        err="interrupted",
        runner=run_interrupted_at_prompt,
    ),
    row(
        "quarantine list --reject-all, confirmed",
        REJECT_ALL,
        code=0,
        input="y\n",
        out="rejected 1 pending item(s)",
        changes=True,
    ),
    row(
        "reject-all, no note", "quarantine list --reject-all --yes", code=2, err="--note", **SQLITE
    ),
    row("health", "health", code=0, out="instruction  daily-triage"),
    row("health, unknown instruction", "health --instruction nope", code=2, err="nope"),
    # The stored run is a replay: no scheduled run, so no gate passes.
    row(
        "health --gate, too few scheduled runs",
        "health --gate 1",
        code=1,
        out="gate: daily-triage: only 0 scheduled runs, 1 needed",
    ),
    row("health --gate 0", "health --gate 0", code=2, err="--gate"),
    # --- backfill
    row(
        "backfill --dry-run",
        "backfill daily-triage --from 2026-11-20 --to 2026-11-21 --dry-run",
        code=0,
        out="2/2 2026-11-21T05:20Z would run",
    ),
    row(
        "backfill, --to before --from",
        "backfill daily-triage --from 2026-11-21 --to 2026-11-20",
        code=2,
        err="before --from",
    ),
    row(
        "backfill, --reprocess of an unknown status",
        "backfill daily-triage --from 2026-11-20 --to 2026-11-21 --reprocess ok",
        code=2,
        err="--reprocess",
    ),
    row("quarantine show", "quarantine show {item}", code=0, out="truncated  [pending]"),
    row("quarantine show, unknown item", "quarantine show 999", code=2, err="999"),
    row(
        "quarantine export",
        "quarantine export {item} --to exported",
        code=0,
        out="fixture",
        changes=True,
    ),
    row("quarantine export, unknown", "quarantine export 999 --to exported", code=2, err="999"),
    row("quarantine export, no --to", "quarantine export {item}", code=2, err="--to DIR"),
    # The stored run's item is pending: no reviewed item, no line.
    row(
        "quarantine export --format jsonl",
        "quarantine export --format jsonl --status approved",
        code=0,
        err="exported 0 approved item(s) to stdout",
    ),
    row(
        "quarantine export --format jsonl --output",
        "quarantine export --format jsonl --output dataset.jsonl",
        code=0,
        err="exported 0 approved or rejected item(s) to dataset.jsonl",
        changes=True,
    ),
    row(
        "quarantine export --format jsonl, a status not reviewed",
        "quarantine export --format jsonl --status pending",
        code=2,
        err="--status",
    ),
    row(
        "quarantine export --format jsonl with an ID",
        "quarantine export --format jsonl {item}",
        code=2,
        err="takes no ID",
    ),
    row(
        "quarantine export --format jsonl on a missing SQLite file",
        "quarantine export --format jsonl",
        code=2,
        err="no database at {data}/salvagelane.db",
        **MISSING,
        **SQLITE,
    ),
    row(
        "quarantine approve",
        "quarantine approve {item} --file good-item.json",
        code=0,
        out="approved #",
        changes=True,
    ),
    row(
        "quarantine approve refused by the guardrails (the audit row only)",
        "quarantine approve {item} --file bad-item.json",
        code=1,
        err="refused by the guardrails",
        changes=True,
    ),
    row("approve, no item", "quarantine approve {item}", code=2, err="exactly one", **SQLITE),
    row(
        "quarantine reject",
        "quarantine reject {item} --note noise",
        code=0,
        out="rejected #",
        changes=True,
    ),
    row("quarantine reject, unknown", "quarantine reject 999 --note noise", code=2, err="999"),
    row("quarantine note", "quarantine note {item} seen", code=0, out="noted #", changes=True),
    row("quarantine note, empty", "quarantine note {item} ' '", code=2, err="empty", **SQLITE),
    # --- fixture capture
    row(
        "fixture capture",
        "fixture capture {run} --to captured",
        code=0,
        out="fixture",
        changes=True,
    ),
    row("fixture capture, unknown", "fixture capture deadbeef --to out2", code=2, err="deadbeef"),
    row(
        "fixture capture on a missing SQLite file",
        "fixture capture deadbeef --to captured",
        code=2,
        err="no database at",
        old="the database created",
        **MISSING,
        **SQLITE,
    ),
    # --- db
    row(
        "db upgrade of a new database",
        "db upgrade",
        code=0,
        out="upgraded from",
        changes=True,
        **MISSING,
    ),
    row("db upgrade, up to date", "db upgrade", code=0, out="already at revision"),
    row("db current", "db current", code=0, out="up to date"),
    row(
        "db current on a missing SQLite file",
        "db current",
        code=2,
        err="no database at {data}/salvagelane.db",
        old="exit 0, the database created",
        **MISSING,
        **SQLITE,
    ),
    row(
        "db current on a PostgreSQL database never migrated",
        "db current",
        code=0,
        out="revision none",
        **MISSING,
        **POSTGRES,
    ),
    row("db recover, nothing spooled", "db recover", code=0, out="nothing to recover"),
    row("db recover with an argument", "db recover extra", code=2, err="extra", **SQLITE),
    # --- ui
    row(
        "ui, stopped by Ctrl-C",
        "ui --port 0 --instructions instructions",
        code=0,
        out="open http://127.0.0.1:",
        runner=run_ui_until_started,
    ),
    row(
        "ui with named reviewers",
        "ui --port 0 --instructions instructions --reviewers reviewers.txt",
        code=0,
        out="reviewers: alice, bob (from reviewers.txt)\nopen http://127.0.0.1:",
        runner=run_ui_until_started,
    ),
    row(
        "ui, a reviewers file its group or others may read",
        "ui --reviewers reviewers-open.txt",
        code=2,
        err="(mode 0644): it holds tokens; chmod 600 it",
        **NO_DB,
    ),
    row("ui, no reviewers file", "ui --reviewers nope.txt", code=2, err="no such file", **NO_DB),
    row(
        "ui, --by with --reviewers",
        "ui --reviewers reviewers.txt --by carol",
        code=2,
        err="--by and --reviewers",
        **NO_DB,
    ),
    # --- serve
    row(
        "serve, stopped by SIGTERM",
        "serve --instructions instructions",
        code=0,
        out="stopped",
        changes=True,
        runner=run_serve_until_started,
    ),
    row(
        "a second serve on one SQLite file",
        "serve --instructions instructions",
        code=2,
        err="another salvagelane serve is already running",
        changes=True,  # the first serve may record fires; the second prints nothing
        runner=run_beside_a_serve,
        old="exit 1 after printing its start-up banner",
        **SQLITE,
    ),
    row(
        "serve of definitions that do not load",
        "serve --instructions broken",
        code=1,
        err="no loadable instruction definition",
        old="exit 2 after printing its start-up banner",
    ),
    row(
        "serve, no definitions",
        "serve --instructions no-definitions",
        code=2,
        err="no-definitions: no instruction definition",
        old="the serve lock file created first",
        **SQLITE,
    ),
    row("serve --poll 0", "serve --poll 0", code=2, err="--poll", **SQLITE),
    row(
        "serve --dispatch queue on SQLite",
        "serve --instructions instructions --dispatch queue",
        code=2,
        err="the task queue needs PostgreSQL",
        **SQLITE,
    ),
    # --- worker
    row(
        "worker, stopped by SIGTERM",
        "worker --instructions instructions",
        code=0,
        out="stopped",
        changes=True,  # installs the task queue's tables
        runner=run_worker_until_started,
        **POSTGRES,
    ),
    row(
        "worker on SQLite",
        "worker --instructions instructions",
        code=2,
        err="the task queue needs PostgreSQL",
        **SQLITE,
    ),
    # --- a database in a directory this user cannot write
    row(
        "runs list of a database in a read-only directory",
        "runs list",
        code=0,
        out="daily-triage  replay",
        old='exit 1, "attempt to write a readonly database"',
        **RO_DIR,
    ),
    row(
        "db current, read-only directory",
        "db current",
        code=0,
        out="up to date",
        old="exit 1, attempt to write a readonly database",
        **RO_DIR,
    ),
    row(
        "a run creating a database in a read-only directory",
        f"{REPLAY} --database sqlite:///{{data}}/new.db",
        code=2,
        err=f"cannot create the database {{data}}/new.db: {UNWRITABLE}",
        old='exit 1, "unable to open database file"',
        **RO_DIR,
    ),
    row(
        "a review writing a database in a read-only directory",
        "quarantine reject {item} --note noise",
        code=2,
        err=f"cannot write the database {{data}}/salvagelane.db: {UNWRITABLE}",
        old='exit 1, "attempt to write a readonly database"',
        **RO_DIR,
    ),
]


def _first_of_each_code(rows: list[Row]) -> frozenset[str]:
    first: dict[int, str] = {}
    for entry in rows:
        if entry.runner is run_plain:
            first.setdefault(entry.code, entry.name)
    return frozenset(first.values())


REAL_PROCESS_ROWS = _first_of_each_code(ROWS)
"""The rows run as a process of their own besides those whose runner needs one (signals,
a serve beside, a read-only directory): one per exit code."""


def _cases() -> Iterator[Any]:
    for entry in ROWS:
        backends = ("sqlite",) if entry.database is None else entry.backends
        for backend in backends:
            marks = [pytest.mark.postgres] if backend == "postgres" else []
            yield pytest.param(entry, backend, id=f"{entry.name} [{backend}]", marks=marks)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite database at the newest revision, copied by each row that needs one."""
    path = tmp_path_factory.mktemp("migrated") / "salvagelane.db"
    upgrade(f"sqlite:///{path}")
    return path


def build_project(
    entry: Row, backend: str, tmp_path: Path, request: pytest.FixtureRequest, migrated: Path
) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    if backend == "postgres":
        postgres = request.getfixturevalue("postgres_database")
        postgres.reset()
        database = postgres.url
    else:
        database = f"sqlite:///{root / 'data' / 'salvagelane.db'}"
    project = make_project(root, database, backend)
    if entry.database == "stored":
        store_run(project, migrated)
    project.values.update(root=str(root), db=database, data=str(root / "data"))
    if entry.prepare is not None:
        entry.prepare(project)
    return project


@pytest.mark.parametrize(("entry", "backend"), list(_cases()))
def test_exit_code(
    entry: Row, backend: str, tmp_path: Path, request: pytest.FixtureRequest, migrated: Path
) -> None:
    project = build_project(entry, backend, tmp_path, request, migrated)
    argv = [part.format(**project.values) for part in entry.argv]
    before, files_before = snapshot(project), files_of(project.root)

    result = entry.runner(entry, project, argv)

    shown = f"exit {result.code}\n--- stdout:\n{result.stdout}\n--- stderr:\n{result.stderr}"
    assert result.code == entry.code, shown
    if entry.out is not None:
        assert entry.out.format(**project.values) in result.stdout, shown
    if entry.err is not None:
        assert entry.err.format(**project.values) in result.stderr, shown
    if entry.code in (2, 130):
        # Refused or interrupted before anything started: no banner, no run printed.
        assert "salvagelane serve:" not in result.stdout, shown
        assert "status       " not in result.stdout, shown
    if not entry.changes:
        assert snapshot(project) == before, f"the database changed\n{shown}"
        assert files_of(project.root) == files_before, f"the files changed\n{shown}"


# --- every command has rows ----------------------------------------------------------------------


def _commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], bool]]:
    # list_commands/get_command, not .commands: a lazy group loads its commands on demand.
    context = click.Context(group)
    for name in group.list_commands(context):
        sub = group.get_command(context, name)
        assert sub is not None, name
        if isinstance(sub, click.Group):
            yield (*path, name), True
            yield from _commands(sub, (*path, name))
        else:
            yield (*path, name), False


def test_every_command_has_rows() -> None:
    """Each command and subcommand `salvagelane --help` lists has a row that exits 0 and
    one that exits 2; each group has its bare row. A new command needs its rows here."""
    from salvagelane.cli import cli

    missing: list[str] = []
    for path, is_group in _commands(cli):
        rows = [r for r in ROWS if r.argv[: len(path)] == path]
        if is_group:
            if not any(r.argv == path and r.code == 0 for r in rows):
                missing.append(f"salvagelane {' '.join(path)}: no bare-group row")
            continue
        for code in (0, 2):
            if not any(r.code == code for r in rows):
                missing.append(f"salvagelane {' '.join(path)}: no row exiting {code}")
    assert any(r.argv == () for r in ROWS), "bare salvagelane"
    assert missing == []


def test_ctrl_c_is_the_only_130() -> None:
    """130 belongs to Ctrl-C: no row but an interrupted one exits 130."""
    assert [r.name for r in ROWS if r.code == 130] == [
        r.name for r in ROWS if r.runner is run_interrupted_at_prompt
    ]
