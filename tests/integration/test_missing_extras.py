"""An install without an extra (docs/install.md): the core commands work, and each command
or option that needs a missing extra names it and exits 2.

The suite's venv holds every extra, so each test runs ``salvagelane`` as a real process
with the extra's packages hidden: a ``sitecustomize`` on PYTHONPATH puts an import blocker
first on ``sys.meta_path``, which raises ModuleNotFoundError for them as an install
without them would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from salvagelane.cli.app import EXIT_USAGE
from tests.support.cli import salvagelane
from tests.support.databases import PostgresDatabase
from tests.support.serve import Processes

EXTRAS = {
    "postgres": ("psycopg", "psycopg_binary", "psycopg_pool"),
    "queue": ("procrastinate",),
    "ui": ("starlette", "uvicorn"),
    "metrics": ("prometheus_client",),
}
EVERY_EXTRA = tuple(name for names in EXTRAS.values() for name in names)

BLOCKER = """\
import sys

BLOCKED = frozenset({blocked!r})


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Blocker())
"""

# Nothing listens there: a message that needs a connection would say so instead.
NO_SERVER = "postgresql://postgres@127.0.0.1:9/salvagelane"


def without(tmp_path: Path, *packages: str) -> dict[str, str]:
    """The environment of a process in which ``packages`` cannot be imported."""
    directory = tmp_path / "blocker"
    directory.mkdir(exist_ok=True)
    (directory / "sitecustomize.py").write_text(
        BLOCKER.format(blocked=sorted(packages)), encoding="utf-8"
    )
    path = [str(directory), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path)}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """``salvagelane init`` run without any extra."""
    done = salvagelane("init", "demo", cwd=tmp_path, env=without(tmp_path, *EVERY_EXTRA))
    assert done.returncode == 0, done.stderr
    return tmp_path / "demo"


def test_the_blocker_hides_what_it_names(tmp_path: Path) -> None:
    # The premise of every test below: an import of a hidden package fails in the child.
    probe = "import starlette.requests"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **without(tmp_path, "starlette")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'starlette'" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["run", "daily-triage", "--replay", "fixtures/daily-triage-truncated"]),
        pytest.param(
            ["try", "daily-triage", "--sample", "fixtures/daily-triage-truncated/raw.txt"]
        ),
        pytest.param(["check"]),
    ],
    ids=["run-replay", "try", "check"],
)
def test_the_core_commands_need_no_extra(tmp_path: Path, project: Path, args: list[str]) -> None:
    done = salvagelane(*args, cwd=project, env=without(tmp_path, *EVERY_EXTRA))
    assert done.returncode == 0, done.stderr


def test_the_read_commands_need_no_extra(tmp_path: Path, project: Path) -> None:
    env = without(tmp_path, *EVERY_EXTRA)
    ran = salvagelane(
        "run", "daily-triage", "--replay", "fixtures/daily-triage-truncated", cwd=project, env=env
    )
    assert ran.returncode == 0, ran.stderr
    for args in (["runs", "list"], ["quarantine", "list"], ["health"]):
        done = salvagelane(*args, cwd=project, env=env)
        assert done.returncode == 0, (args, done.stderr)
        assert "daily-triage" in done.stdout, args


def test_serve_in_process_without_metrics_needs_no_extra(
    tmp_path: Path, project: Path, processes: Processes
) -> None:
    node = processes.serve(project, env=without(tmp_path, *EVERY_EXTRA))
    node.wait_for_line(r"^salvagelane serve: ")
    assert node.stop(signal.SIGTERM) == 0, node.describe()


def message(extra: str, what: str) -> str:
    return f"salvagelane: error: {what}: pip install 'salvagelane[{extra}]'\n"


QUEUE = (
    "the task queue (`serve --dispatch queue`, `salvagelane worker`, `runs cancel`) needs "
    "its packages (procrastinate, psycopg)"
)
POSTGRES = (
    "postgresql+psycopg://postgres@127.0.0.1:9/salvagelane: a PostgreSQL database needs "
    "its driver (psycopg)"
)
METRICS = "--metrics-port needs the metrics packages (prometheus-client)"

CASES = [
    pytest.param(
        "ui",
        "starlette",
        ["ui", "--port", "0"],
        "salvagelane ui needs the review page's packages",
        id="ui-without-starlette",
    ),
    pytest.param(
        "ui",
        "uvicorn",
        ["ui", "--port", "0"],
        "salvagelane ui needs the review page's packages",
        id="ui-without-uvicorn",
    ),
    pytest.param(
        "postgres",
        "psycopg",
        ["runs", "list", "--database", NO_SERVER],
        POSTGRES,
        id="postgres-read",
    ),
    pytest.param(
        "postgres",
        "psycopg",
        [
            "run",
            "daily-triage",
            "--replay",
            "fixtures/daily-triage-truncated",
            "--database",
            NO_SERVER,
        ],
        POSTGRES,
        id="postgres-run",
    ),
    pytest.param(
        "postgres",
        "psycopg",
        ["serve", "--database", NO_SERVER],
        POSTGRES,
        id="postgres-serve",
    ),
    pytest.param(
        "queue",
        "procrastinate",
        ["serve", "--dispatch", "queue"],
        QUEUE,
        id="queue-serve",
    ),
    pytest.param(
        "queue",
        "procrastinate",
        ["worker", "--database", NO_SERVER],
        QUEUE,
        id="queue-worker",
    ),
    pytest.param(
        "queue",
        "procrastinate",
        ["runs", "cancel", "abc"],
        QUEUE,
        id="queue-runs-cancel",
    ),
    pytest.param(
        "metrics",
        "prometheus_client",
        ["serve", "--metrics-port", "0"],
        METRICS,
        id="metrics-serve",
    ),
    pytest.param(
        "metrics",
        "prometheus_client",
        ["worker", "--metrics-port", "0", "--database", NO_SERVER],
        METRICS,
        id="metrics-worker",
    ),
]


@pytest.mark.parametrize(("extra", "hidden", "args", "what"), CASES)
def test_a_missing_extra_is_named_and_exits_2(
    tmp_path: Path, project: Path, extra: str, hidden: str, args: list[str], what: str
) -> None:
    done = salvagelane(*args, cwd=project, env=without(tmp_path, hidden))
    assert (done.returncode, done.stderr) == (EXIT_USAGE, message(extra, what))
    assert done.stdout == ""
    # Refused before anything started: the SQLite database was not even created.
    assert not (project / "salvagelane.db").exists()


@pytest.mark.postgres
def test_db_upgrade_on_postgresql_without_the_queue(
    tmp_path: Path, postgres_database: PostgresDatabase
) -> None:
    postgres_database.reset()
    done = salvagelane(
        "db",
        "upgrade",
        "--database",
        postgres_database.url,
        cwd=tmp_path,
        env=without(tmp_path, *EXTRAS["queue"]),
    )
    assert done.returncode == 0, done.stderr
    assert "the task queue's tables are not installed" in done.stdout
    assert "pip install 'salvagelane[queue]'" in done.stdout
