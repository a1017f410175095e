"""Per-item re-ask (``retry.on: [quarantined]``) against a real database (SQLite and
PostgreSQL) and the OpenAI-compatible connector calling a scripted provider on 127.0.0.1.

The provider answers 6 good items and 1 with a bad enum; asked again for that one item
only, it answers it corrected (or broken again). What the follow-up request said is
asserted on the request the connector really sent.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane.connectors import Connector
from salvagelane.definitions import Instruction
from salvagelane.fixtures.replay import Replayer
from salvagelane.review.capture import capture_run
from salvagelane.runtime.executor import Executor
from salvagelane.runtime.metrics import Metrics
from salvagelane.runtime.trial import try_instruction
from salvagelane.store import Store
from salvagelane.vocabulary import ItemOrigin, ReviewStatus
from tests.support.metrics import counted_by
from tests.support.provider import ScriptedServer
from tests.support.run_setup import (
    Project,
    chat_answer,
    items,
    openai_connector_for,
    provider,
    store,
)

__all__ = ["provider", "store"]

KEY = "sk-reask-test-91c0-never-stored"
REASK = {
    "on: [nothing_salvaged]": "on: [nothing_salvaged, quarantined]",
    "attempts: 2": "attempts: 3",
}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


@pytest.fixture
def connector_for(provider: ScriptedServer) -> Iterator[Callable[[Instruction], Connector]]:
    with httpx.Client() as client:
        yield openai_connector_for(
            client, provider.base_url, key=KEY, sleep=lambda seconds: None, max_attempts=1
        )


def report(recommendations: list[dict[str, Any]]) -> str:
    return json.dumps({"summary": "Seven things today.", "recommendations": recommendations})


def seven_with_a_bad_enum() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Seven recommendations whose 7th has an action outside the enum, and that 7th
    as it should have been."""
    recommendations = items(7)
    good = dict(recommendations[6])
    recommendations[6] = dict(good, action="panic")
    return recommendations, good


def user_message(provider: ScriptedServer, n: int) -> str:
    content: str = provider.requests[n].body["messages"][1]["content"]
    return content


def test_a_follow_up_for_the_one_bad_item_makes_the_run_ok_with_it_marked_reask(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    first, good = seven_with_a_bad_enum()
    provider.script.extend([chat_answer(report(first)), chat_answer(report([good]))])

    outcome = Executor(store, connector_for=connector_for).run(project.instruction(**REASK))

    assert (outcome.status, outcome.kept, outcome.attempts) == ("ok", 7, 2)
    assert outcome.quarantined == {}
    # The follow-up names only the 7th item, with its correction signal and its text.
    follow_up = user_message(provider, 1)
    assert follow_up.startswith(user_message(provider, 0).rstrip())
    note = follow_up[len(user_message(provider, 0).rstrip()) :]
    assert "exactly 1 item(s)" in note
    assert "1. item 7 of your previous answer: schema at $.action: expected one of" in note
    assert 'received "panic"' in note
    # Only the asked item's text is quoted, never the accepted ones'.
    assert json.dumps(good["why"])[1:-1] in note
    assert not [i["why"] for i in items(6) if json.dumps(i["why"])[1:-1] in note]
    detail = store.get_run(outcome.run_id)
    assert detail.status == "ok"
    assert [a.number for a in detail.attempts] == [1, 2]
    assert detail.attempts[0].outcome is not None
    assert detail.attempts[0].outcome["retry_trigger"] == "quarantined"
    assert detail.attempts[1].request["reask"] == {"of_attempt": 1, "items": [6]}
    report_view = detail.report
    assert report_view is not None
    assert report_view.attempt_id == detail.attempts[0].id
    assert [i.data for i in report_view.items] == items(7)
    seventh = report_view.items[6]
    assert (seventh.origin, seventh.attempt, seventh.source_index) == (ItemOrigin.REASK, 2, 6)
    assert {i.origin for i in report_view.items[:6]} == {ItemOrigin.MODEL}
    assert report_view.counts["reask"] == {
        "attempt": 2,
        "asked": 1,
        "accepted": 1,
        "still_quarantined": 0,
        "extra": 0,
        "status": "ok",
    }
    # The span of the mended item is in the follow-up's output.
    raw = detail.attempts[1].raw_output
    assert raw is not None
    assert json.loads(raw[seventh.span_start : seventh.span_end]) == good
    # Its quarantine record left the queue with a link, never silently.
    (record,) = [q for q in detail.quarantined if q.attempt_id == detail.attempts[0].id]
    assert record.review_status is ReviewStatus.REASKED
    assert record.resolution == {"by": "reask", "attempt": 2, "position": 6}
    assert store.quarantine.list_quarantine() == []


def test_a_second_broken_answer_leaves_the_item_quarantined_with_both_signals(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    first, good = seven_with_a_bad_enum()
    again = dict(good, confidence=7)
    provider.script.extend([chat_answer(report(first)), chat_answer(report([again]))])

    outcome = Executor(store, connector_for=connector_for).run(project.instruction(**REASK))

    assert (outcome.status, outcome.kept, outcome.attempts) == ("partial", 6, 2)
    assert len(provider.requests) == 2  # one follow-up, never a second
    detail = store.get_run(outcome.run_id)
    assert detail.report is not None
    assert {i.origin for i in detail.report.items} == {ItemOrigin.MODEL}
    assert detail.report.counts["reask"]["still_quarantined"] == 1
    (pending,) = store.quarantine.list_quarantine()
    assert (pending.attempt_id, pending.source_index) == (detail.attempts[0].id, 6)
    assert pending.error["path"] == "$.action"
    (signal,) = pending.error["reask"]["signals"]
    assert pending.error["reask"]["attempt"] == 2
    assert (signal["reason"], signal["path"]) == ("schema", "$.confidence")
    # The follow-up's own reject is kept as history, out of the review lane.
    (history,) = [q for q in detail.quarantined if q.attempt_id == detail.attempts[1].id]
    assert history.review_status is ReviewStatus.SUPERSEDED
    assert history.provenance["reask_of_attempt"] == 1


def test_an_answer_with_more_items_than_asked_is_not_paired(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    first, good = seven_with_a_bad_enum()
    # The model repeats more than it was asked for: which answer is the 7th cannot be
    # told, so nothing of it joins the report.
    provider.script.extend([chat_answer(report(first)), chat_answer(report([*items(2), good]))])

    outcome = Executor(store, connector_for=connector_for).run(project.instruction(**REASK))

    assert (outcome.status, outcome.kept) == ("partial", 6)
    detail = store.get_run(outcome.run_id)
    assert detail.report is not None
    assert detail.report.counts["reask"]["extra"] == 3
    assert {i.origin for i in detail.report.items} == {ItemOrigin.MODEL}
    (pending,) = store.quarantine.list_quarantine()
    (signal,) = pending.error["reask"]["signals"]
    assert signal["reason"] == "unanswered"
    assert "answered 3 item(s) for the 1 asked" in signal["message"]


def test_follow_ups_are_counted_in_health_and_the_metrics(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    first, good = seven_with_a_bad_enum()
    provider.script.extend(
        [
            chat_answer(report(first)),
            chat_answer(report([good])),
            chat_answer(report(first)),
            chat_answer(report([dict(good, action="panic")])),
        ]
    )
    metrics = Metrics(state=store.state, process=False)
    executor = Executor(store, connector_for=connector_for, events=counted_by(metrics))
    instruction = project.instruction(**REASK)

    outcomes = [executor.run(instruction), executor.run(instruction)]

    assert [o.status for o in outcomes] == ["ok", "partial"]
    now = store.get_run(outcomes[1].run_id).finished_at
    assert now is not None
    health = store.health.instruction_health("daily-triage", now=now, every_trigger=True)
    assert health.reasked == {"accepted": 1, "still_quarantined": 1}
    sample = metrics.registry.get_sample_value
    labels = {"instruction": "daily-triage"}
    assert sample("salvagelane_reasked_items_total", {**labels, "outcome": "accepted"}) == 1
    assert (
        sample("salvagelane_reasked_items_total", {**labels, "outcome": "still_quarantined"}) == 1
    )
    assert sample("salvagelane_retries_total", {**labels, "cause": "quarantined"}) == 2
    runs = {r.id: r for r in store.list_runs()}
    assert [runs[o.run_id].reasked for o in outcomes] == [1, 0]
    assert [runs[o.run_id].operator_approved for o in outcomes] == [0, 0]


def test_no_follow_up_without_quarantined_in_retry_on(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    first, _ = seven_with_a_bad_enum()
    provider.script.extend([chat_answer(report(first))])

    outcome = Executor(store, connector_for=connector_for).run(project.instruction())

    assert (outcome.status, outcome.kept, outcome.attempts) == ("partial", 6, 1)
    assert len(provider.requests) == 1


def test_the_exchange_is_captured_and_replays(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
    tmp_path: Path,
) -> None:
    first, good = seven_with_a_bad_enum()
    provider.script.extend([chat_answer(report(first)), chat_answer(report([good]))])
    outcome = Executor(store, connector_for=connector_for).run(project.instruction(**REASK))

    captured = capture_run(store, outcome.run_id, None, tmp_path / "fixtures" / "reasked")

    directory = captured.path
    assert (directory / "reask.txt").read_text(encoding="utf-8") == report([good])
    assert json.loads((directory / "reask.json").read_text(encoding="utf-8"))["items"] == [6]
    expected = json.loads((directory / "expected.json").read_text(encoding="utf-8"))
    assert expected["status"] == "ok"
    assert [i.get("origin", "model") for i in expected["items"]] == ["model"] * 6 + ["reask"]
    replayed = Replayer(project.instructions).replay(directory)
    assert replayed.verdict == "same", replayed.to_json()
    # The follow-up's answer is part of what replays: a broken one is a difference.
    copy = tmp_path / "fixtures" / "changed"
    shutil.copytree(directory, copy)
    (copy / "reask.txt").write_text(report([dict(good, action="panic")]), encoding="utf-8")
    changed = Replayer(project.instructions).replay(copy)
    assert changed.verdict == "differs"
    assert [d.kind for d in changed.differences] == ["status", "item_lost"]


def test_try_says_a_run_would_ask_again_for_the_rejected_items(
    project: Project,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    first, _ = seven_with_a_bad_enum()
    provider.script.extend([chat_answer(report(first)), chat_answer(report(first))])
    at = datetime(2026, 11, 28, 5, 20, tzinfo=UTC)

    # Loaded first: instruction(**REASK) edits the definition file in place.
    plain = try_instruction(
        project.instruction(), connector_for=connector_for, sinks_for=no_sinks, at=at
    )
    asked = try_instruction(
        project.instruction(**REASK), connector_for=connector_for, sinks_for=no_sinks, at=at
    )

    assert asked.to_json()["retry"] == {
        "cause": "quarantined",
        "attempt": 2,
        "attempts": 3,
        "max_output_tokens": 4096,
    }
    assert plain.to_json()["retry"] is None
    assert len(provider.requests) == 2  # a trial makes one call, never the follow-up


def no_sinks(instruction: Instruction) -> list[Any]:
    return []
