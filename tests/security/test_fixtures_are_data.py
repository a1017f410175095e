"""Fixtures are data (issue 12, item 1): nothing in a fixture, and no id read back from the
database, can make salvagelane load a definition from outside ``--instructions``.

A planted definition carries a context callable ``os:system`` that would create a marker
file. Every test names it the way an attacker would (an absolute path, a path relative to
the working directory, ``../`` traversal, a bare file name) and proves the refusal twice:
the command says what was wrong, where and what was expected (exit 2), and the marker does
not exist. ``test_the_planted_definition_runs_code_when_trusted`` shows the marker is a
real witness: loaded as a trusted definition, the callable does create it.

The commands run as real processes (``sys.executable -m salvagelane``, inheriting
PYTHONPATH); the test-suite path (``replayer_for``, as tests/integration/
test_fixture_suite.py replays tests/fixtures/) runs in this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from salvagelane.cli.fixture_commands import replayer_for
from salvagelane.definitions import load_instruction, resolve_context
from salvagelane.fixtures.format import discover

ROOT = Path(__file__).resolve().parents[2]
INSTRUCTIONS = ROOT / "instructions"
BUNDLED = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
NOT_AN_ID = "expected an instruction id"


def salvagelane(
    *args: str, cwd: Path, database: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in {"SALVAGELANE_LOG_FORMAT", "SALVAGELANE_SPOOL_DIR"}
    }
    environ.update(PYTHONUNBUFFERED="1", SALVAGELANE_DATABASE_URL=f"sqlite:///{database}")
    return subprocess.run(
        [sys.executable, "-m", "salvagelane", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ,
        timeout=120,
        check=False,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Attack:
    """A working directory holding ``planted/evil.yaml`` (and ``sub/``), and the marker
    file its context callable would create."""

    work: Path
    definition: Path
    marker: Path


@pytest.fixture
def attack(tmp_path: Path) -> Attack:
    """The bundled daily-triage definition, renamed, with every path absolute and one more
    context entry: ``os:system`` touching the marker. Its allow-list reads context, so
    anything that builds its salvage policy resolves (runs) every context entry."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "planted").mkdir()
    marker = tmp_path / "marker-code-ran"
    text = (INSTRUCTIONS / "daily-triage.yaml").read_text(encoding="utf-8")
    command = f"touch {shlex.quote(str(marker))}"
    replacements = {
        "id: daily-triage\n": "id: planted\n",
        "../schemas/": f"{ROOT / 'schemas'}/",
        "file: context/workstreams.yaml\n": (
            f"file: {json.dumps(str(INSTRUCTIONS / 'context' / 'workstreams.yaml'))}\n"
            "  pwn:\n"
            '    callable: "os:system"\n'
            f"    args: {{command: {json.dumps(command)}}}\n"
        ),
    }
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    definition = work / "planted" / "evil.yaml"
    definition.write_text(text, encoding="utf-8")
    return Attack(work=work, definition=definition, marker=marker)


def test_the_planted_definition_runs_code_when_trusted(attack: Attack) -> None:
    """The witness works: what the other tests refuse would have created the marker."""
    resolve_context(load_instruction(attack.definition))
    assert attack.marker.exists()


def fixture_naming(directory: Path, instruction: object) -> Path:
    """A copy of the bundled fixture whose meta.json names ``instruction``."""
    shutil.copytree(BUNDLED, directory)
    meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
    meta["instruction"] = instruction
    (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return directory


# (meta.json's instruction, the working directory under the attack's work/)
NAMED = {
    "absolute": (lambda a: str(a.definition), "."),
    "relative": (lambda a: "planted/evil.yaml", "."),
    "bare-file-name": (lambda a: "evil.yaml", "planted"),
    "dot-slash": (lambda a: "./planted/evil.yaml", "."),
    "traversal": (lambda a: "../planted/evil.yaml", "sub"),
    # ../../tmp/.../planted/evil: from the instructions directory, where <id>.yaml was
    # looked for, to the planted file.
    "traversal-from-instructions": (
        lambda a: os.path.relpath(a.definition.with_suffix(""), INSTRUCTIONS),
        ".",
    ),
    "unknown-id": (lambda a: "no-such-instruction", "."),
    # The planted definition's own id: it is not among the --instructions definitions.
    "id-defined-outside": (lambda a: "planted", "planted"),
}
KNOWN_SHAPE = {"unknown-id", "id-defined-outside"}  # ids by grammar, defined nowhere we look


@pytest.mark.parametrize("case", NAMED)
def test_replay_refuses_a_meta_json_naming_anything_but_a_known_id(
    attack: Attack, tmp_path: Path, case: str
) -> None:
    name, cwd = NAMED[case]
    instruction = name(attack)
    fixture = fixture_naming(tmp_path / "fixture", instruction)
    database = tmp_path / "unused.db"

    proc = salvagelane(
        "replay", str(fixture), "--use-current", "--instructions", str(INSTRUCTIONS),
        cwd=attack.work / cwd, database=database,
    )  # fmt: skip

    assert not attack.marker.exists(), "code from the fixture's definition ran"
    assert proc.returncode == 2, proc.stdout + proc.stderr
    shown = proc.stdout + proc.stderr
    assert f"{fixture / 'meta.json'}: instruction" in shown  # where
    if case in KNOWN_SHAPE:  # what was wrong, what was expected
        assert f"no instruction {instruction!r} in {INSTRUCTIONS}/" in shown
        assert "expected one of daily-triage" in shown
    else:
        assert f"{NOT_AN_ID} (" in shown
        assert f"got {json.dumps(instruction)}" in shown
        assert "never a path" in shown
    assert "refused" in proc.stdout.splitlines()[1].split()
    assert not database.exists()  # replay opens no database


def test_replay_json_reports_the_refusal(attack: Attack, tmp_path: Path) -> None:
    fixture = fixture_naming(tmp_path / "fixture", str(attack.definition))
    proc = salvagelane(
        "replay", str(fixture), "--instructions", str(INSTRUCTIONS), "--json",
        cwd=attack.work, database=tmp_path / "unused.db",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (report,) = json.loads(proc.stdout)["fixtures"]
    assert report["verdict"] == "refused"
    assert report["instruction"] is None  # never echoed as if it were an id
    assert NOT_AN_ID in report["error"]
    assert json.loads(proc.stdout)["counts"]["refused"] == 1
    assert not attack.marker.exists()


@pytest.mark.parametrize(
    "instruction", [None, 7, "", "Daily-Triage", "daily-triage\n", "a" * 64, "daily_triage"]
)
def test_replay_refuses_an_instruction_that_is_not_an_id(
    attack: Attack, tmp_path: Path, instruction: object
) -> None:
    fixture = fixture_naming(tmp_path / "fixture", instruction)
    proc = salvagelane(
        "replay", str(fixture), "--instructions", str(INSTRUCTIONS),
        cwd=attack.work, database=tmp_path / "unused.db",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{fixture / 'meta.json'}: instruction: {NOT_AN_ID}" in proc.stdout


def test_one_refused_fixture_does_not_stop_the_suite(attack: Attack, tmp_path: Path) -> None:
    """The others are still replayed and reported; the exit status is the refusal's."""
    suite = tmp_path / "suite"
    shutil.copytree(BUNDLED, suite / "good")
    fixture_naming(suite / "planted", str(attack.definition))
    proc = salvagelane(
        "replay", str(suite), "--use-current", "--instructions", str(INSTRUCTIONS), "--update",
        cwd=attack.work, database=tmp_path / "unused.db",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "2 fixture(s): 1 same, 1 refused"
    assert not attack.marker.exists()
    # --update never writes into a refused fixture.
    assert (suite / "planted" / "expected.json").read_bytes() == (
        BUNDLED / "expected.json"
    ).read_bytes()


@pytest.mark.parametrize("case", NAMED)
def test_the_fixture_suite_path_refuses_it_too(
    attack: Attack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """As tests/integration/test_fixture_suite.py replays tests/fixtures/: discover, then
    ``replayer_for(instructions).replay``."""
    name, cwd = NAMED[case]
    suite = tmp_path / "suite"
    fixture_naming(suite / "planted", name(attack))
    monkeypatch.chdir(attack.work / cwd)

    (found,) = discover([suite])
    replay = replayer_for(INSTRUCTIONS, use_current=True).replay(found)

    assert not attack.marker.exists(), "code from the fixture's definition ran"
    assert replay.verdict == "refused"
    assert replay.error is not None
    assert f"{found / 'meta.json'}: instruction" in replay.error


def test_the_id_grammar_is_the_one_of_the_definition_schema() -> None:
    # Imported here so the rest of this file also runs against code from before the fix.
    from salvagelane.definitions.ids import INSTRUCTION_ID_PATTERN, is_instruction_id

    schema = json.loads((ROOT / "schemas" / "instruction.schema.json").read_text("utf-8"))
    assert schema["properties"]["id"]["pattern"] == INSTRUCTION_ID_PATTERN
    assert is_instruction_id("daily-triage")
    for not_an_id in ("daily-triage\n", "../x", "x.yaml", "/x", "x/y", "", "-x", "a" * 64):
        assert not is_instruction_id(not_an_id), not_an_id


# --- files in a fixture name no other file ----------------------------------------------------


BUNDLED_FILES = {
    "../schemas/daily-triage-item.schema.json": ROOT / "schemas" / "daily-triage-item.schema.json",
    "../schemas/daily-triage-report.schema.json": (
        ROOT / "schemas" / "daily-triage-report.schema.json"
    ),
    "context/workstreams.yaml": INSTRUCTIONS / "context" / "workstreams.yaml",
}


def write_definition_json(
    fixture: Path, text: str, files: dict[str, str] | None = None, *, sha256: str | None = None
) -> str:
    """A ``definition.json`` in ``fixture`` carrying the definition ``text`` and ``files``
    (default: the bundled definition's, read from the repository); its version."""
    # Imported here so the rest of this file also runs against code from before the fix.
    from salvagelane.definitions import DefinitionSnapshot

    if files is None:
        files = {name: path.read_text("utf-8") for name, path in BUNDLED_FILES.items()}
    snapshot = DefinitionSnapshot(name="daily-triage.yaml", text=text, files=files)
    document = {
        "sha256": sha256 or snapshot.sha256,
        "instruction": "daily-triage",
        "definition": snapshot.to_json(),
    }
    (fixture / "definition.json").write_text(json.dumps(document), encoding="utf-8")
    return snapshot.sha256


def test_a_fixtures_definition_runs_no_callable_the_operators_does_not_name(
    attack: Attack, tmp_path: Path
) -> None:
    """definition.json is data: its allow-list context from ``os:system`` would run code.
    It runs only when the operator's definition of the id names the same callable."""
    text = (INSTRUCTIONS / "daily-triage.yaml").read_text(encoding="utf-8")
    command = f"touch {shlex.quote(str(attack.marker))}"
    planted = text.replace(
        "    file: context/workstreams.yaml\n",
        f'    callable: "os:system"\n    args: {{command: {json.dumps(command)}}}\n',
    )
    assert planted != text
    fixture = tmp_path / "fixture"
    shutil.copytree(BUNDLED, fixture)
    write_definition_json(fixture, planted)

    for extra in ((), ("--update",)):
        proc = salvagelane(
            "replay", str(fixture), "--instructions", str(INSTRUCTIONS), *extra,
            cwd=attack.work, database=tmp_path / "unused.db",
        )  # fmt: skip

        assert not attack.marker.exists(), "code named by a fixture's definition ran"
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"{fixture / 'definition.json'}: daily-triage.yaml (stored " in proc.stdout
        assert "code named by a stored copy runs only when the operator's definition" in (
            proc.stdout
        )
        assert proc.stdout.splitlines()[-1] == "1 fixture(s): 1 refused"
    assert (fixture / "expected.json").read_bytes() == (BUNDLED / "expected.json").read_bytes()


def test_a_fixtures_definition_is_never_read_from_the_paths_it_names(tmp_path: Path) -> None:
    """A schema named by an absolute path is read from definition.json, never from disk:
    one definition.json does not hold is refused, though the file exists."""
    text = (INSTRUCTIONS / "daily-triage.yaml").read_text(encoding="utf-8")
    absolute = str(ROOT / "schemas" / "daily-triage-item.schema.json")
    pointed = text.replace("../schemas/daily-triage-item.schema.json", absolute)
    files = {name: path.read_text("utf-8") for name, path in BUNDLED_FILES.items()}
    fixture = tmp_path / "fixture"
    shutil.copytree(BUNDLED, fixture)
    write_definition_json(fixture, pointed, files)

    proc = salvagelane(
        "replay", str(fixture), "--instructions", str(INSTRUCTIONS),
        cwd=tmp_path, database=tmp_path / "unused.db",
    )  # fmt: skip

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "output.item_schema: expected a file the stored definition holds" in proc.stdout
    assert json.dumps(absolute) in proc.stdout


@pytest.mark.parametrize("tamper", ["sha256", "id"])
def test_a_fixtures_definition_must_be_its_version_and_its_instruction(
    tmp_path: Path, tamper: str
) -> None:
    text = (INSTRUCTIONS / "daily-triage.yaml").read_text(encoding="utf-8")
    fixture = tmp_path / "fixture"
    shutil.copytree(BUNDLED, fixture)
    if tamper == "sha256":
        write_definition_json(fixture, text, sha256="0" * 64)
        expected = "is not the version 000000000000 that names it"
    else:
        write_definition_json(fixture, text.replace("id: daily-triage\n", "id: planted\n"))
        expected = "defines 'planted', but meta.json names 'daily-triage'"

    proc = salvagelane(
        "replay", str(fixture), "--instructions", str(INSTRUCTIONS),
        cwd=tmp_path, database=tmp_path / "unused.db",
    )  # fmt: skip

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert expected in proc.stdout
    assert str(fixture / "definition.json") in proc.stdout


@pytest.mark.parametrize("name", ["raw.txt", "meta.json", "expected.json", "definition.json"])
def test_replay_refuses_a_fixture_file_that_is_a_link(tmp_path: Path, name: str) -> None:
    """A link would let a fixture read a file of this machine into a replay (and, with
    --update, into the expected.json it writes)."""
    fixture = tmp_path / "fixture"
    shutil.copytree(BUNDLED, fixture)
    write_definition_json(fixture, (INSTRUCTIONS / "daily-triage.yaml").read_text("utf-8"))
    outside = tmp_path / "outside"
    outside.write_bytes((fixture / name).read_bytes())
    (fixture / name).unlink()
    (fixture / name).symlink_to(outside)
    before = {path.name: path.read_bytes() for path in fixture.iterdir()}

    proc = salvagelane(
        "replay", str(fixture), "--use-current", "--instructions", str(INSTRUCTIONS), "--update",
        cwd=tmp_path, database=tmp_path / "unused.db",
    )  # fmt: skip

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{fixture / name}: expected a regular file inside the fixture, got a symbolic link" in (
        proc.stdout
    )
    assert proc.stdout.splitlines()[-1] == "1 fixture(s): 1 refused"
    assert {path.name: path.read_bytes() for path in fixture.iterdir()} == before
    assert (fixture / name).is_symlink()


def test_replay_refuses_a_fifo_without_waiting_for_it(tmp_path: Path) -> None:
    fixture = tmp_path / "fixture"
    shutil.copytree(BUNDLED, fixture)
    (fixture / "raw.txt").unlink()
    os.mkfifo(fixture / "raw.txt")

    proc = salvagelane(
        "replay", str(fixture), "--instructions", str(INSTRUCTIONS),
        cwd=tmp_path, database=tmp_path / "unused.db",
    )  # fmt: skip  # the 120 s subprocess timeout stands for a hang

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{fixture / 'raw.txt'}: expected a regular file inside the fixture, got a FIFO" in (
        proc.stdout
    )


def test_run_replay_reads_no_linked_file_from_a_fixture_directory(tmp_path: Path) -> None:
    """``run --replay DIR`` reads DIR's raw.txt and meta.json as fixture data too."""
    secret = tmp_path / "not-for-the-database.txt"
    secret.write_text('{"summary": "a file of this machine", "recommendations": []}', "utf-8")
    fixture = tmp_path / "fixture"
    shutil.copytree(BUNDLED, fixture)
    (fixture / "raw.txt").unlink()
    (fixture / "raw.txt").symlink_to(secret)
    database = tmp_path / "store.db"

    proc = salvagelane(
        "run", "daily-triage", "--replay", str(fixture), "--instructions", str(INSTRUCTIONS),
        cwd=tmp_path, database=database,
    )  # fmt: skip

    # Refused before the database is opened (exit 2): nothing of the file is stored.
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "got a symbolic link" in proc.stderr
    assert not database.exists()


# --- ids read back from the database ----------------------------------------------------------


def stored_run_naming(tmp_path: Path, instruction: str) -> tuple[Path, str]:
    """A SQLite store with a run of the bundled fixture (one quarantined item, #1), its
    stored instruction id then overwritten with ``instruction``; (database, run id)."""
    database = tmp_path / "store.db"
    run = salvagelane(
        "run", "daily-triage", "--replay", str(BUNDLED), "--instructions", str(INSTRUCTIONS),
        "--json", cwd=tmp_path, database=database,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    run_id: str = json.loads(run.stdout)["run_id"]
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE runs SET instruction_id = ?", (instruction,))
        connection.execute("UPDATE quarantined_items SET instruction_id = ?", (instruction,))
    connection.close()
    return database, run_id


def test_quarantine_approve_refuses_a_stored_id_that_is_a_path(
    attack: Attack, tmp_path: Path
) -> None:
    database, _ = stored_run_naming(tmp_path, str(attack.definition))
    corrected = json.loads((BUNDLED / "complete.json").read_text(encoding="utf-8"))
    item = dict(corrected["recommendations"][7], rank=8)

    proc = salvagelane(
        "quarantine", "approve", "1", "--stdin", "--instructions", str(INSTRUCTIONS),
        cwd=attack.work, database=database, stdin=json.dumps(item),
    )  # fmt: skip

    assert not attack.marker.exists(), "code named by a stored id ran"
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert NOT_AN_ID in proc.stderr
    assert json.dumps(str(attack.definition)) in proc.stderr
    assert "quarantined item #1" in proc.stderr


def test_runs_redeliver_refuses_a_stored_id_that_is_a_path(attack: Attack, tmp_path: Path) -> None:
    database, run_id = stored_run_naming(tmp_path, "../planted/evil.yaml")

    proc = salvagelane(
        "runs", "redeliver", run_id, "--instructions", str(INSTRUCTIONS),
        cwd=attack.work / "sub", database=database,
    )  # fmt: skip

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert NOT_AN_ID in proc.stderr
    assert f"run {run_id}" in proc.stderr
    assert not attack.marker.exists()


@pytest.mark.parametrize("command", ["fixture capture RUN", "quarantine export 1"])
def test_capture_and_export_write_no_fixture_naming_a_path(
    attack: Attack, tmp_path: Path, command: str
) -> None:
    """A stored id that is not an id never reaches a meta.json someone else replays."""
    database, run_id = stored_run_naming(tmp_path, str(attack.definition))
    destination = tmp_path / "captured"
    args = command.replace("RUN", run_id).split()

    proc = salvagelane(*args, "--to", str(destination), cwd=attack.work, database=database)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"run {run_id}: instruction: {NOT_AN_ID}" in proc.stderr
    assert not destination.exists()


# --- fixture files that are not regular files (issue 29.8) ------------------------------------

FIXTURE_FILES = ("raw.txt", "meta.json", "expected.json", "definition.json")


def _directory(path: Path, tmp_path: Path) -> str:
    path.mkdir()
    return "a directory"


def _fifo(path: Path, tmp_path: Path) -> str:
    os.mkfifo(path)
    return "a FIFO"


def _link_to_a_directory(path: Path, tmp_path: Path) -> str:
    (tmp_path / "elsewhere").mkdir()
    path.symlink_to(tmp_path / "elsewhere")
    return "a symbolic link"


def _link_to_a_fifo(path: Path, tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "elsewhere.fifo")
    path.symlink_to(tmp_path / "elsewhere.fifo")
    return "a symbolic link"


def _device(path: Path, tmp_path: Path) -> str:
    import stat

    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    return "a device"


NOT_REGULAR = {
    "directory": _directory,
    "fifo": _fifo,
    "link-to-a-directory": _link_to_a_directory,
    "link-to-a-fifo": _link_to_a_fifo,
    "device": _device,
}


def _fixture_with(tmp_path: Path, name: str, kind: str) -> tuple[Path, str]:
    """A copy of the bundled fixture (with its definition) whose file ``name`` is replaced
    by ``kind``; the fixture and the word the refusal uses for it."""
    fixture = tmp_path / "suite" / "hostile"
    shutil.copytree(BUNDLED, fixture)
    write_definition_json(fixture, (INSTRUCTIONS / "daily-triage.yaml").read_text("utf-8"))
    (fixture / name).unlink()
    return fixture, NOT_REGULAR[kind](fixture / name, tmp_path)


@pytest.mark.parametrize("kind", list(NOT_REGULAR))
@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_a_fixture_file_that_is_not_a_regular_file_refuses_that_fixture_only(
    tmp_path: Path, name: str, kind: str
) -> None:
    """Replayed as the test suite does (``replayer_for``), with and without --use-current:
    the fixture is refused naming the file; the suite is not aborted."""
    fixture, got = _fixture_with(tmp_path, name, kind)
    shutil.copytree(BUNDLED, tmp_path / "suite" / "good")

    for use_current in (True, False):
        replayer = replayer_for(INSTRUCTIONS, use_current=use_current)
        verdicts = {path.name: replayer.replay(path) for path in discover([tmp_path / "suite"])}

        hostile = verdicts["hostile"]
        assert hostile.verdict == "refused", hostile
        assert hostile.error == (
            f"{fixture / name}: expected a regular file inside the fixture, got {got}"
            + (" (a fixture names no other file)" if got == "a symbolic link" else "")
        )
        if use_current:
            assert verdicts["good"].verdict == "same", verdicts["good"]


def test_a_directory_expected_json_is_one_refused_fixture_in_the_replay(tmp_path: Path) -> None:
    """The reported case: ``replay`` aborted on IsADirectoryError, the others unreplayed."""
    fixture, _ = _fixture_with(tmp_path, "expected.json", "directory")
    for name in ("a-good", "z-good"):
        shutil.copytree(BUNDLED, tmp_path / "suite" / name)

    proc = salvagelane(
        "replay", str(tmp_path / "suite"), "--use-current", "--instructions", str(INSTRUCTIONS),
        cwd=tmp_path, database=tmp_path / "unused.db",
    )  # fmt: skip

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == ""
    said = [line for line in proc.stdout.splitlines() if "expected.json" in line]
    assert said == [
        f"    {fixture / 'expected.json'}: expected a regular file inside the fixture, "
        "got a directory"
    ]
    assert proc.stdout.splitlines()[-1] == "3 fixture(s): 2 same, 1 refused"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
@pytest.mark.parametrize("kind", ["directory", "fifo", "link-to-a-directory"])
def test_refusing_a_fixture_file_leaks_no_descriptor(tmp_path: Path, kind: str) -> None:
    fixture, _ = _fixture_with(tmp_path, "expected.json", kind)
    replayer = replayer_for(INSTRUCTIONS, use_current=True)
    replayer.replay(fixture)  # loads the definition once, outside the count
    before = len(os.listdir("/proc/self/fd"))

    for _ in range(50):
        # Before the fix: IsADirectoryError, raised after its descriptor leaked.
        with contextlib.suppress(Exception):
            replayer.replay(fixture)

    assert len(os.listdir("/proc/self/fd")) == before
