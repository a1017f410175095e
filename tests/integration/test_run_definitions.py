"""A run remembers its definition (issue 13): ``quarantine approve`` and ``runs redeliver``
use the version a run was made with, from any working directory and after the definition
changed on disk; ``--use-current`` uses today's and says what differs. Also: a fire time
must be one of the schedule's (or ``--force``, recorded), and ``connector.fixture`` takes
the fixture directory. The real command line (in this process), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.store import current_revision, downgrade, head_revision, make_engine, upgrade
from tests.support import run_setup
from tests.support.cli import FIXTURE, upgraded
from tests.support.cli import salvagelane_here as salvagelane

COMPLETE = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Project(run_setup.Project):
    """A copy of the bundled definitions with a json_file sink, a recorded answer of three
    recommendations whose 2nd names a workstream the allow-list lacks ("panic-button"),
    and an empty working directory elsewhere."""

    elsewhere: Path

    @property
    def workstreams(self) -> Path:
        return self.instructions / "context" / "workstreams.yaml"


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    made = Project.create(root, elsewhere=tmp_path / "elsewhere")
    made.elsewhere.mkdir()
    sink = "\nsinks:\n  - kind: json_file\n    path: ../out/{run_id}.json\nretry:\n"
    made.replace_in(made.definition, "\nretry:\n", sink)
    # "panic-button" is a known workstream when the run is made.
    made.replace_in(
        made.workstreams,
        "- id: web-dark-mode\n",
        "- id: panic-button\n  title: A big red button\n- id: web-dark-mode\n",
    )
    answer = root / "answer"
    answer.mkdir()
    items = [dict(item, rank=rank) for rank, item in enumerate(COMPLETE["recommendations"][:3], 1)]
    items[1]["candidate"] = "not-a-workstream"
    document = {"summary": "Three things matter today.", "recommendations": items}
    (answer / "raw.txt").write_text(json.dumps(document, indent=2), encoding="utf-8")
    meta = {"finish_reason": "stop", "native_finish_reason": "stop", "model": "crafted"}
    (answer / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return made


def run_in(project: Project, database: str, *, code: int = 0) -> dict[str, Any]:
    """``run --replay`` of the project's answer; ``code``: its exit status (1 when a sink
    did not get the report)."""
    proc = salvagelane(
        "run", "daily-triage", "--replay", str(project.root / "answer"), "--json",
        database=database, cwd=project.root,
    )  # fmt: skip
    assert proc.returncode == code, proc.stderr
    outcome: dict[str, Any] = json.loads(proc.stdout)
    return outcome


def corrected_item(project: Project) -> Path:
    """The 2nd recommendation, corrected to name "panic-button"."""
    item = dict(COMPLETE["recommendations"][1], rank=2, candidate="panic-button")
    path = project.elsewhere / "corrected.json"
    path.write_text(json.dumps(item), encoding="utf-8")
    return path


def approve(project: Project, database: str, *args: str) -> Any:
    return salvagelane(
        "quarantine", "approve", "1", "--file", str(corrected_item(project)), "--by", "ops",
        *args, database=database, cwd=project.elsewhere,
    )  # fmt: skip


def test_approve_uses_the_runs_definition_from_anywhere_and_after_an_edit(
    database_url: str, project: Project
) -> None:
    database = upgraded(database_url)
    outcome = run_in(project, database)
    assert (outcome["status"], outcome["quarantined"]) == ("partial", 1)
    assert len(outcome["definition_version"]) == 64
    # Today "panic-button" is dropped from the workstreams: the allow-list the run used
    # still holds it, and that is the one an approval answers to.
    project.replace_in(project.workstreams, "- id: panic-button\n  title: A big red button\n", "")

    current = approve(project, database, "--instructions", str(project.instructions),
                      "--use-current", "--json")  # fmt: skip

    assert current.returncode == 1, current.stdout + current.stderr
    assert json.loads(current.stdout)["reason"] == "allow_list"
    assert current.stderr == (
        f"note: using the current definition of daily-triage ({project.definition}), not the "
        f"version run {outcome['run_id'][:8]} was made with (stored "
        f"{outcome['definition_version'][:12]}): context/workstreams.yaml changed\n"
    )

    # From a directory without any definitions, with nothing but the database.
    stored = approve(project, database)

    assert stored.returncode == 0, stored.stdout + stored.stderr
    assert stored.stderr == ""
    assert stored.stdout.startswith("approved #1: added to the report of run ")
    shown = json.loads(salvagelane("quarantine", "show", "1", "--json", database=database).stdout)
    audit = shown["reviews"][-1]["after"]
    assert audit["definition_version"] == outcome["definition_version"]
    assert audit["use_current"] is False


def test_runs_stored_before_definitions_were_kept_need_use_current(
    database_url: str, project: Project
) -> None:
    """An 0005 database (its runs have no stored definition) upgrades; its runs are
    approved and redelivered only with --use-current, which says why."""
    database = upgraded(database_url)
    outcome = run_in(project, database)
    # Back to 0005 and up again: the run is now one stored before 0006.
    downgrade(database, "0005")
    assert current_revision(database) == "0005"
    upgrade(database)
    assert current_revision(database) == head_revision()
    shown = json.loads(
        salvagelane("runs", "show", outcome["run_id"], "--json", database=database).stdout
    )
    assert (shown["definition_version"], shown["forced"]) == (None, False)
    instructions = ("--instructions", str(project.instructions))

    refused = approve(project, database, *instructions)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        f"run {outcome['run_id'][:8]} was stored before salvagelane kept the definition "
        "each run uses (database revision 0006)"
    ) in refused.stderr
    assert "pass --use-current" in refused.stderr
    redeliver = salvagelane(
        "runs", "redeliver", outcome["run_id"], *instructions,
        database=database, cwd=project.elsewhere,
    )  # fmt: skip
    assert redeliver.returncode == 2
    assert "pass --use-current" in redeliver.stderr

    approved = approve(project, database, *instructions, "--use-current")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "so what differs from it is unknown" in approved.stderr
    # A run made now keeps its definition again.
    assert len(run_in(project, database)["definition_version"]) == 64


def test_redeliver_sends_to_the_runs_sinks_and_only_with_the_operators_word(
    database_url: str, project: Project
) -> None:
    database = upgraded(database_url)
    outcome = run_in(project, database)
    run_id = outcome["run_id"]
    delivered = project.root / "out" / f"{run_id}.json"
    assert delivered.is_file()
    delivered.unlink()
    instructions = ("--instructions", str(project.instructions))

    def redeliver(*args: str) -> Any:
        return salvagelane(
            "runs", "redeliver", run_id[:8], *args, database=database, cwd=project.elsewhere
        )

    # Where a report goes is never taken from the database alone.
    alone = redeliver()
    assert alone.returncode == 2
    assert "delivers to json_file ../out/{run_id}.json" in alone.stderr
    assert "where a report goes is taken only from your definitions" in alone.stderr
    assert not delivered.exists()

    # The prompt changed today, the sinks did not: the run's sinks, from anywhere.
    project.replace_in(project.definition, "Today is {{ today }}.", "Today, {{ today }}, is here.")
    again = redeliver(*instructions)
    assert again.returncode == 0, again.stderr
    assert "note:" not in again.stderr
    assert json.loads(delivered.read_text(encoding="utf-8"))["run_id"] == run_id

    # The sink moved today: not the run's, so nothing is sent without --use-current.
    project.replace_in(project.definition, "../out/{run_id}.json", "../moved/{run_id}.json")
    moved = project.root / "moved" / f"{run_id}.json"
    refused = redeliver(*instructions)
    assert refused.returncode == 2
    assert "the run's json_file ../out/{run_id}.json, now json_file ../moved/{run_id}.json" in (
        refused.stderr
    )
    assert not moved.exists()

    current = redeliver(*instructions, "--use-current")
    assert current.returncode == 0, current.stderr
    note = current.stderr.splitlines()[0]
    assert note.startswith("note: using the current definition of daily-triage")
    assert note.endswith("): daily-triage.yaml changed (prompt, sinks)")
    assert current.stdout.rstrip().endswith("delivered")
    assert json.loads(moved.read_text(encoding="utf-8"))["run_id"] == run_id


def test_a_fire_time_off_the_schedule_is_refused_unless_forced(
    database_url: str, project: Project
) -> None:
    database = upgraded(database_url)
    project.replace_in(
        project.definition,
        '  cron: "20 5 * * *"\n  timezone: UTC\n',
        '  cron: "20 5 * * *"\n  timezone: Europe/Berlin\n',
    )
    answer = str(project.root / "answer")

    def fire(moment: str, *extra: str) -> Any:
        return salvagelane(
            "run", "daily-triage", "--replay", answer, "--scheduled-for", moment, *extra,
            "--json", database=database, cwd=project.root,
        )  # fmt: skip

    # 05:20 UTC is not 05:20 in Berlin (04:20 UTC in November).
    refused = fire("2026-11-21T05:20:00Z")
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert (
        "--scheduled-for 2026-11-21T05:20:00Z: expected a fire time of daily-triage's schedule "
        "('20 5 * * *' in Europe/Berlin), got one it never fires at; the nearest: before "
        "2026-11-21T04:20:00Z and after 2026-11-22T04:20:00Z; pass --force"
    ) in refused.stderr
    listed = salvagelane("runs", "list", "--json", database=database)
    assert json.loads(listed.stdout) == []  # refused before anything was stored

    on_time = fire("2026-11-21T05:20:00+01:00")
    assert on_time.returncode == 0, on_time.stderr
    assert json.loads(on_time.stdout)["forced"] is False

    forced = fire("2026-11-21T05:20:00Z", "--force")
    assert forced.returncode == 0, forced.stderr
    run = json.loads(forced.stdout)
    assert (run["forced"], run["scheduled_for"]) == (True, "2026-11-21T05:20:00+00:00")
    shown = salvagelane("runs", "show", run["run_id"], database=database)
    assert "forced: not a fire time of the schedule" in shown.stdout
    detail = json.loads(
        salvagelane("runs", "show", run["run_id"], "--json", database=database).stdout
    )
    assert detail["forced"] is True
    rows = json.loads(salvagelane("runs", "list", "--json", database=database).stdout)
    assert [row["forced"] for row in rows] == [True, False]

    alone = salvagelane("run", "daily-triage", "--force", database=database, cwd=project.root)
    assert alone.returncode == 2
    assert "--force goes with --scheduled-for" in alone.stderr


def test_connector_fixture_takes_the_fixture_directory(tmp_path: Path, project: Project) -> None:
    database = f"sqlite:///{tmp_path / 'runs.db'}"
    replay = (
        "connector:\n  kind: replay\n  model: recorded\n  fixture: ../answer\n"
        "  max_output_tokens: 4096\n  temperature: 0.2\n  timeout_seconds: 60\n"
        "  structured_output: false\n"
    )
    text = project.definition.read_text(encoding="utf-8")
    start, end = text.index("connector:\n"), text.index("\nprompt:\n") + 1
    project.definition.write_text(text[:start] + replay + text[end:], encoding="utf-8")

    ran = salvagelane("run", "daily-triage", "--json", database=database, cwd=project.root)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["kept"] == 2

    project.replace_in(project.definition, "fixture: ../answer\n", "fixture: ../answer/raw.txt\n")
    raw = salvagelane("check", cwd=project.root)
    assert raw.returncode == 1
    assert (
        'connector.fixture: expected the fixture directory, got "../answer/raw.txt", the '
        'raw.txt file in it: give the directory instead ("../answer")'
    ) in raw.stdout + raw.stderr
    refused = salvagelane("run", "daily-triage", database=database, cwd=project.root)
    assert refused.returncode == 1  # an invalid definition: exit 1, as `check` says
    assert "give the directory instead" in refused.stderr


def test_the_stored_definition_holds_no_credential_and_still_loads(
    database_url: str, project: Project
) -> None:
    """A webhook URL's password and token never reach the database with the definition
    (ADR 0005); the stored copy still loads, and approves from anywhere."""
    password, token = "pw-9f3a7c1e55d0", "sig-41be0c7d2a96"
    project.replace_in(
        project.definition,
        "    path: ../out/{run_id}.json\n",
        "    path: ../out/{run_id}.json\n  - kind: webhook\n"
        f"    url: http://hook:{password}@127.0.0.1:9/in?sig={token}\n    timeout_seconds: 1\n",
    )
    database = upgraded(database_url)
    # Exit 1: nothing listens on port 9, so the webhook did not get the report (29.12).
    outcome = run_in(project, database, code=1)
    assert outcome["definition_version"] is not None

    engine = make_engine(database)
    try:
        with engine.connect() as connection:
            (content,) = connection.execute(
                sa.text("SELECT content FROM definition_versions")
            ).one()
    finally:
        engine.dispose()
    assert password not in content
    assert token not in content
    assert "http://REDACTED@127.0.0.1:9/in?sig=REDACTED" in json.loads(content)["text"]

    approved = approve(project, database)
    assert approved.returncode == 0, approved.stdout + approved.stderr
