"""``salvagelane run``, ``runs`` and ``db`` through the real command line (in this process), on
SQLite and PostgreSQL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from salvagelane.store import head_revision
from tests.support.cli import FIXTURE, ROOT, upgraded
from tests.support.cli import salvagelane_here as salvagelane
from tests.support.postgres import PostgresDatabase


def test_the_main_job_twice_gives_two_listed_runs(database_url: str) -> None:
    database = upgraded(database_url)
    first = salvagelane("run", "daily-triage", "--replay", str(FIXTURE), database=database)
    assert first.returncode == 0, first.stderr
    lines = dict(line.split(None, 1) for line in first.stdout.splitlines())
    assert lines["status"] == "partial"
    assert lines["kept"] == "7 of 8 candidates"
    assert lines["quarantined"] == "1 (truncated 1)"
    assert lines["finish"] == "length"
    run_id = lines["run"].split()[0]

    second = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), "--json", database=database
    )
    assert second.returncode == 0, second.stderr
    outcome = json.loads(second.stdout)
    assert (outcome["status"], outcome["kept"], outcome["quarantined"]) == ("partial", 7, 1)
    assert outcome["quarantined_by_reason"] == {"truncated": 1}

    listed = salvagelane("runs", "list", database=database)
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()
    assert rows[0].split() == [
        "RUN", "CREATED", "(UTC)", "INSTRUCTION", "TRIGGER", "FIRE", "(UTC)", "STATUS", "KEPT",
        "QUAR", "FINISH",
    ]  # fmt: skip
    assert [row.split()[0] for row in rows[1:]] == [outcome["run_id"][:8], run_id[:8]]
    # A manual (replayed) run claims no fire: its FIRE column is "-".
    assert all(
        row.split()[4:10] == ["replay", "-", "partial", "7", "1", "length"] for row in rows[1:]
    )


def test_runs_show_explains_the_report_and_the_quarantine(database_url: str) -> None:
    database = upgraded(database_url)
    run = salvagelane("run", "daily-triage", "--replay", str(FIXTURE), "--json", database=database)
    run_id = json.loads(run.stdout)["run_id"]

    shown = salvagelane("runs", "show", run_id[:8], database=database)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert f"run          {run_id}" in text
    assert "report       partial: 7 of 8 candidates kept" in text
    assert "items (7)" in text
    assert '  7. {"rank": 7' in text
    assert "report       partial: 7 of 8 candidates kept, 1 quarantined;" in text
    assert "the model's output was cut off (truncated): no review makes it ok" in text
    assert "quarantine lane (1 item, 1 held back)" in text
    assert "item 8 of attempt 1: truncated [pending]" in text
    assert "span 4953-5269" in text

    as_json = json.loads(salvagelane("runs", "show", run_id, "--json", database=database).stdout)
    assert as_json["id"] == run_id
    assert [item["data"]["rank"] for item in as_json["report"]["items"]] == list(range(1, 8))
    assert as_json["quarantined"][0]["provenance"]["finish_reason"] == "length"

    raw = salvagelane("runs", "show", run_id, "--raw", "1", database=database)
    assert raw.stdout == (FIXTURE / "raw.txt").read_text(encoding="utf-8")


def test_unknown_ids_and_instructions_are_one_line_usage_errors(database_url: str) -> None:
    database = upgraded(database_url)
    missing = salvagelane("runs", "show", "deadbeef-0000", database=database)
    assert missing.returncode == 2
    assert missing.stderr.startswith("salvagelane: error: ")
    assert "deadbeef-0000" in missing.stderr
    assert len(missing.stderr.splitlines()) == 1

    unknown = salvagelane("run", "weekly-nothing", database=database)
    assert unknown.returncode == 2
    assert "no instruction 'weekly-nothing' in instructions/: expected one of daily-triage" in (
        unknown.stderr
    )


def test_a_failed_run_exits_1_and_says_why(database_url: str, tmp_path: Path) -> None:
    database = upgraded(database_url)
    fixture = tmp_path / "refusal"
    fixture.mkdir()
    (fixture / "raw.txt").write_text("I can't help with triage today.", encoding="utf-8")
    (fixture / "meta.json").write_text('{"finish_reason": "stop"}', encoding="utf-8")
    proc = salvagelane("run", "daily-triage", "--replay", str(fixture), database=database)
    assert proc.returncode == 1
    assert "status       failed" in proc.stdout
    assert "error        nothing usable: no items list was found in the output" in proc.stdout
    # Retried once (nothing_salvaged): both answers are stored.
    assert "attempts     2" in proc.stdout


def test_a_new_sqlite_database_is_created_at_head_by_a_write_command_only(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'fresh.db'}"
    for read in (("runs", "list"), ("db", "current"), ("quarantine", "list")):
        refused = salvagelane(*read, database=database)
        assert refused.returncode == 2, refused.stderr
        assert f"no database at {tmp_path / 'fresh.db'}" in refused.stderr
        assert list(tmp_path.iterdir()) == []  # nothing created, not even a spool
    recovered = salvagelane("db", "recover", database=database)  # a write command
    assert recovered.returncode == 0, recovered.stderr
    listed = salvagelane("runs", "list", database=database)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "no runs stored yet (salvagelane run INSTRUCTION stores one)"
    current = salvagelane("db", "current", database=database)
    head = head_revision()
    assert current.stdout.strip().endswith(f"revision {head} (newest {head}: up to date)")


@pytest.mark.postgres
def test_a_postgres_database_behind_head_is_refused_until_upgraded(
    postgres_database: PostgresDatabase,
) -> None:
    postgres_database.reset()
    database_url = postgres_database.url
    refused = salvagelane("runs", "list", database=database_url)
    assert refused.returncode == 2  # the operator must act: upgrade
    assert "salvagelane db upgrade" in refused.stderr
    upgrade = salvagelane("db", "upgrade", database=database_url)
    assert upgrade.returncode == 0
    assert f"upgraded from an empty database to {head_revision()}" in upgrade.stdout
    again = salvagelane("db", "upgrade", database=database_url)
    assert f"already at revision {head_revision()}" in again.stdout


def test_the_default_database_is_a_file_in_the_working_directory(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    proc = salvagelane("run", "daily-triage", "--replay", str(FIXTURE), database="", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "database     sqlite:///salvagelane.db" in proc.stdout
    assert (tmp_path / "salvagelane.db").is_file()


def test_logs_are_json_lines_on_stderr_bound_to_the_run(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'logs.db'}"
    proc = salvagelane(
        "--log-format", "json", "run", "daily-triage", "--replay", str(FIXTURE), "--json",
        database=database,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout)["run_id"]
    events = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [e["event"] for e in events] == [
        "run.started",
        "attempt.stored",
        "attempt.salvaged",
        "run.finished",
    ]
    assert all(e["run_id"] == run_id and e["instruction"] == "daily-triage" for e in events)
    assert all(e["timestamp"].endswith("Z") for e in events)


def test_an_externally_fired_run_claims_its_fire_once(database_url: str) -> None:
    database = upgraded(database_url)
    # 00:30 in UTC+1 is 23:30 the day before in UTC, the zone the definition's `today` uses;
    # not a fire time of its schedule (05:20 UTC), hence --force.
    fire = ("--scheduled-for", "2031-02-03T00:30:00+01:00", "--force")
    first = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), *fire, "--json", database=database
    )
    assert first.returncode == 0, first.stderr
    run_id = json.loads(first.stdout)["run_id"]

    second = salvagelane("run", "daily-triage", "--replay", str(FIXTURE), *fire, database=database)
    again = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), *fire, "--json", database=database
    )

    assert second.returncode == 0, second.stderr
    assert second.stdout == (
        "already claimed: the daily-triage fire of 2031-02-02T23:30:00+00:00 has a run "
        f"({run_id[:8]} (partial)); nothing to do\n"
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {
        "duplicate": True,
        "instruction": "daily-triage",
        "scheduled_for": "2031-02-02T23:30:00+00:00",
        "runs": [{"run_id": run_id, "status": "partial", "trigger": "replay"}],
    }
    shown = json.loads(salvagelane("runs", "show", run_id, "--json", database=database).stdout)
    assert shown["scheduled_for"] == "2031-02-02T23:30:00+00:00"
    assert "Today is 2031-02-02." in shown["attempts"][0]["request"]["user"]
    listed = salvagelane("runs", "list", "--json", database=database)
    assert [run["id"] for run in json.loads(listed.stdout)] == [run_id]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2031-02-03T05:20:00", "expected a timestamp with a zone"),
        ("tomorrow", "expected an ISO 8601 timestamp"),
    ],
)
def test_a_fire_time_needs_a_zone_and_iso_8601(tmp_path: Path, value: str, expected: str) -> None:
    proc = salvagelane(
        "run",
        "daily-triage",
        "--replay",
        str(FIXTURE),
        "--scheduled-for",
        value,
        database=f"sqlite:///{tmp_path / 'x.db'}",
    )
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


def test_runs_redeliver_sends_the_stored_report_again(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runs.db'}"
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    definition = tmp_path / "instructions" / "daily-triage.yaml"
    blocker = tmp_path / "out"
    blocker.write_text("a file where the sink wants a directory", encoding="utf-8")
    text = definition.read_text(encoding="utf-8")
    definition.write_text(
        text.replace(
            "\nretry:\n", f"\nsinks:\n  - kind: json_file\n    path: {blocker}/r.json\nretry:\n"
        ),
        encoding="utf-8",
    )
    instructions = ("--instructions", str(tmp_path / "instructions"))
    run = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), *instructions, "--json", database=database
    )
    assert run.returncode == 1, run.stderr  # stored, not delivered (issue 29.12)
    outcome = json.loads(run.stdout)
    assert [d["ok"] for d in outcome["deliveries"]] == [False]
    blocker.unlink()

    again = salvagelane(
        "runs", "redeliver", outcome["run_id"][:8], *instructions, database=database
    )

    assert again.returncode == 0, again.stderr
    assert again.stdout == f"json_file  {blocker}/r.json  delivered\n"
    written = json.loads((blocker / "r.json").read_text(encoding="utf-8"))
    assert (written["run_id"], len(written["items"])) == (outcome["run_id"], 7)
    listed = json.loads(salvagelane("runs", "list", "--json", database=database).stdout)
    assert listed[0]["sink_status"] == "delivered"
    # The bundled definition names no sinks: not the run's, so nothing is delivered.
    no_sinks = salvagelane("runs", "redeliver", outcome["run_id"], database=database)
    assert no_sinks.returncode == 2
    assert "differ from those of the version the run was made with" in no_sinks.stderr
    assert "now no sinks; pass --use-current" in no_sinks.stderr
    current = salvagelane(
        "runs", "redeliver", outcome["run_id"], "--use-current", database=database
    )
    assert current.returncode == 2
    assert "defines no sinks (its current definition)" in current.stderr


def test_sink_targets_are_shown_as_the_file_the_report_went_to(tmp_path: Path) -> None:
    """Issue 13: ``run``, its log and ``runs show`` showed ``{instruction}-{run_id}.json``."""
    database = f"sqlite:///{tmp_path / 'runs.db'}"
    shutil.copytree(ROOT / "instructions", tmp_path / "instructions")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    definition = tmp_path / "instructions" / "daily-triage.yaml"
    template = tmp_path / "out" / "{instruction}-{run_id}.json"
    text = definition.read_text(encoding="utf-8")
    definition.write_text(
        text.replace(
            "\nretry:\n", f"\nsinks:\n  - kind: json_file\n    path: {template}\nretry:\n"
        ),
        encoding="utf-8",
    )
    instructions = ("--instructions", str(tmp_path / "instructions"))
    run = salvagelane(
        "--log-format", "json", "run", "daily-triage", "--replay", str(FIXTURE), *instructions,
        database=database,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    run_id = dict(line.split(None, 1) for line in run.stdout.splitlines())["run"].split()[0]
    written = tmp_path / "out" / f"daily-triage-{run_id}.json"
    assert written.is_file()
    assert f"sink         json_file {written}: delivered" in run.stdout.splitlines()
    (event,) = [
        e for e in map(json.loads, run.stderr.splitlines()) if e["event"].startswith("sink")
    ]
    assert (event["event"], event["target"]) == ("sink.delivered", str(written))

    shown = salvagelane("runs", "show", run_id, database=database)
    assert f"  #1 json_file {written}" in shown.stdout.splitlines()
    as_json = json.loads(salvagelane("runs", "show", run_id, "--json", database=database).stdout)
    assert [d["target"] for d in as_json["deliveries"]] == [str(written)]
    again = salvagelane("runs", "redeliver", run_id, *instructions, database=database)
    assert again.stdout == f"json_file  {written}  delivered\n"
    for output in (run.stdout, run.stderr, shown.stdout, again.stdout):
        assert "{run_id}" not in output
