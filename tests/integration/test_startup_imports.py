"""Each command imports what it uses: the cheap commands never load the heavy libraries.

Timing is the benchmark's job (benchmarks/startup.py); this test pins the cause, which
holds on any machine: which top-level packages a fresh process has imported once the
command has finished.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from salvagelane.cli import cli
from salvagelane.cli.app import COMMANDS

STORE_AND_NETWORK = frozenset({"sqlalchemy", "alembic", "psycopg", "httpx", "apscheduler"})
EVERYTHING_HEAVY = STORE_AND_NETWORK | {
    "jsonschema",
    "jsonschema_rs",
    "jinja2",
    "yaml",
    "structlog",
    "tenacity",
}

PROBE = """
import json, sys
from salvagelane.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def imported_by(argv: list[str], cwd: Path, *, top_level: bool = True) -> tuple[int, set[str]]:
    """The exit status and the packages (top-level ones, or every module) imported by
    one CLI invocation."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=120,
    )
    last = done.stdout.strip().splitlines()[-1]
    probe = json.loads(last)
    modules = set(probe["modules"])
    return probe["code"], {m.split(".")[0] for m in modules} if top_level else modules


CASES = [
    pytest.param(["--help"], EVERYTHING_HEAVY, id="help"),
    pytest.param(["--version"], EVERYTHING_HEAVY, id="version"),
    pytest.param(["quarantine", "--help"], EVERYTHING_HEAVY, id="group-help"),
    pytest.param(["run", "--help"], EVERYTHING_HEAVY, id="run-help"),
    pytest.param(
        [
            "salvage",
            "tests/fixtures/daily-triage-truncated/raw.txt",
            "--schema",
            "schemas/daily-triage-item.schema.json",
            "--items",
            "recommendations",
        ],
        STORE_AND_NETWORK | {"jinja2", "yaml", "structlog", "tenacity"},
        id="salvage",
    ),
    pytest.param(["check", "instructions"], STORE_AND_NETWORK, id="check"),
]


@pytest.mark.parametrize(("argv", "forbidden"), CASES)
def test_a_cheap_command_leaves_the_heavy_libraries_unloaded(
    argv: list[str], forbidden: frozenset[str], repo_root: Path
) -> None:
    code, modules = imported_by(argv, repo_root)
    assert code in (0, None), f"salvagelane {' '.join(argv)} exited {code}"
    assert not modules & forbidden, (
        f"salvagelane {' '.join(argv)} imported {sorted(modules & forbidden)}"
    )


def test_the_probe_sees_a_heavy_import_when_there_is_one(repo_root: Path, tmp_path: Path) -> None:
    # `db upgrade` opens the store: the probe must report SQLAlchemy, or it proves nothing.
    code, modules = imported_by(
        ["db", "upgrade", "--database", f"sqlite:///{tmp_path / 'salvagelane.db'}"], repo_root
    )
    assert code in (0, None)
    assert {"sqlalchemy", "alembic"} <= modules


def test_a_command_loads_only_its_own_command_module(repo_root: Path) -> None:
    code, modules = imported_by(["check", "instructions"], repo_root, top_level=False)
    assert code in (0, None)
    loaded = {m for m in modules if m.startswith("salvagelane.cli.") and m.endswith("_commands")}
    assert loaded == {"salvagelane.cli.salvage_commands"}


def test_the_group_help_loads_no_command_module(repo_root: Path) -> None:
    code, modules = imported_by(["--help"], repo_root, top_level=False)
    assert code in (0, None)
    assert not {m for m in modules if m.endswith("_commands")}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_summary_is_the_command_own_help(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    assert command.help is not None
    first_paragraph = " ".join(command.help.split("\n\n")[0].split())
    assert COMMANDS[name].summary == first_paragraph


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_listed_command_loads_and_answers_help(name: str) -> None:
    result = CliRunner().invoke(cli, [name, "--help"], prog_name="salvagelane")
    assert result.exit_code == 0, result.output
    assert f"Usage: salvagelane {name}" in result.output
