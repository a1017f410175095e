"""The review page over HTTP (Starlette's test client, in process), on SQLite and
PostgreSQL: access rules, escaping, the actions through the command line's code, and
the health view's figures against ``salvagelane health --json``."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from salvagelane.store import Store
from salvagelane.ui.app import Settings, create_app
from salvagelane.ui.security import CSP, Access
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.cli import ROOT, clean_env, command, salvagelane
from tests.support.history import seed
from tests.support.review_page import IMG, SCRIPT, TOKEN, Reviewed, csrf_of, reviewed_database


@pytest.fixture
def reviewed(database_url: str, tmp_path: Path) -> Reviewed:
    return reviewed_database(database_url, tmp_path)


@pytest.fixture
def store(reviewed: Reviewed) -> Iterator[Store]:
    with Store.open(reviewed.url) as opened:
        yield opened


def client_of(store: Store, *, loopback: bool = True, host: str = "127.0.0.1") -> TestClient:
    settings = Settings(
        store=store,
        access=Access(token=TOKEN, loopback=loopback),
        instructions_dir=ROOT / "instructions",
        actor="alice",
    )
    return TestClient(create_app(settings), base_url=f"http://{host}:8765")


def signed_in(store: Store) -> TestClient:
    client = client_of(store)
    answer = client.get(f"/?token={TOKEN}", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/"
    return client


def confirmation_of(html: str) -> dict[str, str]:
    """The hidden fields a bulk reject's confirmation page sends back: what it showed."""
    return dict(re.findall(r'name="(confirmed|through|digest)" value="([^"]*)"', html))


def status_and_audit(store: Store, item: int) -> tuple[str, list[str]]:
    detail = store.quarantine.get_quarantine(item)
    return detail.review_status, [entry.action for entry in detail.reviews]


def test_changes_need_the_token_and_the_csrf_token(reviewed: Reviewed, store: Store) -> None:
    item = reviewed.hostile_item
    anonymous = client_of(store)
    page = anonymous.get(f"/items/{item}")
    assert page.status_code == 200  # reading on loopback needs no token
    assert 'id="reject-form"' not in page.text
    csrf = Access(token=TOKEN, loopback=True).csrf()

    no_token = anonymous.post(f"/items/{item}/reject", data={"note": "spam", "csrf": csrf})
    assert no_token.status_code == 403
    client = signed_in(store)
    wrong_csrf = client.post(f"/items/{item}/reject", data={"note": "spam", "csrf": "0" * 64})
    assert wrong_csrf.status_code == 403
    no_csrf = client.post(f"/items/{item}/reject", data={"note": "spam"})
    assert no_csrf.status_code == 403
    bulk = client.post("/reject-all", data={"note": "all", "confirmed": "1", "csrf": "x"})
    assert bulk.status_code == 403
    assert status_and_audit(store, item) == ("pending", [])

    form = client.get(f"/items/{item}")
    assert csrf_of(form.text) == csrf
    done = client.post(
        f"/items/{item}/reject", data={"note": "spam", "csrf": csrf}, follow_redirects=False
    )
    assert done.status_code == 303
    assert status_and_audit(store, item) == ("rejected", ["reject"])
    assert store.quarantine.get_quarantine(item).reviews[0].actor == "alice"


def test_a_wrong_token_and_a_foreign_host_are_refused(store: Store) -> None:
    client = client_of(store)
    assert client.get("/?token=nope").status_code == 403
    rebinding = client_of(store, host="evil.example")
    assert rebinding.get("/").status_code == 400


def test_off_loopback_every_page_needs_the_token(store: Store) -> None:
    client = client_of(store, loopback=False, host="192.0.2.10")
    assert client.get("/").status_code == 403
    assert client.get("/health.json").status_code == 403
    assert client.get(f"/?token={TOKEN}").status_code == 200  # signed in, redirected
    assert client.get("/health.json").status_code == 200


def test_model_output_is_text_and_the_policy_is_strict(reviewed: Reviewed, store: Store) -> None:
    client = signed_in(store)
    pages = [client.get(f"/items/{reviewed.hostile_item}"), client.get("/?instruction=hostile")]
    runs = store.list_runs(instruction_id="hostile")
    pages.append(client.get(f"/runs/{runs[0].id}"))

    for page in pages:
        assert page.status_code == 200
        assert page.headers["content-security-policy"] == CSP
        assert "<script>alert" not in page.text
        assert "<img src=x" not in page.text
        # The only script is the package's own file.
        assert re.findall(r"<script[^>]*>", page.text) == ['<script src="/static/ui.js" defer>']
    item = pages[0].text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in item
    assert "&lt;img src=x onerror=alert(1)&gt;" in item
    marked = re.search(r'<mark class="span">(.*?)</mark>', item, re.DOTALL)
    assert marked is not None
    assert "&lt;script&gt;" in marked.group(1)
    assert "script-src 'self'" in CSP
    assert "'unsafe-inline'" not in CSP
    assert SCRIPT not in item
    assert IMG not in item


def test_the_queue_filters_counts_and_pages(reviewed: Reviewed, store: Store) -> None:
    client = client_of(store)
    everything = client.get("/")
    assert 'data-reason="schema" data-count="1"' in everything.text
    assert 'data-reason="malformed" data-count="1"' in everything.text

    schema = client.get("/?reason=schema")
    ids = re.findall(r'<tr data-href="/items/(\d+)', schema.text)
    assert ids == [str(reviewed.schema_item)]
    assert client.get("/?reason=nonsense").status_code == 400
    typo = client.get("/?instruction=daily-triag")
    assert typo.status_code == 400
    assert "no stored run has instruction" in typo.text
    assert client.get("/?status=approved").text.count('<tr data-href="') == 0
    # The item view links to its neighbours in the same filter (newest first): the schema
    # item was quarantined after the hostile one.
    newest = client.get(f"/items/{reviewed.schema_item}").text
    assert f'id="next-item" rel="next" href="/items/{reviewed.hostile_item}?"' in newest
    assert 'id="prev-item"' not in newest
    older = client.get(f"/items/{reviewed.hostile_item}").text
    assert f'id="prev-item" rel="prev" href="/items/{reviewed.schema_item}?"' in older
    assert 'id="next-item"' not in older
    filtered = client.get(f"/items/{reviewed.hostile_item}?reason=malformed").text
    assert 'id="prev-item"' not in filtered


def test_approve_refuses_then_adds_to_the_report(reviewed: Reviewed, store: Store) -> None:
    client = signed_in(store)
    csrf = csrf_of(client.get(f"/items/{reviewed.schema_item}").text)
    wrong = dict(reviewed.fixed_item, action="panic")

    refused = client.post(
        f"/items/{reviewed.schema_item}/approve",
        data={"corrected": json.dumps(wrong), "csrf": csrf, "by": "bob"},
    )

    assert refused.status_code == 422
    assert 'id="refusal"' in refused.text
    assert "<code>$.action</code>" in refused.text
    assert "<code>&#34;panic&#34;</code>" in refused.text
    assert status_and_audit(store, reviewed.schema_item) == ("pending", ["approve_refused"])

    approved = client.post(
        f"/items/{reviewed.schema_item}/approve",
        data={"corrected": json.dumps(reviewed.fixed_item), "csrf": csrf, "by": "bob"},
        follow_redirects=False,
    )

    assert approved.status_code == 303
    assert status_and_audit(store, reviewed.schema_item) == (
        "approved",
        ["approve_refused", "approve"],
    )
    payload = store.get_report_payload(reviewed.schema_run)
    assert payload["items"][-1] == reviewed.fixed_item
    assert payload["item_origins"][-1] == "operator"
    run_page = client.get(f"/runs/{reviewed.schema_run}")
    assert 'id="run-status">ok<' in run_page.text
    assert run_page.text.count('class="origin-operator"') == 1


def test_bulk_reject_asks_first_and_takes_the_filter(reviewed: Reviewed, store: Store) -> None:
    client = signed_in(store)
    csrf = Access(token=TOKEN, loopback=True).csrf()
    form = {"reason": "malformed", "note": "noise", "csrf": csrf}

    asked = client.post("/reject-all", data=form)

    assert asked.status_code == 200
    assert "Reject 1 pending item(s)?" in asked.text
    assert status_and_audit(store, reviewed.hostile_item) == ("pending", [])
    stale = client.post("/reject-all", data={**form, "confirmed": "7"})
    assert "Reject 1 pending item(s)?" in stale.text  # a count that changed asks again
    confirmation = confirmation_of(asked.text)
    assert confirmation["confirmed"] == "1"
    done = client.post("/reject-all", data={**form, **confirmation}, follow_redirects=False)
    assert done.status_code == 303
    assert status_and_audit(store, reviewed.hostile_item) == ("rejected", ["bulk_reject"])
    assert status_and_audit(store, reviewed.schema_item) == ("pending", [])


def test_capture_writes_the_fixture_of_the_items_output(
    reviewed: Reviewed, store: Store, tmp_path: Path
) -> None:
    client = signed_in(store)
    csrf = Access(token=TOKEN, loopback=True).csrf()
    target = tmp_path / "captured"

    answer = client.post(
        f"/items/{reviewed.schema_item}/capture",
        data={"directory": str(target), "csrf": csrf},
        follow_redirects=False,
    )

    assert answer.status_code == 303
    assert (target / "raw.txt").read_text(encoding="utf-8").startswith("{")
    assert json.loads((target / "expected.json").read_text(encoding="utf-8"))["status"]
    replay = salvagelane("replay", str(target))
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_the_health_view_shows_what_the_command_prints(reviewed: Reviewed, store: Store) -> None:
    client = client_of(store)
    served = client.get("/health.json?instruction=daily").json()
    page = client.get("/health?instruction=daily").text
    proc = salvagelane("health", "--instruction", "daily", "--json", database=reviewed.url)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)

    for figures in (served, printed):
        for health in figures:
            del health["until"]
    assert served == printed
    [daily] = printed
    assert daily["streak"]["clean_scheduled_runs"] == 4
    shown = dict(re.findall(r'data-figure="(\w+)"[^>]*>([^<]*)<', page))
    assert int(shown["streak"]) == daily["streak"]["clean_scheduled_runs"]
    assert int(shown["runs"]) == daily["runs"]
    assert int(shown["missed_fires"]) == daily["missed_fires"] == 1
    assert int(shown["interrupted_fires"]) == daily["interrupted_fires"]
    values = dict(re.findall(r'data-figure="(\w+_rate)" data-value="([^"]*)"', page))
    assert float(values["partial_rate"]) == daily["partial_rate"]
    assert float(values["failed_rate"]) == daily["failed_rate"]


def test_the_command_serves_the_page(reviewed: Reviewed, tmp_path: Path) -> None:
    """``salvagelane ui`` as a process: it prints the URL with the token and answers."""
    from tests.support.ui_server import running_ui

    with running_ui(reviewed.url, cwd=tmp_path) as server:
        assert server.url.endswith(f"/?token={TOKEN}")
        answer = httpx.get(server.base + "/", timeout=10)
        assert answer.status_code == 200
        assert "Quarantine" in answer.text


def test_a_port_in_use_is_refused(reviewed: Reviewed) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        proc = salvagelane("ui", "--port", str(port), database=reviewed.url, timeout=60)

    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert proc.stdout == ""


def test_listening_beyond_loopback_is_warned_about(reviewed: Reviewed, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        command("ui", "--host", "0.0.0.0", "--port", "0", "--database", reviewed.url),
        cwd=tmp_path,
        env=clean_env({"SALVAGELANE_UI_TOKEN": TOKEN}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = next(line for line in proc.stdout if line.startswith("open "))
        base = url.split(" ", 1)[1].split("/?", 1)[0].replace("0.0.0.0", "127.0.0.1")
        # Not on loopback: even reading needs the token.
        assert httpx.get(base + "/", timeout=10).status_code == 403
        signed = httpx.get(f"{base}/?token={TOKEN}", timeout=10, follow_redirects=True)
        assert signed.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        _, errors = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "warning: listening on 0.0.0.0, not 127.0.0.1" in errors


def test_bulk_reject_rejects_only_the_items_it_confirmed(reviewed: Reviewed, store: Store) -> None:
    """Issue 29.7: an item quarantined between the confirmation and the confirming POST
    is not rejected unseen, even when another left the filter meanwhile (the count the
    confirmation showed is then right again)."""
    client = signed_in(store)
    csrf = Access(token=TOKEN, loopback=True).csrf()
    form = {"instruction": "hostile", "note": "noise", "csrf": csrf}
    asked = client.post("/reject-all", data=form)
    confirmation = confirmation_of(asked.text)
    assert confirmation["confirmed"] == "1"
    arrived = seed(
        store,
        at=datetime.now(UTC),
        status=RunStatus.PARTIAL,
        trigger=Trigger.MANUAL,
        instruction_id="hostile",
        reasons=("malformed",),
    )
    [arrived_item] = [q.id for q in store.get_run(arrived).quarantined]

    done = client.post("/reject-all", data={**form, **confirmation}, follow_redirects=False)

    assert done.status_code == 303
    assert done.headers["location"] == "/?instruction=hostile&rejected=1"
    assert status_and_audit(store, reviewed.hostile_item) == ("rejected", ["bulk_reject"])
    assert status_and_audit(store, arrived_item) == ("pending", [])

    # Confirmed: the arrived item. Then it is rejected by someone else and a third one
    # arrives: one pending item again, but not the one confirmed.
    confirmation = confirmation_of(client.post("/reject-all", data=form).text)
    assert confirmation["confirmed"] == "1"
    store.quarantine.reject_quarantined(
        arrived_item, actor="bob", note="seen", now=datetime.now(UTC)
    )
    third = seed(
        store,
        at=datetime.now(UTC),
        status=RunStatus.PARTIAL,
        trigger=Trigger.MANUAL,
        instruction_id="hostile",
        reasons=("malformed",),
    )
    [third_item] = [q.id for q in store.get_run(third).quarantined]

    changed = client.post("/reject-all", data={**form, **confirmation}, follow_redirects=False)

    assert changed.status_code == 409
    assert 'id="changed"' in changed.text
    assert "Reject 1 pending item(s)?" in changed.text  # asked again, about the third
    assert status_and_audit(store, third_item) == ("pending", [])
    assert changed.headers["content-security-policy"] == CSP


def test_review_state_conflicts_are_409(reviewed: Reviewed, store: Store) -> None:
    """Issue 29.11: an item reviewed already exists: 409, not 404."""
    client = signed_in(store)
    csrf = Access(token=TOKEN, loopback=True).csrf()
    item = reviewed.hostile_item
    first = client.post(
        f"/items/{item}/reject", data={"note": "spam", "csrf": csrf}, follow_redirects=False
    )
    assert first.status_code == 303

    again = client.post(f"/items/{item}/reject", data={"note": "spam", "csrf": csrf})
    approve = client.post(f"/items/{item}/approve", data={"corrected": '{"a": 1}', "csrf": csrf})

    for answer in (again, approve):
        assert answer.status_code == 409, answer.text
        assert "it is rejected" in answer.text
        assert answer.headers["content-security-policy"] == CSP
    unknown = client.post("/items/999999/reject", data={"note": "spam", "csrf": csrf})
    assert unknown.status_code == 404
    assert "no quarantined item with id 999999" in unknown.text


@pytest.mark.parametrize(
    "path",
    [
        "/?since=0001-01-01T00:00:00%2B14:00",
        "/?since=9999-12-31T23:59:59-14:00",
        "/items/{item}?since=0001-01-01T00:00:00%2B14:00",
        "/items/99999999999999999999999",
        "/items/9223372036854775808",
        "/items/2147483648",
    ],
)
def test_extreme_dates_and_ids_are_refused_not_crashed(
    reviewed: Reviewed, store: Store, path: str
) -> None:
    """Issue 29.11: a moment out of datetime's range in UTC and an id beyond any column
    were a 500 (OverflowError): one clear message, with the security headers."""
    client = TestClient(
        create_app(
            Settings(
                store=store,
                access=Access(token=TOKEN, loopback=True),
                instructions_dir=ROOT / "instructions",
                actor="alice",
            )
        ),
        base_url="http://127.0.0.1:8765",
        raise_server_exceptions=False,
    )

    answer = client.get(path.format(item=reviewed.hostile_item))

    assert answer.status_code in (400, 404), answer.text
    message = re.search(r'<p class="error" id="error">([^<]*)</p>', answer.text)
    assert message is not None
    if answer.status_code == 400:
        assert message.group(1).startswith("since: expected a moment from year 1 to 9999")
    else:
        assert "no quarantined item with id" in message.group(1)
    assert answer.headers["content-security-policy"] == CSP


def run_ids_of(html: str) -> list[str]:
    return re.findall(r'<tr data-id="([^"]+)">', html)


def test_the_runs_list_filters_and_pages(
    reviewed: Reviewed, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/runs``: newest first, filtered by instruction, status, trigger and since (each
    against the runs the fixture stored), paged with the filter kept in the links."""
    client = client_of(store)
    stored = store.list_runs(limit=100)
    everything = client.get("/runs")
    assert everything.status_code == 200
    assert run_ids_of(everything.text) == [r.id for r in stored]
    assert len(stored) == 7

    daily = run_ids_of(client.get("/runs?instruction=daily").text)
    assert daily == [r.id for r in stored if r.instruction_id == "daily"]
    assert len(daily) == 5
    missed = run_ids_of(client.get("/runs?status=missed").text)
    assert missed == [r.id for r in stored if r.status == RunStatus.MISSED]
    assert len(missed) == 1
    scheduled = run_ids_of(client.get("/runs?trigger=schedule&instruction=daily").text)
    assert scheduled == [r.id for r in stored if r.trigger == Trigger.SCHEDULE]
    assert len(scheduled) == 5
    hostile = store.list_runs(instruction_id="hostile")[0].id
    assert run_ids_of(client.get("/runs?instruction=hostile&status=partial").text) == [hostile]
    assert run_ids_of(client.get("/runs?instruction=hostile&status=ok").text) == []

    cut = (datetime.now(UTC) - timedelta(days=2)).date()
    since = client.get(f"/runs?since={cut.isoformat()}")
    recent = [r.id for r in stored if r.created_at.date() >= cut]
    assert run_ids_of(since.text) == recent
    assert 0 < len(recent) < len(stored)
    assert f'name="since" value="{cut.isoformat()}"' in since.text
    moment = stored[2].created_at.isoformat()
    assert run_ids_of(client.get("/runs", params={"since": moment}).text) == [
        r.id for r in stored[:3]
    ]
    refused = client.get("/runs?since=yesterday")
    assert refused.status_code == 400
    assert "since: expected a date such as 2026-11-21" in refused.text

    monkeypatch.setattr("salvagelane.ui.app.PAGE_SIZE", 2)
    first = client.get("/runs?instruction=daily")
    assert run_ids_of(first.text) == daily[:2]
    assert 'rel="next" href="/runs?instruction=daily&amp;page=2"' in first.text
    assert 'rel="prev"' not in first.text
    last = client.get("/runs?instruction=daily&page=3")
    assert run_ids_of(last.text) == daily[4:]
    assert 'rel="prev" href="/runs?instruction=daily&amp;page=2"' in last.text
    assert 'rel="next"' not in last.text
    kept = client.get(f"/runs?since={cut.isoformat()}")
    assert f"since={cut.isoformat()}&amp;page=2" in kept.text
    assert client.get("/runs?page=9").text.count("<tr data-id=") == 0


def test_an_attempts_prompt_and_response_are_text_in_collapsed_details(store: Store) -> None:
    """The stored request's ``system`` and ``user`` and the raw output are hostile text:
    escaped in the run view, each attempt's exchange in a closed ``<details>``."""
    run_id = seed(
        store,
        at=datetime.now(UTC),
        status=RunStatus.FAILED,
        instruction_id="hostile",
        trigger=Trigger.MANUAL,
        request={"system": f"sys {SCRIPT}", "user": f"usr {IMG}\nsecond line"},
        raw=f"out {SCRIPT}{IMG}",
    )

    html = client_of(store).get(f"/runs/{run_id}").text

    exchange = re.search(
        r'<details class="exchange" id="exchange-1">(.*?)</details>', html, re.DOTALL
    )
    assert exchange is not None  # no "open": collapsed until clicked
    shown = exchange.group(1)
    assert "sys &lt;script&gt;alert(1)&lt;/script&gt;</pre>" in shown
    assert "usr &#34;&gt;&lt;img src=x onerror=alert(1)&gt;\nsecond line</pre>" in shown
    assert "out &lt;script&gt;alert(1)&lt;/script&gt;&#34;&gt;&lt;img" in shown
    assert SCRIPT not in html
    assert IMG not in html
