"""The review flow of the review page in a real headless Chromium (issue 33): the next
pending item after each review, the correction editor's JSON check and item schema,
the bulk reject banner, named reviewers with their own tokens, and a queue reviewed to
empty with the keyboard only. Against ``salvagelane ui`` as a process; skipped as
test_ui_browser.py is (Playwright or chromium missing), except under CI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from salvagelane.store import Store
from salvagelane.store.models import QuarantineReviewRow
from tests.support.browser_review import (
    REVIEWERS,
    Queue,
    Served,
    copy_queue,
    launch_browser,
    make_queue,
    reviewers_file,
    serving,
)
from tests.support.review_page import TOKEN


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch_browser()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Queue:
    return make_queue(tmp_path_factory.mktemp("queue"))


@pytest.fixture
def queue(template: Queue, tmp_path: Path) -> Queue:
    return copy_queue(template, tmp_path)


@pytest.fixture
def served(queue: Queue, tmp_path: Path) -> Iterator[Served]:
    with serving(queue.url, cwd=tmp_path) as running:
        yield running


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.goto(served.sign_in(TOKEN))
    yield opened
    context.close()


def ready(page: Any) -> None:
    """Wait until ui.js listens for keys and has checked the editor."""
    page.wait_for_selector("html[data-keys='ready'][data-ready='yes']", state="attached")


def statuses(queue: Queue) -> dict[int, str]:
    with Store.open(queue.url) as store:
        return {i: store.quarantine.get_quarantine(i).review_status for i in queue.pending}


def test_after_a_review_the_next_pending_item_of_the_filter_opens(
    page: Any, served: Served, queue: Queue
) -> None:
    schema, hostile, second, third, fourth = queue.pending
    page.goto(f"{served.base}/items/{hostile}?status=pending")
    assert page.inner_text("#left") == "5 of 5 left"
    page.fill("#reject-note", "noise")
    page.click("#reject")

    # The next older pending item, saying what happened to the last one and what is left.
    page.wait_for_url(f"**/items/{second}?status=pending&done=rejected&of={hostile}")
    assert page.inner_text("#done") == (
        f"#{hostile} rejected; next pending item: #{second}, 4 of 5 left"
    )
    for current, following in ((second, third), (third, fourth)):
        page.fill("#reject-note", "noise")
        page.click("#reject")
        page.wait_for_url(f"**/items/{following}?status=pending&done=rejected&of={current}")
    # The oldest one reviewed: back to the newest left (the one skipped at the start).
    page.fill("#reject-note", "noise")
    page.click("#reject")
    page.wait_for_url(f"**/items/{schema}?status=pending&done=rejected&of={fourth}")
    assert page.inner_text("#left") == "1 of 5 left"
    page.fill("#corrected", json.dumps(queue.reviewed.fixed_item))
    page.click("#approve")

    # None left: the queue, saying so.
    page.wait_for_url(f"**/?status=pending&done=approved&of={schema}")
    assert page.inner_text("#done") == (
        f"#{schema} approved. Queue empty: no pending item matches this filter."
    )
    assert page.locator("#queue tbody tr").count() == 0
    assert statuses(queue) == {
        schema: "approved",
        hostile: "rejected",
        second: "rejected",
        third: "rejected",
        fourth: "rejected",
    }


def test_the_editor_checks_json_as_you_type_and_shows_the_item_schema(
    page: Any, served: Served, queue: Queue
) -> None:
    item = queue.reviewed.schema_item
    page.goto(f"{served.base}/items/{item}")
    ready(page)
    approve = page.locator("#approve")
    assert approve.is_enabled()  # the held item as it came: JSON, if not a valid item

    # The required fields and the enums of the run's stored item schema.
    fields = page.locator("#schema-fields")
    assert (
        fields.locator("summary")
        .inner_text()
        .endswith("required: rank, candidate, action, why, confidence, wsjf")
    )
    action = fields.locator("tr[data-field='action']")
    assert "required" in action.inner_text()
    assert action.locator("td.enum code").all_inner_texts() == [
        '"start"',
        '"continue"',
        '"unblock"',
        '"review"',
        '"defer"',
        '"drop"',
    ]
    score = fields.locator("tr[data-field='wsjf.business_value']")
    assert score.inner_text().split("\t")[1:] == ["required", "integer", "", "1 to 20"]

    # As you type: where it stops parsing, and approve is off until it does.
    editor = page.locator("#corrected")
    editor.fill('{\n  "rank": 2,\n  "action" "defer"\n}')
    check = page.locator("#corrected-check")
    assert check.inner_text().startswith(
        "not JSON yet: line 3, column 12: expected ':' after the key"
    )
    assert approve.is_disabled()
    assert editor.get_attribute("aria-invalid") == "true"
    editor.fill('{"rank": 2, "action": "defer",}')
    assert 'line 1, column 31: expected a "quoted" key, found "}" (a trailing comma?)' in (
        check.inner_text()
    )
    editor.fill(json.dumps(queue.reviewed.fixed_item, indent=2))
    assert check.inner_text().startswith("JSON parses")
    assert approve.is_enabled()

    # The browser is not trusted: a broken item sent anyway is judged by the server.
    editor.fill('{"rank": 2 "action": "defer"}')
    page.evaluate("document.getElementById('approve').disabled = false")
    page.click("#approve")
    assert page.locator("#refusal").is_visible()
    assert "malformed" in page.inner_text("#refusal")
    assert statuses(queue)[item] == "pending"
    with Store.open(queue.url) as store:
        [refused] = store.quarantine.get_quarantine(item).reviews
    assert refused.action == "approve_refused"


def test_bulk_reject_ends_on_a_banner_naming_the_count_and_the_filter(
    page: Any, served: Served, queue: Queue
) -> None:
    page.goto(f"{served.base}/?instruction=hostile&reason=malformed")
    page.fill("form.bulk input[name='note']", "noise from a test")
    page.click("#bulk-reject")
    page.click("#confirm-reject-all")

    page.wait_for_url("**/?instruction=hostile&reason=malformed&rejected=4")
    assert page.inner_text("#bulk-done") == (
        "Rejected 4 item(s) matching instruction hostile, reason malformed."
    )
    schema, *hostile = queue.pending
    assert statuses(queue) == {schema: "pending", **dict.fromkeys(hostile, "rejected")}


def test_two_named_reviewers_sign_in_with_their_own_tokens(
    browser: Any, queue: Queue, tmp_path: Path
) -> None:
    schema, hostile = queue.pending[:2]
    with serving(queue.url, cwd=tmp_path, reviewers=reviewers_file(tmp_path)) as served:
        assert served.printed[-2:] == (
            f"reviewers: alice, bob (from {tmp_path / 'reviewers.txt'})",
            f"open {served.base}/?token=YOUR-TOKEN",
        )
        assert not any(token in line for line in served.printed for token in REVIEWERS.values())
        pages = {}
        contexts = [browser.new_context() for _ in range(3)]
        for context, (name, token) in zip(contexts, REVIEWERS.items(), strict=False):
            pages[name] = context.new_page()
            pages[name].goto(served.sign_in(token))
            assert pages[name].inner_text("#signed-in-as") == name
        # The shared token does not sign in when there are reviewers.
        stranger = contexts[2].new_page()
        assert stranger.goto(served.sign_in(TOKEN)).status == 403

        alice, bob = pages["alice"], pages["bob"]
        alice.goto(f"{served.base}/items/{hostile}")
        assert alice.inner_text("#reviewer") == "alice"
        assert alice.locator("input[name='by']").count() == 0  # no name to type
        # A name slipped into the form changes nothing: the token says who it is.
        alice.evaluate(
            "const f = document.getElementById('reject-form'); const i ="
            " document.createElement('input'); i.type = 'hidden'; i.name = 'by';"
            " i.value = 'mallory'; f.appendChild(i);"
        )
        alice.fill("#reject-note", "spam, says alice")
        alice.click("#reject")
        alice.wait_for_selector("#done")
        bob.goto(f"{served.base}/items/{schema}")
        bob.fill("#corrected", json.dumps(queue.reviewed.fixed_item))
        bob.click("#approve")
        bob.wait_for_selector("#done")

        with Store.open(queue.url) as store:
            held = {i: store.quarantine.get_quarantine(i) for i in (schema, hostile)}
        engine = sa.create_engine(queue.url)
        with engine.connect() as connection:
            rows = connection.execute(
                sa.select(QuarantineReviewRow.quarantine_id, QuarantineReviewRow.actor)
                .where(QuarantineReviewRow.quarantine_id.in_((schema, hostile)))
                .order_by(QuarantineReviewRow.id)
            ).all()
        engine.dispose()
        assert [tuple(row) for row in rows] == [(hostile, "alice"), (schema, "bob")]
        assert (held[hostile].reviewed_by, held[schema].reviewed_by) == ("alice", "bob")
        for viewer in (alice, bob):
            viewer.goto(f"{served.base}/items/{hostile}")
            assert viewer.locator("#audit tbody td").nth(2).inner_text() == "alice"
            viewer.goto(f"{served.base}/items/{schema}")
            assert viewer.locator("#audit tbody td").nth(2).inner_text() == "bob"
        for context in contexts:
            context.close()


def test_a_queue_is_reviewed_to_empty_with_the_keyboard_only(
    page: Any, served: Served, queue: Queue
) -> None:
    keys = page.keyboard

    def focused() -> str:
        found: str = page.evaluate(
            "(() => { const e = document.activeElement;"
            " return e.id || e.getAttribute('href') || e.tagName; })()"
        )
        return found

    def outlined() -> bool:
        style: str = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        return style != "none"

    page.goto(f"{served.base}/?status=pending")
    ready(page)
    keys.press("?")
    assert page.locator("#keys-help").is_visible()
    assert "approve" in page.inner_text("#keys-help")
    keys.press("Escape")
    assert not page.locator("#keys-help").is_visible()

    # j selects the first row and focuses its link, visibly; Enter opens it.
    keys.press("j")
    assert focused().startswith(f"/items/{queue.reviewed.schema_item}")
    assert outlined()
    keys.press("Enter")
    page.wait_for_url(f"**/items/{queue.reviewed.schema_item}?status=pending")
    ready(page)

    # The held item does not pass: e edits it. While its JSON is broken, a goes back to
    # the editor; once it parses, a focuses approve (a alone never approves).
    keys.press("e")
    assert focused() == "corrected"
    keys.press("Control+a")
    keys.insert_text('{"rank": ')
    keys.press("Escape")
    keys.press("a")
    assert focused() == "corrected"
    keys.press("Control+a")
    keys.insert_text(json.dumps(queue.reviewed.fixed_item, indent=2))
    keys.press("Escape")
    keys.press("a")
    assert focused() == "approve"
    assert statuses(queue)[queue.reviewed.schema_item] == "pending"
    # Tab reaches approve from the editor too; Enter approves.
    keys.press("e")
    for _ in range(10):
        keys.press("Tab")
        if focused() == "approve":
            break
    assert focused() == "approve"
    assert outlined()
    keys.press("Enter")

    # The rest: r, the note, Enter; each time the next pending item opens.
    for current in queue.pending[1:]:
        page.wait_for_url(f"**/items/{current}?status=pending&done=*")
        ready(page)
        keys.press("r")
        assert focused() == "reject-note"
        keys.type("noise")
        keys.press("Enter")
    page.wait_for_selector("#queue-empty")
    assert set(statuses(queue).values()) == {"approved", "rejected"}
