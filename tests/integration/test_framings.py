"""Framings and the envelope check end to end (issue 28): the daily-triage definition run
by the executor against the scripted provider (a real HTTP server on 127.0.0.1), stored
on SQLite and PostgreSQL, its health read back."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from salvagelane.connectors import Connector
from salvagelane.definitions import Instruction, render_prompt, resolve_context
from salvagelane.runtime.executor import Executor
from salvagelane.store import Store
from salvagelane.vocabulary import Trigger
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

KEY = "sk-framings-test-1b2c3d-never-stored"
FIRE = datetime(2031, 3, 4, 5, 20, tzinfo=UTC)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path)


@pytest.fixture
def connector_for(provider: ScriptedServer) -> Iterator[Callable[[Instruction], Connector]]:
    with httpx.Client() as client:
        yield openai_connector_for(
            client, provider.base_url, key=KEY, sleep=lambda seconds: None, max_attempts=1
        )


def test_an_envelope_breaking_its_schema_is_partial_and_breaks_the_clean_streak(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = project.instruction()
    clean = json.dumps({"summary": "All calm.", "recommendations": items(2)})
    broken = json.dumps({"summary": 12345, "mood": "odd", "recommendations": items(2)})
    provider.script.extend([chat_answer(clean), chat_answer(broken)])
    executor = Executor(store, connector_for=connector_for)

    first = executor.run(instruction, trigger=Trigger.SCHEDULE, scheduled_for=FIRE)
    second = executor.run(
        instruction, trigger=Trigger.SCHEDULE, scheduled_for=FIRE + timedelta(days=1)
    )

    assert (first.status, first.kept) == ("ok", 2)
    assert (second.status, second.kept, second.candidates) == ("partial", 2, 2)
    detail = store.get_run(second.run_id)
    assert detail.report is not None
    assert detail.report.counts["envelope_issues"] == 2
    (attempt,) = detail.attempts
    assert attempt.outcome is not None
    assert attempt.outcome["framing"] == "document"
    assert [issue["path"] for issue in attempt.outcome["envelope_issues"]] == [
        "$.summary",
        "$.mood",
    ]
    health = store.health.instruction_health("daily-triage", now=FIRE + timedelta(days=2), days=7)
    assert health.streak.count == 0
    assert health.streak.broken_by is not None
    assert health.streak.broken_by.id == second.run_id


def test_a_json_lines_definition_asks_for_lines_and_keeps_what_is_intact(
    project: Project,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    project.replace_in(
        project.root / "schemas" / "daily-triage-item.schema.json",
        '"rank": {',
        '"id": {"type": "string", "pattern": "^INC-[0-9]{4}$"},\n    "rank": {',
    )
    instruction = project.instruction(**{"  rank_key: rank": "  rank_key: rank\n  framing: lines"})
    assert str(instruction.output.framing) == "lines"
    rendered = render_prompt(instruction, resolve_context(instruction))
    assert "Reply in JSON Lines" in rendered.system
    # The envelope line's schema is shown without the items property.
    assert '"recommendations": {' not in rendered.system
    assert "The first line is the report's envelope" in rendered.system

    good = [dict(item, id=f"INC-000{n}") for n, item in enumerate(items(4))]
    lines = [json.dumps({"summary": "Four things today."})]
    lines += [json.dumps(item) for item in good[:3]]
    lines[2] = lines[2][:-1]  # the second item lost its closing brace
    lines.append(json.dumps(good[3])[:40])  # the last line was cut off
    provider.script.append(chat_answer("\n".join(lines), finish="length"))

    outcome = Executor(store, connector_for=connector_for).run(instruction)

    assert (outcome.status, outcome.kept, outcome.candidates) == ("partial", 2, 4)
    assert dict(outcome.quarantined) == {"malformed": 1, "truncated": 1}
    detail = store.get_run(outcome.run_id)
    assert detail.report is not None
    assert detail.report.envelope == {"summary": "Four things today."}
    assert [item.data["rank"] for item in detail.report.items] == [
        good[0]["rank"],
        good[2]["rank"],
    ]
    held = sorted(detail.quarantined, key=lambda q: q.source_index or 0)
    assert [(q.source_index, q.reason) for q in held] == [(1, "malformed"), (3, "truncated")]
    raw = detail.attempts[0].raw_output
    assert raw[held[0].span_start : held[0].span_end] == lines[2]
    assert held[1].provenance["finish_reason"] == "length"
    assert detail.attempts[0].outcome is not None
    assert detail.attempts[0].outcome["framing"] == "lines"
