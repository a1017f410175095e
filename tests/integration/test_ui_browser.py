"""The review page in a real headless Chromium (Debian's ``chromium``, driven by
Playwright for Python with ``executable_path``), against ``salvagelane ui`` as a process.

Skipped with a note where Playwright or chromium is missing, except under CI (``CI``
set), where ``.ci/run`` installs both and a skip would hide a broken page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from salvagelane.store import Store
from tests.support.browser_review import launch_browser
from tests.support.review_page import SCRIPT, Reviewed, reviewed_database
from tests.support.ui_server import RunningUi, running_ui


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch_browser()


@pytest.fixture
def reviewed(tmp_path: Path) -> Reviewed:
    return reviewed_database(f"sqlite:///{tmp_path / 'salvagelane.db'}", tmp_path)


@pytest.fixture
def server(reviewed: Reviewed, tmp_path: Path) -> Iterator[RunningUi]:
    with running_ui(reviewed.url, cwd=tmp_path) as running:
        yield running


class Watched:
    """A page with every request, dialog and ``alert`` call it makes recorded."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on(
            "dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss())
        )
        # Runs before any script of the page: an alert from the model's text would land here.
        self.page.add_init_script(
            "window.__alerts = []; window.alert = (m) => window.__alerts.push(String(m));"
        )

    def keys_ready(self) -> None:
        """Wait until the page's shortcuts listen (ui.js marks the page)."""
        self.page.wait_for_selector("html[data-keys='ready']", state="attached")

    def alerts(self) -> list[str]:
        found: list[str] = self.page.evaluate("window.__alerts")
        return found

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    opened = Watched(browser)
    yield opened
    opened.close()


def test_review_in_a_browser(watched: Watched, server: RunningUi, reviewed: Reviewed) -> None:
    page = watched.page
    page.goto(server.url)
    assert page.url == server.base + "/"  # the token left the address bar for a cookie
    assert page.locator("#queue tbody tr").count() == 2

    # Filter by reason, open the item, see its span marked: the model's script is text.
    page.select_option("#filter-reason", "malformed")
    page.click("#apply-filters")
    assert page.locator("#queue tbody tr").count() == 1
    watched.keys_ready()
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/items/{reviewed.hostile_item}?reason=malformed")
    span = page.locator("#raw mark.span").first
    assert span.is_visible()
    marked = " ".join(page.locator("#raw mark.span").all_inner_texts())
    assert SCRIPT in marked
    assert "onerror=alert(1)>" in marked
    assert page.locator("#raw script, #raw img").count() == 0
    assert page.locator("script").count() == 1  # the package's ui.js, nothing else
    assert watched.alerts() == []
    assert watched.dialogs == []

    # Reject it with a note: the status changes in the database and the audit trail;
    # it was the filter's only pending item, so the page is back at an empty queue.
    watched.keys_ready()
    page.keyboard.press("r")
    page.keyboard.type("spam from a test")
    page.click("#reject")
    page.wait_for_selector("#queue-empty")
    page.goto(f"{server.base}/items/{reviewed.hostile_item}")
    assert page.inner_text("#review-status") == "rejected"
    assert "spam from a test" in page.inner_text("#audit")
    with Store.open(reviewed.url) as store:
        held = store.quarantine.get_quarantine(reviewed.hostile_item)
    assert held.review_status == "rejected"
    assert [(r.action, r.note) for r in held.reviews] == [("reject", "spam from a test")]

    # Approve the corrected schema item from the editor: it is in its run's report.
    page.goto(f"{server.base}/?reason=schema")
    page.click(f"a[href^='/items/{reviewed.schema_item}']")
    watched.keys_ready()
    page.keyboard.press("a")
    page.fill("#corrected", json.dumps(reviewed.fixed_item, indent=2))
    page.click("#approve")
    page.wait_for_selector("#queue-empty")
    page.goto(f"{server.base}/items/{reviewed.schema_item}")
    assert page.inner_text("#review-status") == "approved"
    page.click("#run-link")
    assert page.inner_text("#run-status") == "ok"
    operator = page.locator("#report-items li.origin-operator")
    assert operator.count() == 1
    assert json.loads(operator.locator("pre").inner_text()) == reviewed.fixed_item
    with Store.open(reviewed.url) as store:
        payload = store.get_report_payload(reviewed.schema_run)
    assert payload["items"][-1] == reviewed.fixed_item

    # The health view: four clean scheduled runs in a row.
    page.goto(f"{server.base}/health")
    daily = page.locator("section.health[data-instruction='daily']")
    assert daily.locator("[data-figure='streak']").inner_text() == "4"
    assert daily.locator("svg.strip rect").count() == 5

    # Nothing left the page: every request went to this server.
    assert watched.requests
    assert [url for url in watched.requests if not url.startswith(server.base + "/")] == []
    assert watched.alerts() == []
    assert watched.dialogs == []
