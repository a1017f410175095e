"""``salvagelane eval`` as a process, against a candidate provider on 127.0.0.1.

Three fixtures are captured from real runs against a recording provider (so each keeps
its prompt); the candidate provider does better on the first, worse on the second and
the same on the third. The table, ``--json``, the stored evaluation and the
``--fail-if-worse`` exit code must say exactly that.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane.connectors import Connector
from salvagelane.definitions import Instruction
from salvagelane.errors import InputError
from salvagelane.review.capture import capture_run
from salvagelane.runtime.executor import Executor
from salvagelane.store import Store
from tests.support.cli import FIXTURE, salvagelane
from tests.support.provider import ScriptedServer
from tests.support.run_setup import (
    Project,
    aimed_at,
    chat_answer,
    items,
    openai_connector_for,
    store,
)

__all__ = ["store"]

KEY = "sk-eval-test-5d2e-never-stored"


def report(recommendations: list[dict[str, Any]]) -> str:
    return json.dumps({"summary": "Today.", "recommendations": recommendations})


def broken(recommendations: list[dict[str, Any]], *at: int) -> list[dict[str, Any]]:
    return [dict(r, action="panic") if n in at else r for n, r in enumerate(recommendations)]


@pytest.fixture
def recording() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def candidate() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def connector_for(recording: ScriptedServer) -> Iterator[Callable[[Instruction], Connector]]:
    with httpx.Client() as client:
        yield openai_connector_for(
            client, recording.base_url, key=KEY, sleep=lambda seconds: None, max_attempts=1
        )


@pytest.fixture
def corpus(
    tmp_path: Path,
    store: Store,
    recording: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> tuple[Project, list[Path]]:
    """Three fixtures captured from runs: 6 of 7 kept, 7 of 7, 3 of 3."""
    project = Project.create(tmp_path / "project")
    instruction = project.instruction(**aimed_at(recording, "EVAL_TEST_KEY"))
    answers = [report(broken(items(7), 6)), report(items(7)), report(items(3))]
    recording.script.extend(chat_answer(answer) for answer in answers)
    executor = Executor(store, connector_for=connector_for)
    fixtures = []
    for n in range(3):
        outcome = executor.run(instruction)
        fixtures.append(
            capture_run(store, outcome.run_id, None, tmp_path / "corpus" / f"f{n}").path
        )
    return project, fixtures


def evaluate(
    project: Project, fixtures: list[Path], candidate: ScriptedServer, database: str, *more: str
) -> Any:
    return salvagelane(
        "eval", *map(str, fixtures), "--instructions", str(project.instructions),
        "--base-url", candidate.base_url, "--concurrency", "1", *more,
        database=database, env={"EVAL_TEST_KEY": KEY},
    )  # fmt: skip


def test_eval_shows_better_worse_and_same_side_by_side_and_fails_if_worse(
    corpus: tuple[Project, list[Path]], candidate: ScriptedServer, store: Store
) -> None:
    project, fixtures = corpus
    assert all((f / "prompt.json").is_file() for f in fixtures)
    answers = [report(items(7)), report(broken(items(7), 3, 4)), report(items(3))]
    candidate.script.extend(chat_answer(answer) for answer in answers)

    done = evaluate(project, fixtures, candidate, store.url, "--json", "--fail-if-worse")

    assert done.returncode == 1, done.stderr  # 15 kept against 16
    document = json.loads(done.stdout)
    changes = [f["change"] for f in document["fixtures"]]
    assert changes == ["better", "worse", "same"]
    sides = [(f["baseline"]["kept"], f["candidate"]["kept"]) for f in document["fixtures"]]
    assert sides == [(6, 7), (7, 5), (3, 3)]
    assert document["fixtures"][1]["candidate"]["quarantined_by_reason"] == {"schema": 2}
    assert document["fixtures"][0]["baseline"]["status"] == "partial"
    assert document["worse"] is True
    assert document["reasons"] == ["the candidate kept 15 item(s), the baseline 16"]
    assert document["candidate"]["tokens"] > 0  # the provider reported usage
    # The candidate was sent each fixture's recorded prompt, as recorded.
    sent = [r.body["messages"][1]["content"] for r in candidate.requests]
    recorded = [json.loads((f / "prompt.json").read_text("utf-8"))["user"] for f in fixtures]
    assert sent == recorded
    assert [r.headers["authorization"] for r in candidate.requests] == [f"Bearer {KEY}"] * 3
    progress = [line for line in done.stderr.splitlines() if line.startswith("eval: ")]
    assert [line.split(": ")[-1] for line in progress] == ["better", "worse", "same"]
    # Stored for the review page.
    (stored,) = store.evals.list()
    assert stored.id == document["eval_id"]
    detail = store.evals.get(stored.id)
    assert [c["change"] for c in detail.comparisons] == changes
    assert detail.verdict["worse"] is True


def test_the_table_names_each_side_and_a_fixture_without_a_prompt_is_skipped(
    corpus: tuple[Project, list[Path]], candidate: ScriptedServer, store: Store
) -> None:
    project, fixtures = corpus
    candidate.script.extend(chat_answer(report(items(7))) for _ in range(2))
    # The bundled fixture was recorded before prompts were kept.
    done = evaluate(project, [*fixtures[:2], FIXTURE], candidate, store.url, "--fail-if-worse")

    assert done.returncode == 0, done.stderr  # 14 kept against 13: not worse
    table = done.stdout.splitlines()
    assert table[0].startswith("candidate: today's definitions, base URL http://127.0.0.1:")
    rows = [line.split() for line in table if line.split()[:1] in (["f0"], ["f1"], [""])]
    assert rows[0][:4] == ["f0", "baseline", "partial", "6"]
    assert any(r[:2] == ["daily-triage-truncated", "skipped"] for r in map(str.split, table))
    assert "changes: 1 better, 0 worse, 1 same, 1 skipped" in table
    assert f"skipped: {FIXTURE}: no prompt.json: the fixture was captured before prompts" in (
        done.stdout
    )
    assert len(candidate.requests) == 2  # nothing sent for the skipped fixture


def test_fixtures_are_called_at_once_and_reported_in_the_order_given(
    corpus: tuple[Project, list[Path]], store: Store
) -> None:
    project, fixtures = corpus
    # Every request gets the same answer: the order the calls happen in cannot matter.
    with ScriptedServer(then=chat_answer(report(items(7)))) as candidate:
        # Each call waits until a second one has arrived: calls made one at a time would
        # leave the first waiting in vain.
        arrived: list[object] = []
        met: list[bool] = []
        two_in_flight = threading.Event()

        def hold(request: object) -> None:
            arrived.append(request)
            if len(arrived) >= 2:
                two_in_flight.set()
            met.append(two_in_flight.wait(timeout=10))

        candidate.on_request = hold
        done = salvagelane(
            "eval", *map(str, fixtures), "--instructions", str(project.instructions),
            "--base-url", candidate.base_url, "--concurrency", "3", "--json", "--no-store",
            database=store.url, env={"EVAL_TEST_KEY": KEY},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [f["fixture"] for f in document["fixtures"]] == [str(f) for f in fixtures]
    assert [f["candidate"]["kept"] for f in document["fixtures"]] == [7, 7, 7]
    assert document["eval_id"] is None
    assert store.evals.list() == []
    assert len(candidate.requests) == 3
    assert met == [True, True, True]  # the first call was still waiting when another came


def test_a_capture_whose_prompt_holds_a_secret_is_refused(
    corpus: tuple[Project, list[Path]], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, fixtures = corpus
    files = {p.name: p.read_text("utf-8") for p in fixtures[0].iterdir()}
    user = json.loads(files.pop("prompt.json"))["user"]
    # A stretch of the prompt found in no other file of the fixture: only prompt.json has it.
    secret = next(
        user[n : n + 12]
        for n in range(len(user) - 12)
        if user[n : n + 12].strip() == user[n : n + 12]
        and not any(user[n : n + 12] in text for text in files.values())
    )
    monkeypatch.setenv("EVAL_PROMPT_TOKEN", secret)
    run_id = json.loads(files["meta.json"])["source"]["run_id"]
    target = fixtures[0].parent / "leaky"

    with pytest.raises(InputError, match="EVAL_PROMPT_TOKEN"):
        capture_run(store, run_id, None, target)
    assert not target.exists()
    monkeypatch.delenv("EVAL_PROMPT_TOKEN")
    assert (capture_run(store, run_id, None, target).path / "prompt.json").is_file()
