"""Quarantine rows per attempt are bounded (issue 29.4): the model decides how many
candidates an output holds, so past ``guardrails.max_quarantined`` the rejected ones are
counted by reason (folded) instead of stored. Against a real local provider, on SQLite
and PostgreSQL: the rows, the run's figures, ``run --json``'s fields, the review page
and the metrics all say how many were folded, and the raw output keeps every one.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from salvagelane.cli.render import run_json, run_outcome
from salvagelane.runtime.executor import Executor
from salvagelane.runtime.metrics import Metrics, MetricsEndpoint, expose
from salvagelane.store import Store, upgrade
from salvagelane.ui.app import Settings, create_app
from salvagelane.ui.security import Access
from tests.support.metrics import counted_by, scrape
from tests.support.provider import ScriptedServer
from tests.support.run_setup import Project, chat_answer, items, openai_connector_for, provider

__all__ = ["provider"]

TOKEN = "bound-test-token-0123456789abcdef"


def flood(bad: int, *, closed: bool) -> str:
    """Three good recommendations, then ``bad`` empty objects (each fails the item
    schema); cut off after a comma unless ``closed``."""
    parts = [json.dumps(item) for item in items(3)] + ["{}"] * bad
    text = '{"summary": "A flood.", "recommendations": [' + ",".join(parts)
    return text + ("]}" if closed else ",")


def rows_by_attempt(database_url: str) -> dict[str, int]:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sa.text("SELECT attempt_id, count(*) FROM quarantined_items GROUP BY attempt_id")
            )
            return {row[0]: row[1] for row in rows}
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("bound", "line"),
    [
        pytest.param(None, "", id="default-1000"),
        pytest.param(5, "  max_quarantined: 5\n", id="definition-5"),
    ],
)
def test_an_output_of_32000_rejected_candidates_stores_a_bounded_lane(
    tmp_path: Path, provider: ScriptedServer, database_url: str, bound: int | None, line: str
) -> None:
    bad = 32_000
    stored = bound or 1000
    cut, whole = flood(bad, closed=False), flood(bad, closed=True)
    provider.script.extend([chat_answer(cut), chat_answer(whole)])
    project = Project.create(tmp_path)
    # The cut-off answer is asked for again, so both attempts meet the bound.
    retried = {"on: [nothing_salvaged]": "on: [nothing_salvaged, truncated]"}
    instruction = project.instruction(
        **retried, **({"  max_depth: 8\n": "  max_depth: 8\n" + line} if line else {})
    )
    assert instruction.guardrails.max_quarantined == stored
    upgrade(database_url)
    metrics = Metrics(process=False)
    served: MetricsEndpoint = expose(0, registry=metrics.registry)
    try:
        with Store.open(database_url) as store, httpx.Client() as client:
            executor = Executor(
                store,
                connector_for=openai_connector_for(client, provider.base_url, key="sk-bound"),
                events=counted_by(metrics),
            )
            outcome = executor.run(instruction)
            detail = store.get_run(outcome.run_id)
            page = TestClient(
                create_app(
                    Settings(
                        store=store,
                        access=Access(token=TOKEN, loopback=True),
                        instructions_dir=project.instructions,
                        actor="alice",
                    )
                ),
                base_url="http://127.0.0.1:8765",
            )
            assert page.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
            run_page = page.get(f"/runs/{outcome.run_id}")
        scraped = scrape(served.url)
    finally:
        served.close()

    # Both attempts (the cut one was retried) hold `stored` rows, not 32,000 each.
    assert len(provider.requests) == 2
    assert [a.number for a in detail.attempts] == [1, 2]
    assert sorted(rows_by_attempt(database_url).values()) == [stored, stored]
    # Every candidate is still counted, and the raw output still holds every one.
    folded = bad - stored
    assert (outcome.status, outcome.kept) == ("partial", 3)
    assert outcome.folded == {"schema": folded}
    assert outcome.quarantined == {"schema": bad}
    assert (detail.quarantined_count, detail.candidates) == (bad, bad + 3)
    assert (detail.folded, dict(detail.folded_by_reason)) == (folded, {"schema": folded})
    assert len(detail.quarantined) == 2 * stored  # both attempts' records
    assert detail.attempts[1].raw_output == whole
    first = detail.attempts[0].outcome
    assert first is not None
    assert first["counts"]["folded_by_reason"] == {"schema": folded}
    assert detail.report is not None
    assert detail.report.counts["folded"] == folded
    # Every view says so.
    printed = run_json(detail)
    assert (printed["folded"], printed["folded_by_reason"]) == (folded, {"schema": folded})
    assert f"{folded} of the quarantined folded past guardrails.max_quarantined" in run_outcome(
        detail, "db"
    )
    assert run_page.status_code == 200
    assert f"{folded} folded past guardrails.max_quarantined" in run_page.text
    assert scraped.by("salvagelane_items_folded_total", "instruction", "reason") == {
        ("daily-triage", "schema"): folded
    }
    assert scraped.by("salvagelane_items_quarantined_total", "instruction", "reason") == {
        ("daily-triage", "schema"): bad
    }


def test_an_output_under_the_bound_folds_nothing(
    tmp_path: Path, provider: ScriptedServer, database_url: str
) -> None:
    provider.script.append(chat_answer(flood(40, closed=True)))
    instruction = Project.create(tmp_path).instruction()
    upgrade(database_url)
    with Store.open(database_url) as store, httpx.Client() as client:
        executor = Executor(
            store, connector_for=openai_connector_for(client, provider.base_url, key="sk-bound")
        )
        outcome = executor.run(instruction)
        detail = store.get_run(outcome.run_id)
    assert list(rows_by_attempt(database_url).values()) == [40]
    assert (detail.folded, outcome.folded) == (0, {})
    assert detail.report is not None
    assert "folded" not in detail.report.counts
    assert "folded past" not in run_outcome(detail, "db")
