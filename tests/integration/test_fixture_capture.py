"""``fixture capture`` writes a fixture whole or not at all (issue 29.8).

Before, it wrote its four files one by one into the target, without fsync: a capture
killed midway left a fixture of some files, which only ``--force`` could overwrite and
which ``replay`` then refused or compared wrongly. Now the files go into a directory
beside the target, are fsynced, and that directory is renamed into place.

The kill test kills real ``salvagelane fixture capture`` processes with SIGKILL as soon as
they start changing the file system (and at a few delays after), and checks each time
that the target is absent, or the fixture it was, or the whole new one; the leftover of a
killed capture blocks no later capture and is never taken for a fixture.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from salvagelane.errors import InputError
from salvagelane.fixtures.format import discover, write_fixture
from tests.support.cli import FIXTURE, clean_env, command, salvagelane

FILES = {
    "raw.txt": "[1, 2]\n",
    "meta.json": '{"instruction": "daily-triage", "usage": {}}\n',
    "expected.json": "{}\n",
}


def _stored_run_with_a_large_output(tmp_path: Path, size: int) -> tuple[str, str]:
    """A SQLite database holding one run whose attempt's raw output is ``size`` bytes;
    (the database URL, the run id)."""
    database = tmp_path / "store.db"
    url = f"sqlite:///{database}"
    run = salvagelane("run", "daily-triage", "--replay", str(FIXTURE), "--json", database=url)
    assert run.returncode == 0, run.stderr
    run_id: str = json.loads(run.stdout)["run_id"]
    line = b'{"summary": "a large output, line after line"}\n'
    raw = line * (size // len(line))
    with sqlite3.connect(database) as connection:
        connection.execute(
            "UPDATE attempts SET raw_output = ?, raw_length = ?, raw_sha256 = ?",
            (raw, len(raw), hashlib.sha256(raw).hexdigest()),
        )
    connection.close()
    return url, run_id


def _fixture_state(directory: Path) -> dict[str, Any] | None:
    """What ``directory`` holds, to compare captures: None when absent; else each file's
    SHA-256, ``meta.json`` parsed without the moment it was captured."""
    if not directory.exists():
        return None
    state: dict[str, Any] = {}
    for path in directory.iterdir():
        if path.name == "meta.json":
            meta = json.loads(path.read_text(encoding="utf-8"))
            meta["source"].pop("captured_at")
            state[path.name] = meta
        else:
            state[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def _entries(*directories: Path) -> set[str]:
    found: set[str] = set()
    for directory in directories:
        with contextlib.suppress(FileNotFoundError):
            found.update(f"{directory}/{name}" for name in os.listdir(directory))
    return found


def _capture_killed(url: str, run_id: str, target: Path, *, force: bool, after: float | str) -> int:
    """Start a capture into ``target``, SIGKILL it ``after`` seconds once it first changes
    the file system (a new entry beside or in ``target``), or (a file name) as soon as a
    directory beside ``target`` holds that file; its exit status."""
    args = ["fixture", "capture", run_id, "--to", str(target), *(["--force"] if force else [])]
    before = _entries(target.parent, target)
    proc = subprocess.Popen(
        command(*args),
        env=clean_env({"SALVAGELANE_DATABASE_URL": url}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while proc.poll() is None and _entries(target.parent, target) == before:
            time.sleep(0.0005)
        if isinstance(after, str):
            pattern = f".{target.name}.capture-*/{after}"
            while proc.poll() is None and not any(target.parent.glob(pattern)):
                time.sleep(0.0005)
        elif after:
            time.sleep(after)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    return proc.returncode


def test_a_killed_capture_leaves_no_fixture_or_a_whole_one(tmp_path: Path) -> None:
    url, run_id = _stored_run_with_a_large_output(tmp_path, 8 << 20)
    fixtures = tmp_path / "fixtures"
    reference = fixtures / "reference"
    done = salvagelane("fixture", "capture", run_id, "--to", str(reference), database=url)
    assert done.returncode == 0, done.stderr
    whole = _fixture_state(reference)
    assert whole is not None
    assert set(whole) == {"raw.txt", "meta.json", "expected.json", "definition.json", "prompt.json"}

    delays: tuple[float | str, ...] = (0.0, 0.01, 0.04, "definition.json")
    killed = 0
    # New targets, then one replaced again and again (--force: the old one moves aside).
    for number, after in enumerate(delays):
        target = fixtures / f"new-{number}"
        killed += _capture_killed(url, run_id, target, force=False, after=after) == -9
        assert _fixture_state(target) in (None, whole), f"{target} after a kill"
    for after in delays:
        target = fixtures / "reference"
        killed += _capture_killed(url, run_id, target, force=True, after=after) == -9
        assert _fixture_state(target) in (None, whole), f"{target} after a kill"
    assert killed, "no capture was killed before it ended: the test saw nothing"

    # Whatever the kills left behind, the next capture of each target just works...
    for target in [fixtures / f"new-{n}" for n in range(len(delays))] + [reference]:
        again = salvagelane(
            "fixture", "capture", run_id, "--to", str(target), "--force", database=url
        )
        assert again.returncode == 0, again.stderr
        assert _fixture_state(target) == whole
    # ... and leaves nothing of the killed ones, which replay never took for fixtures.
    assert sorted(path.name for path in fixtures.iterdir()) == sorted(
        [f"new-{n}" for n in range(len(delays))] + ["reference"]
    )
    assert len(discover([fixtures])) == len(delays) + 1


# --- the leftovers of a killed capture --------------------------------------------------------


def _dead_pid() -> int:
    """The id of a process that has ended (the capture that left a directory behind)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_leftover_staging_directory_blocks_nothing_and_is_no_fixture(tmp_path: Path) -> None:
    target = tmp_path / "captured"
    leftover = tmp_path / f".captured.capture-new-{_dead_pid()}-0badcafe"
    leftover.mkdir()
    (leftover / "raw.txt").write_text("half of it", encoding="utf-8")
    (leftover / "meta.json").write_text("{", encoding="utf-8")

    with pytest.raises(InputError, match="no fixtures"):
        discover([tmp_path])  # the half-written fixture is not replayed
    write_fixture(target, FILES)

    assert sorted(path.name for path in tmp_path.iterdir()) == ["captured"]
    assert {path.name: path.read_text("utf-8") for path in target.iterdir()} == FILES


def test_a_fixture_moved_aside_by_a_killed_capture_is_put_back(tmp_path: Path) -> None:
    """Killed between moving the old fixture aside and renaming the new one into place."""
    target = tmp_path / "captured"
    pid = _dead_pid()
    aside = tmp_path / f".captured.capture-old-{pid}-0badcafe"
    aside.mkdir()
    for name, text in FILES.items():
        (aside / name).write_text(text.upper(), encoding="utf-8")
    new = tmp_path / f".captured.capture-new-{pid}-0badcafe"
    new.mkdir()
    (new / "raw.txt").write_text("the new one", encoding="utf-8")

    with pytest.raises(InputError, match="not empty"):
        write_fixture(target, {"raw.txt": "other"})  # the old fixture is back: not replaced

    assert sorted(path.name for path in tmp_path.iterdir()) == ["captured"]
    assert {path.name: path.read_text("utf-8") for path in target.iterdir()} == {
        name: text.upper() for name, text in FILES.items()
    }


def test_force_replaces_the_fixture_and_keeps_other_files(tmp_path: Path) -> None:
    target = tmp_path / "captured"
    write_fixture(target, {**FILES, "definition.json": "{}\n"})
    (target / "NOTES.md").write_text("why this fixture exists", encoding="utf-8")

    write_fixture(target, FILES, force=True)

    assert {path.name: path.read_text("utf-8") for path in target.iterdir()} == {
        **FILES,
        "NOTES.md": "why this fixture exists",
    }  # the stale definition.json went with the fixture it belonged to
    assert sorted(path.name for path in tmp_path.iterdir()) == ["captured"]


def test_a_link_to_a_directory_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)

    write_fixture(tmp_path / "link", FILES)

    assert (tmp_path / "link").is_symlink()
    assert {path.name: path.read_text("utf-8") for path in real.iterdir()} == FILES
