"""``salvagelane try`` and ``salvagelane prompt``: a definition tried without a run.

``try`` answers one attempt from a saved output or one model call and shows what a run
would store and deliver; it touches no database, no sink and no spool. ``prompt`` shows
the request a run would send. Both through the real command line (in this process),
against what a real run of the same definition stores (on SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from salvagelane.store import QuarantineFilter, Store
from tests.support.cli import FIXTURE, upgraded
from tests.support.cli import salvagelane_here as salvagelane
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import Project, aimed_at, chat_answer, items, provider

__all__ = ["provider"]

KEY_ENV = "SALVAGELANE_TEST_API_KEY"
KEY = "sk-try-test-key-0001"
FIRE = "2026-11-21T05:20:00Z"  # a fire time of the daily-triage schedule ("20 5 * * *")


def with_sinks(project: Project, provider: ScriptedServer) -> Path:
    """The bundled definition with a json_file sink into ``out/`` and a webhook on the
    local ``provider`` at ``/hook``; returns the json_file sink's directory."""
    out = project.root / "out"
    sinks = (
        "\nsinks:\n"
        f"  - kind: json_file\n    path: {out}/{{run_id}}.json\n"
        f"  - kind: webhook\n    url: {provider.origin}/hook\n"
        "retry:\n"
    )
    project.edit({"\nretry:\n": sinks})
    return out


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``root`` with its size and modification time."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
    }


def stored(database: str) -> Any:
    """What the database holds: its runs (with their figures and deliveries) and the
    quarantine."""
    with Store.open(database, auto_upgrade=False) as store:
        runs = [repr(store.get_run(run.id)) for run in store.list_runs(limit=1000)]
        quarantine = store.quarantine.list_quarantine(QuarantineFilter(review_status=None))
        return runs, [repr(item) for item in quarantine]


def hook_requests(provider: ScriptedServer) -> list[str]:
    return [request.path for request in provider.requests if request.path == "/hook"]


def test_try_with_the_bundled_sample_shows_what_run_replay_stores_and_touches_nothing(
    database_url: str, tmp_path: Path, provider: ScriptedServer
) -> None:
    project = Project.create(tmp_path / "project")
    out = with_sinks(project, provider)
    provider.then = Scripted(status=204)  # the webhook takes what a real run delivers
    database = upgraded(database_url)
    instructions = str(project.instructions)

    run = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), "--instructions", instructions,
        "--json", database=database,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)["run_id"]
    assert json.loads(run.stdout)["deliveries"] != []
    assert len(hook_requests(provider)) == 1  # the run delivered; the dry run must not
    held_before = stored(database)
    before = files_of(tmp_path)

    tried = salvagelane(
        "try", "daily-triage", "--sample", str(FIXTURE / "raw.txt"), "--instructions",
        instructions, "--json", database=database,
    )  # fmt: skip
    assert tried.returncode == 0, tried.stderr
    trial = json.loads(tried.stdout)

    # Nothing touched: no database change, no sink file, no webhook call, no spool file.
    assert files_of(tmp_path) == before
    assert stored(database) == held_before
    assert len(hook_requests(provider)) == 1
    # What it shows is what the run stored: the same kept items, the same quarantine.
    with Store.open(database, auto_upgrade=False) as store:
        detail = store.get_run(run_id)
        payload = store.get_report_payload(run_id)
    assert detail.report is not None
    assert trial["status"] == detail.status == "partial"
    assert (trial["kept"], trial["candidates"], trial["quarantined"]) == (7, 8, 1)
    assert [item["data"] for item in trial["salvage"]["items"]] == [
        item.data for item in detail.report.items
    ]
    assert [(q["index"], q["reason"], q["sha256"]) for q in trial["salvage"]["quarantined"]] == [
        (q.source_index, q.reason, q.sha256) for q in detail.quarantined
    ]
    # Each sink would receive the payload the run's sinks received, but for the run id.
    assert trial["payload"] == {**payload, "run_id": None}
    assert json.loads((out / f"{run_id}.json").read_text(encoding="utf-8")) == payload
    assert trial["deliveries"] == [
        {"kind": "json_file", "target": f"{out}/{{run_id}}.json", "sent": False},
        {"kind": "webhook", "target": f"{provider.origin}/hook", "sent": False},
    ]

    # The human view says the same, and that nothing was stored or sent.
    shown = salvagelane(
        "try", "daily-triage", "--sample", str(FIXTURE), "--instructions", instructions,
        database=database,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "dry run      daily-triage: nothing stored, nothing delivered"
    assert "status       partial" in lines
    assert "kept         7 of 8 candidates" in lines
    assert "quarantined  1 (truncated 1)" in lines
    assert "  item 8 of the output: truncated" in lines
    assert "deliveries (2), not sent" in lines
    assert f"  webhook    {provider.origin}/hook" in lines
    assert files_of(tmp_path) == before
    assert len(hook_requests(provider)) == 1


def test_try_creates_no_database_and_no_spool(tmp_path: Path) -> None:
    project = Project.create(tmp_path / "project")
    database = f"sqlite:///{tmp_path / 'data' / 'salvagelane.db'}"
    (tmp_path / "data").mkdir()
    tried = salvagelane(
        "try", "daily-triage", "--sample", str(FIXTURE), "--instructions",
        str(project.instructions), database=database,
    )  # fmt: skip
    assert tried.returncode == 0, tried.stderr
    assert list((tmp_path / "data").iterdir()) == []  # no database file, no spool directory


def test_try_live_calls_the_model_once_and_says_what_a_run_would_do_next(
    tmp_path: Path, provider: ScriptedServer
) -> None:
    project = Project.create(tmp_path / "project")
    project.edit(
        {
            **aimed_at(provider, KEY_ENV),
            "structured_output: false": "structured_output: true",
            "on: [nothing_salvaged]": "on: [nothing_salvaged, truncated]",
        }
    )
    with_sinks(project, provider)
    # Cut off after three recommendations (finish length) with one of them refused by the
    # allow-list: a run would keep two, quarantine one, and retry with a bigger budget.
    bad = items(3)
    bad[1]["candidate"] = "not-a-workstream"
    text = json.dumps({"summary": "Three things.", "recommendations": bad})
    provider.script.append(chat_answer(text[: text.rindex('"why"')], finish="length"))
    database = tmp_path / "salvagelane.db"

    tried = salvagelane(
        "try", "daily-triage", "--live", "--instructions", str(project.instructions), "--json",
        "--scheduled-for", FIRE, database=f"sqlite:///{database}", env={KEY_ENV: KEY},
    )  # fmt: skip
    assert tried.returncode == 0, tried.stderr
    trial = json.loads(tried.stdout)
    # One model call; the sinks got nothing.
    assert [request.path for request in provider.requests] == ["/v1/chat/completions"]
    assert not database.exists()
    assert not (tmp_path / "out").exists()
    (call,) = provider.requests
    assert call.headers["authorization"] == f"Bearer {KEY}"
    # It sent the prompt and the hint that `prompt` shows.
    prompt = salvagelane(
        "prompt", "daily-triage", "--instructions", str(project.instructions), "--json",
        "--scheduled-for", FIRE,
    )  # fmt: skip
    assert prompt.returncode == 0, prompt.stderr
    shown = json.loads(prompt.stdout)
    assert call.body["messages"] == [
        {"role": "system", "content": shown["system"]},
        {"role": "user", "content": shown["user"]},
    ]
    assert call.body["response_format"]["json_schema"]["schema"] == shown["schema_hint_schema"]
    assert call.body["max_tokens"] == shown["max_output_tokens"] == 4096
    assert trial["request"] == shown

    assert trial["status"] == "partial"
    assert (trial["kept"], trial["quarantined"]) == (1, 2)
    assert trial["quarantined_by_reason"] == {"allow_list": 1, "truncated": 1}
    assert [q["index"] for q in trial["salvage"]["quarantined"]] == [1, 2]
    assert trial["answer"]["finish_reason"] == "length"
    assert trial["answer"]["http_status"] == 200
    assert trial["retry"] == {
        "cause": "truncated",
        "attempt": 2,
        "attempts": 2,
        "max_output_tokens": 8192,
    }


def test_try_of_an_answer_with_nothing_usable_exits_1_and_delivers_nothing(
    tmp_path: Path, provider: ScriptedServer
) -> None:
    project = Project.create(tmp_path / "project")
    with_sinks(project, provider)
    sample = tmp_path / "refusal.txt"
    sample.write_text("I cannot help with that.", encoding="utf-8")
    tried = salvagelane(
        "try", "daily-triage", "--sample", str(sample), "--instructions",
        str(project.instructions),
    )  # fmt: skip
    assert tried.returncode == 1, tried.stderr
    assert "status       failed" in tried.stdout.splitlines()
    assert "error        nothing usable: no items list was found in the output" in tried.stdout
    # A run would retry (nothing_salvaged), and store a failed report for the sinks.
    assert "retry        a run would make attempt 2 of 2 (nothing_salvaged)" in tried.stdout
    assert provider.requests == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--sample", "raw.txt", "--live"), "--sample and --live: expected one of them"),
        ((), "expected --sample FILE (a saved model output to answer with) or --live"),
        (("--sample", "nowhere.txt"), "'nowhere.txt' does not exist"),
    ],
)
def test_try_refuses_unusable_options_with_exit_2(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    project = Project.create(tmp_path)
    (tmp_path / "raw.txt").write_text((FIXTURE / "raw.txt").read_text(encoding="utf-8"))
    tried = salvagelane(
        "try", "daily-triage", *args, "--instructions", str(project.instructions), cwd=tmp_path
    )
    assert tried.returncode == 2, tried.stdout
    assert message in tried.stderr
    assert tried.stdout == ""


def test_prompt_prints_what_the_executor_sends(database_url: str, tmp_path: Path) -> None:
    """The prompt a run stores with its attempt is the one `prompt` prints."""
    project = Project.create(tmp_path / "project")
    database = upgraded(database_url)
    instructions = str(project.instructions)
    run = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), "--scheduled-for", FIRE,
        "--instructions", instructions, "--json", database=database,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    with Store.open(database, auto_upgrade=False) as store:
        (attempt,) = store.get_run(json.loads(run.stdout)["run_id"]).attempts
    sent = attempt.request

    prompt = salvagelane(
        "prompt", "daily-triage", "--scheduled-for", FIRE, "--instructions", instructions,
        "--json", database=database,
    )  # fmt: skip
    assert prompt.returncode == 0, prompt.stderr
    shown = json.loads(prompt.stdout)
    assert {key: shown[key] for key in sent} == sent
    assert "Today is 2026-11-21." in shown["user"]
    assert shown["schema_hint_schema"] is None  # structured_output is off

    text = salvagelane(
        "prompt", "daily-triage", "--scheduled-for", FIRE, "--instructions", instructions
    )
    assert text.returncode == 0, text.stderr
    assert "hint         not sent: structured_output is off" in text.stdout
    system = text.stdout.split("--- system prompt ---\n", 1)[1].split("\n\n--- user prompt ---")[0]
    assert system == sent["system"].rstrip("\n")
    assert text.stdout.split("--- user prompt ---\n", 1)[1] == sent["user"].rstrip("\n") + "\n"
