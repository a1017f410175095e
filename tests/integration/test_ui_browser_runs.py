"""The review page's runs list, run view and evaluations in a real headless Chromium,
against ``salvagelane ui`` as a process (issue 33, the review page for a team).

The database holds the demo's own run (the truncated fixture replayed, as ``make demo``
stores it), a run whose one bad item a follow-up request mended, and a stored
evaluation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane.core.evaluation import Comparison, Side, verdict
from salvagelane.runtime.executor import Executor
from salvagelane.store import Store, upgrade
from tests.support.browser_review import launch_browser
from tests.support.cli import FIXTURE, salvagelane_here
from tests.support.provider import ScriptedServer
from tests.support.run_setup import Project, chat_answer, items, openai_connector_for
from tests.support.ui_server import RunningUi, running_ui

WIDTH = 1400


@dataclass(frozen=True, kw_only=True)
class Stored:
    url: str
    demo_run: str
    reask_run: str
    eval_id: str
    instructions: Path


def report(recommendations: list[dict[str, Any]]) -> str:
    return json.dumps({"summary": "Seven things.", "recommendations": recommendations})


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    root = tmp_path_factory.mktemp("runs-page")
    url = f"sqlite:///{root / 'salvagelane.db'}"
    upgrade(url)
    project = Project.create(root / "project")
    demo = salvagelane_here(
        "run",
        "daily-triage",
        "--replay",
        str(FIXTURE),
        "--instructions",
        str(project.instructions),
        "--json",
        database=url,
    )
    assert demo.returncode == 0, demo.stderr
    bad = items(7)
    good = dict(bad[6])
    bad[6] = dict(good, action="panic")
    instruction = project.instruction(
        **{"on: [nothing_salvaged]": "on: [nothing_salvaged, quarantined]"}
    )
    with ScriptedServer() as provider, httpx.Client() as client, Store.open(url) as store:
        provider.script.extend([chat_answer(report(bad)), chat_answer(report([good]))])
        connector_for = openai_connector_for(
            client, provider.base_url, key="sk-ui-test-0000", sleep=lambda s: None, max_attempts=1
        )
        reasked = Executor(store, connector_for=connector_for).run(instruction)
        assert reasked.status == "ok"
        compared = Comparison(
            fixture="corpus/f0",
            instruction="daily-triage",
            baseline=Side(status="partial", kept=6, quarantined={"schema": 1}),
            candidate=Side(status="ok", kept=7, latency_seconds=1.5),
        )
        eval_id = store.evals.add(
            candidate="model test/better, the recorded prompts",
            comparisons=[compared.to_json()],
            verdict=verdict([compared]).to_json(),
            created_at=datetime.now(UTC),
        )
    return Stored(
        url=url,
        demo_run=json.loads(demo.stdout)["run_id"],
        reask_run=reasked.run_id,
        eval_id=eval_id,
        instructions=project.instructions,
    )


@pytest.fixture(scope="module")
def server(stored: Stored, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningUi]:
    cwd = tmp_path_factory.mktemp("ui-cwd")
    with running_ui(stored.url, cwd=cwd, instructions=stored.instructions) as running:
        yield running


@pytest.fixture(scope="module")
def page(server: RunningUi) -> Iterator[Any]:
    for browser in launch_browser():
        context = browser.new_context(viewport={"width": WIDTH, "height": 900})
        opened = context.new_page()
        opened.goto(server.url)  # signs in
        yield opened
        context.close()


def no_sideways_overflow(page: Any) -> None:
    scroll, client = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client == WIDTH


def test_the_demo_run_view_wraps_and_keeps_held_back_on_screen(
    page: Any, server: RunningUi, stored: Stored
) -> None:
    page.goto(f"{server.base}/runs/{stored.demo_run}")
    no_sideways_overflow(page)
    held = page.locator("section.held").bounding_box()
    assert held is not None
    assert held["x"] + held["width"] <= WIDTH
    assert "Held back (1)" in page.inner_text("section.held")


def test_each_attempt_shows_its_prompt_and_response_collapsed(
    page: Any, server: RunningUi, stored: Stored
) -> None:
    page.goto(f"{server.base}/runs/{stored.reask_run}")
    exchanges = page.locator("details.exchange")
    assert exchanges.count() == 2
    assert not page.locator("#exchange-1 pre").first.is_visible()  # collapsed
    page.click("#exchange-2 summary")
    opened = page.inner_text("#exchange-2")
    assert "follow-up for item(s) 7 of #1" in opened
    assert "Your previous answer was accepted except for 1 item(s)" in opened
    assert '"recommendations"' in opened  # the response as stored
    no_sideways_overflow(page)


def test_a_mended_item_is_marked_and_linked(page: Any, server: RunningUi, stored: Stored) -> None:
    page.goto(f"{server.base}/runs/{stored.reask_run}")
    origins = page.locator("#report-items .origin").all_inner_texts()
    assert origins == ["model"] * 6 + ["reask: re-asked (attempt 2)"]
    assert "now report item 7 (attempt 2)" in page.inner_text("#mended")
    page.click("#mended a.resolution")
    assert page.url.endswith("#report-item-7")
    assert page.locator("#report-item-7 .origin").inner_text() == "reask: re-asked (attempt 2)"
    assert "1 mended by a follow-up request" in page.inner_text("#reasked-count")


def test_the_runs_list_filters_and_shows_the_strip_with_its_legend(
    page: Any, server: RunningUi, stored: Stored
) -> None:
    page.goto(f"{server.base}/runs")
    assert page.locator("#runs tbody tr").count() == 2
    assert page.locator(".strip-line rect.run").count() == 2
    legend = page.inner_text(".strip-legend")
    assert "partial" in legend
    assert "clean" in legend
    page.select_option("select[name=status]", "partial")
    with page.expect_navigation():
        page.click("form.filters button")
    rows = page.locator("#runs tbody tr")
    assert rows.count() == 1
    assert rows.first.get_attribute("data-id") == stored.demo_run
    with page.expect_navigation():
        page.click(f"#runs a[href='/runs/{stored.demo_run}']")
    assert page.url.endswith(f"/runs/{stored.demo_run}")
    page.goto(f"{server.base}/runs?trigger=schedule")
    assert page.inner_text("#no-runs") == "no runs match"
    page.goto(f"{server.base}/runs")
    page.fill("input[name=since]", "2999-01-01")
    with page.expect_navigation():
        page.click("form.filters button")
    assert page.url.endswith("/runs?instruction=&status=&trigger=&since=2999-01-01")
    assert page.inner_text("#no-runs") == "no runs match"


def test_queue_snippets_show_their_line_breaks(page: Any, server: RunningUi) -> None:
    page.goto(server.base + "/")
    snippet = page.locator("pre.snippet").first
    text = snippet.inner_text()
    assert "↵\n" in text
    assert "\\n" not in text


def test_the_health_strip_has_a_legend(page: Any, server: RunningUi) -> None:
    page.goto(f"{server.base}/health")
    assert "interrupted" in page.inner_text("section.health .strip-legend")


def test_a_stored_evaluation_is_listed_and_shown_side_by_side(
    page: Any, server: RunningUi, stored: Stored
) -> None:
    page.goto(f"{server.base}/evals")
    assert "model test/better" in page.inner_text("#evals")
    with page.expect_navigation():
        page.click(f"#evals a[href='/evals/{stored.eval_id}']")
    table = page.inner_text("#comparisons")
    assert "corpus/f0 better" in table
    assert page.locator("tr.side-candidate td").nth(3).inner_text() == "7"
    assert "not worse" in page.inner_text("#verdict")
    no_sideways_overflow(page)


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/runs?status=great", 400, "status: expected one of"),
        ("/runs?trigger=cron", 400, "trigger: expected one of"),
        ("/runs?instruction=nope", 400, "no stored run has instruction"),
        ("/runs?page=0", 400, "page: expected a number from 1"),
        ("/evals/0000-none", 404, "no evaluation"),
    ],
)
def test_bad_filters_and_unknown_evaluations_are_refused_saying_why(
    server: RunningUi, path: str, status: int, says: str
) -> None:
    response = httpx.get(server.base + path, timeout=10)
    assert response.status_code == status
    assert says in response.text
