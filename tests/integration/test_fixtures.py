"""``salvagelane fixture capture`` and ``salvagelane replay`` through the real command line (in this
process), on SQLite and PostgreSQL: a stored run round-trips through a fixture, a changed
definition shows."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
from pathlib import Path

from salvagelane.cli.fixture_commands import PROGRESS_THRESHOLD
from tests.support.cli import FIXTURE, ROOT, clean_env, command
from tests.support.cli import salvagelane_here as salvagelane

SECRET = "sk-or-v1-fixture-capture-must-never-write-this"


def stored_run(database: str, env: dict[str, str] | None = None) -> str:
    upgraded = salvagelane("db", "upgrade", database=database)
    assert upgraded.returncode == 0, upgraded.stderr
    run = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), "--json", database=database, env=env
    )
    assert run.returncode == 0, run.stderr
    run_id: str = json.loads(run.stdout)["run_id"]
    return run_id


def lowered_max_items(tmp_path: Path) -> Path:
    """A copy of the bundled definitions keeping 6 items: one fewer than the 7 complete
    ones of the truncated fixture, so its 7th is lost to over_limit."""
    copy = tmp_path / "definitions"
    shutil.copytree(ROOT / "instructions", copy / "instructions")
    shutil.copytree(ROOT / "schemas", copy / "schemas")
    definition = copy / "instructions" / "daily-triage.yaml"
    text = definition.read_text(encoding="utf-8")
    assert "  max_items: 8\n" in text
    definition.write_text(text.replace("  max_items: 8\n", "  max_items: 6\n"), encoding="utf-8")
    return copy / "instructions"


def test_capture_replay_round_trip_and_a_changed_definition(
    database_url: str, tmp_path: Path
) -> None:
    run_id = stored_run(database_url)
    fixture = tmp_path / "captured"

    captured = salvagelane(
        "fixture", "capture", run_id[:8], "--to", str(fixture), database=database_url
    )
    assert captured.returncode == 0, captured.stderr
    assert f"run          {run_id}, attempt 1" in captured.stdout
    expected = "expected     partial: 7 item(s) kept, 1 quarantined (item 8: truncated)"
    assert expected in captured.stdout
    assert (fixture / "raw.txt").read_bytes() == (FIXTURE / "raw.txt").read_bytes()
    meta = json.loads((fixture / "meta.json").read_text(encoding="utf-8"))
    assert meta["instruction"] == "daily-triage"
    assert (meta["finish_reason"], meta["native_finish_reason"]) == ("length", "length")
    assert meta["source"]["run_id"] == run_id
    assert meta["source"]["attempt"] == 1
    # What the run stored is what the bundled fixture records.
    assert (fixture / "expected.json").read_text(encoding="utf-8") == (
        FIXTURE / "expected.json"
    ).read_text(encoding="utf-8")

    assert "definition   stored " in captured.stdout
    carried = json.loads((fixture / "definition.json").read_text(encoding="utf-8"))
    assert carried["instruction"] == "daily-triage"
    assert carried["definition"]["text"] == (ROOT / "instructions" / "daily-triage.yaml").read_text(
        encoding="utf-8"
    )
    assert set(carried["definition"]["files"]) == {
        "../schemas/daily-triage-item.schema.json",
        "../schemas/daily-triage-report.schema.json",
        "context/workstreams.yaml",
    }

    same = salvagelane("replay", str(fixture), database=database_url)
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.splitlines()[1].split() == [str(fixture), "daily-triage", "partial", "same"]

    again = salvagelane("fixture", "capture", run_id, "--to", str(fixture), database=database_url)
    assert again.returncode == 2
    assert "not empty" in again.stderr
    assert "--force" in again.stderr
    forced = salvagelane(
        "fixture", "capture", run_id, "--to", str(fixture), "--force", database=database_url
    )
    assert forced.returncode == 0, forced.stderr

    instructions = lowered_max_items(tmp_path)
    # The fixture carries the definition its run was made with: today's edit is not used...
    kept = salvagelane(
        "replay", str(fixture), "--instructions", str(instructions), "--json", database=database_url
    )
    assert kept.returncode == 0, kept.stdout + kept.stderr
    (report,) = json.loads(kept.stdout)["fixtures"]
    assert (report["verdict"], report["definition"]) == ("same", f"stored {carried['sha256'][:12]}")
    # ... unless asked for, and then the replay says what differs.
    differs = salvagelane(
        "replay", str(fixture), "--use-current", "--instructions", str(instructions), "--json",
        database=database_url,
    )  # fmt: skip
    assert differs.returncode == 1, differs.stderr
    (report,) = json.loads(differs.stdout)["fixtures"]
    assert report["verdict"] == "differs"
    assert report["definition"] == "current"
    assert report["note"] == (
        f"using the current definition of daily-triage ({instructions / 'daily-triage.yaml'}), "
        f"not the version the fixture's run (captured) was made with (stored "
        f"{carried['sha256'][:12]}): daily-triage.yaml changed (guardrails)"
    )
    assert report["differences"] == [
        {
            "kind": "item_lost",
            "index": 6,
            "expected": "accepted",
            "actual": "quarantined: over_limit",
            "message": "item 7 lost: was accepted, now quarantined: over_limit",
        }
    ]

    updated = salvagelane(
        "replay", str(fixture), "--use-current", "--instructions", str(instructions), "--update",
        database=database_url,
    )  # fmt: skip
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert "item 7 lost: was accepted, now quarantined: over_limit" in updated.stdout
    assert "expected.json rewritten" in updated.stdout
    assert "note: using the current definition of daily-triage" in updated.stdout
    passes = salvagelane(
        "replay", str(fixture), "--use-current", "--instructions", str(instructions),
        database=database_url,
    )  # fmt: skip
    assert passes.returncode == 0, passes.stdout
    assert passes.stdout.splitlines()[-1] == "1 fixture(s): 1 same"
    # ... and the bundled definition now keeps one item more than recorded.
    gained = salvagelane("replay", str(fixture), "--use-current", database=database_url)
    assert gained.returncode == 1
    assert "item 7 gained: was quarantined: over_limit, now accepted" in gained.stdout


def test_capture_never_writes_a_secret(database_url: str, tmp_path: Path) -> None:
    env = {"OPENROUTER_API_KEY": SECRET}
    run_id = stored_run(database_url, env=env)
    fixture = tmp_path / "captured"

    captured = salvagelane(
        "fixture", "capture", run_id, "--to", str(fixture), database=database_url, env=env
    )
    assert captured.returncode == 0, captured.stderr

    secrets = {v for k, v in os.environ.items() if k.endswith("_API_KEY") and v} | {SECRET}
    for path in fixture.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "Authorization" not in text, path
        assert not any(secret in text for secret in secrets), path
    meta = json.loads((fixture / "meta.json").read_text(encoding="utf-8"))
    assert set(meta) == {
        "instruction", "finish_reason", "native_finish_reason", "model", "usage", "source",
    }  # fmt: skip
    assert "system" not in meta["source"]
    assert "user" not in meta["source"]


def test_capture_refuses_output_holding_a_secret(database_url: str, tmp_path: Path) -> None:
    """A key that turns up in the model's own text is never copied into a fixture."""
    leaked = tmp_path / "leaked"
    leaked.mkdir()
    raw = (FIXTURE / "raw.txt").read_text(encoding="utf-8")
    (leaked / "raw.txt").write_text(raw.replace("billing-migration", SECRET, 1), encoding="utf-8")
    shutil.copy(FIXTURE / "meta.json", leaked / "meta.json")
    upgraded = salvagelane("db", "upgrade", database=database_url)
    assert upgraded.returncode == 0, upgraded.stderr
    run = salvagelane(
        "run", "daily-triage", "--replay", str(leaked), "--json", database=database_url
    )
    run_id = json.loads(run.stdout)["run_id"]

    refused = salvagelane(
        "fixture", "capture", run_id, "--to", str(tmp_path / "out"), database=database_url,
        env={"EXAMPLE_API_KEY": SECRET},
    )  # fmt: skip
    assert refused.returncode == 2
    assert "EXAMPLE_API_KEY" in refused.stderr
    assert SECRET not in refused.stderr
    assert not (tmp_path / "out").exists()


def test_capture_errors_name_the_run_and_attempt(database_url: str, tmp_path: Path) -> None:
    run_id = stored_run(database_url)
    missing = salvagelane(
        "fixture", "capture", run_id, "--attempt", "3", "--to", str(tmp_path / "x"),
        database=database_url,
    )  # fmt: skip
    assert missing.returncode == 2
    assert f"run {run_id}: no attempt 3: expected one of its attempts (1)" in missing.stderr
    unknown = salvagelane(
        "fixture", "capture", "deadbeef-0000", "--to", str(tmp_path / "x"), database=database_url
    )
    assert unknown.returncode == 2
    assert "deadbeef-0000" in unknown.stderr


def test_replay_without_expected_outcome_hints_at_update(tmp_path: Path) -> None:
    unused = f"sqlite:///{tmp_path / 'unused.db'}"  # replay never opens a database
    fixture = tmp_path / "suite" / "new"
    fixture.mkdir(parents=True)
    shutil.copy(FIXTURE / "raw.txt", fixture / "raw.txt")
    shutil.copy(FIXTURE / "meta.json", fixture / "meta.json")

    # Hand-made: no definition.json, so only the current definition can replay it.
    refused = salvagelane("replay", str(tmp_path / "suite"), database=unused)
    assert refused.returncode == 2, refused.stdout
    assert f"{fixture}: no definition.json: the fixture does not carry the definition" in (
        refused.stdout
    )
    assert "replay it with --use-current" in refused.stdout
    missing = salvagelane("replay", str(tmp_path / "suite"), "--use-current", database=unused)
    assert missing.returncode == 1
    assert "no expected outcome recorded" in missing.stdout
    assert f"salvagelane replay {fixture} --update" in missing.stdout

    recorded = salvagelane(
        "replay", str(tmp_path / "suite"), "--use-current", "--update", database=unused
    )
    assert recorded.returncode == 0, recorded.stdout
    assert (fixture / "expected.json").read_bytes() == (FIXTURE / "expected.json").read_bytes()
    assert not (tmp_path / "unused.db").exists()

    empty = tmp_path / "empty"
    empty.mkdir()
    none = salvagelane("replay", str(empty), database=unused)
    assert none.returncode == 2
    assert "no fixtures" in none.stderr


def test_capture_keeps_crlf_and_bytes_that_are_not_utf8(database_url: str, tmp_path: Path) -> None:
    """A provider's CRLF line ends and a stray non-UTF-8 byte reach the fixture byte for
    byte, and replaying it reproduces the run (the item holding the byte quarantined)."""
    received = tmp_path / "received"
    received.mkdir()
    raw = (FIXTURE / "raw.txt").read_bytes().replace(b"\n", b"\r\n")
    marker = b"auth-token-rotation"
    assert raw.count(marker) == 1
    raw = raw.replace(marker, b"auth-token-\xff\xferotation")
    (received / "raw.txt").write_bytes(raw)
    shutil.copy(FIXTURE / "meta.json", received / "meta.json")
    upgraded = salvagelane("db", "upgrade", database=database_url)
    assert upgraded.returncode == 0, upgraded.stderr
    run = salvagelane(
        "run", "daily-triage", "--replay", str(received), "--json", database=database_url
    )
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)["run_id"]
    fixture = tmp_path / "captured"

    captured = salvagelane(
        "fixture", "capture", run_id, "--to", str(fixture), database=database_url
    )

    assert captured.returncode == 0, captured.stderr
    assert (fixture / "raw.txt").read_bytes() == raw
    expected = json.loads((fixture / "expected.json").read_text(encoding="utf-8"))
    assert [item["index"] for item in expected["items"]] == [0, 2, 3, 4, 5, 6]
    assert [(q["index"], q["reason"]) for q in expected["quarantined"]] == [
        (1, "malformed"),  # the strict parse refuses the byte that is not UTF-8
        (7, "truncated"),
    ]
    same = salvagelane("replay", str(fixture), "--json", database=database_url)
    assert same.returncode == 0, same.stdout + same.stderr
    (report,) = json.loads(same.stdout)["fixtures"]
    assert (report["verdict"], report["differences"]) == ("same", [])


def replay_at_a_terminal(*paths: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """``salvagelane replay PATHS`` with stderr on a pseudo-terminal (as at a shell) and
    stdout on a pipe; returns the process and what reached the terminal."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(
            command("replay", "--use-current", *map(str, paths)),
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            cwd=ROOT,
            env=clean_env(),
            timeout=120,
            check=False,
        )
        os.close(terminal)
        terminal = -1
        shown = bytearray()
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if terminal != -1:
            os.close(terminal)
        os.close(controller)
    return proc, shown.decode("utf-8", "replace")


def fixture_copies(tmp_path: Path, count: int) -> Path:
    suite = tmp_path / f"suite-{count}"
    for number in range(count):
        shutil.copytree(FIXTURE, suite / f"copy-{number:02d}")
    return suite


def test_replay_shows_progress_at_a_terminal_only_for_many_fixtures(tmp_path: Path) -> None:
    many = fixture_copies(tmp_path, PROGRESS_THRESHOLD + 1)
    few = fixture_copies(tmp_path, PROGRESS_THRESHOLD)

    shown_many, terminal = replay_at_a_terminal(many)
    assert shown_many.returncode == 0, shown_many.stdout + terminal
    assert "replaying" in terminal
    assert "100%" in terminal
    # The table is unchanged on stdout; the bar never mixes into it.
    count = PROGRESS_THRESHOLD + 1
    assert shown_many.stdout.splitlines()[-1] == f"{count} fixture(s): {count} same"
    assert "replaying" not in shown_many.stdout

    shown_few, terminal = replay_at_a_terminal(few)
    assert shown_few.returncode == 0
    assert "replaying" not in terminal
    piped = salvagelane("replay", "--use-current", str(many))
    assert piped.returncode == 0
    assert "replaying" not in piped.stderr
    assert piped.stdout == shown_many.stdout
