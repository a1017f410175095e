"""Named reviewers and the review flow over HTTP (Starlette's test client, in process),
on SQLite and PostgreSQL: each reviewer's token signs in as them and only them, their
name is the actor of every audit row, the next pending item after a review; and the
reviewers file as ``salvagelane ui`` reads it (issue 33)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from salvagelane.errors import ConfigurationError
from salvagelane.store import Store
from salvagelane.ui.app import Settings, create_app
from salvagelane.ui.reviewers import load_reviewers, parse_reviewers
from salvagelane.ui.security import Access
from tests.support.cli import ROOT
from tests.support.review_page import TOKEN, Reviewed, csrf_of, reviewed_database

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"


@pytest.fixture
def reviewed(database_url: str, tmp_path: Path) -> Reviewed:
    return reviewed_database(database_url, tmp_path)


@pytest.fixture
def store(reviewed: Reviewed) -> Iterator[Store]:
    with Store.open(reviewed.url) as opened:
        yield opened


def client_of(store: Store, access: Access) -> TestClient:
    settings = Settings(
        store=store, access=access, instructions_dir=ROOT / "instructions", actor="login-name"
    )
    return TestClient(create_app(settings), base_url="http://127.0.0.1:8765")


def team(store: Store) -> Access:
    reviewers = parse_reviewers(f"alice:{ALICE}\nbob:{BOB}\n", source="reviewers.txt")
    return Access(loopback=True, reviewers=reviewers)


def signed_in(store: Store, token: str, access: Access) -> TestClient:
    client = client_of(store, access)
    answer = client.get(f"/?token={token}", follow_redirects=False)
    assert answer.status_code == 303, answer.text
    return client


def actors(store: Store, item: int) -> list[tuple[str, str]]:
    return [(r.action, r.actor) for r in store.quarantine.get_quarantine(item).reviews]


def test_each_reviewers_token_makes_them_the_actor(reviewed: Reviewed, store: Store) -> None:
    access = team(store)
    alice, bob = signed_in(store, ALICE, access), signed_in(store, BOB, access)
    hostile, schema = reviewed.hostile_item, reviewed.schema_item
    alices = csrf_of(alice.get(f"/items/{hostile}").text)
    bobs = csrf_of(bob.get(f"/items/{schema}").text)
    assert alices != bobs
    assert client_of(store, access).get(f"/?token={TOKEN}").status_code == 403

    # Bob's cookie with Alice's form is refused: a CSRF token is its reviewer's.
    crossed = bob.post(f"/items/{hostile}/reject", data={"note": "x", "csrf": alices})
    assert crossed.status_code == 403
    assert actors(store, hostile) == []

    # A name in the form is not used: the token says who acts.
    rejected = alice.post(
        f"/items/{hostile}/reject",
        data={"note": "spam", "csrf": alices, "by": "mallory"},
        follow_redirects=False,
    )
    assert rejected.status_code == 303
    refused = bob.post(
        f"/items/{schema}/approve",
        data={"corrected": '{"rank": 2}', "csrf": bobs, "by": "mallory"},
    )
    assert refused.status_code == 422
    bearer = client_of(store, access)
    bearer.headers["authorization"] = f"Bearer {BOB}"
    approved = bearer.post(
        f"/items/{schema}/approve",
        data={"corrected": _fixed(reviewed), "csrf": bobs},
        follow_redirects=False,
    )
    assert approved.status_code == 303
    assert actors(store, hostile) == [("reject", "alice")]
    assert actors(store, schema) == [("approve_refused", "bob"), ("approve", "bob")]
    assert store.quarantine.get_quarantine(schema).reviewed_by == "bob"
    page = alice.get(f"/items/{schema}").text
    assert 'reviewing as <b id="signed-in-as">alice</b> (own token)' in page
    assert "<td>bob</td>" in page
    assert 'name="by"' not in alice.get("/").text


def test_after_a_review_the_next_pending_item_or_the_empty_queue(
    reviewed: Reviewed, store: Store
) -> None:
    client = signed_in(store, TOKEN, Access(token=TOKEN, loopback=True))
    csrf = csrf_of(client.get(f"/items/{reviewed.schema_item}").text)

    first = client.post(
        f"/items/{reviewed.schema_item}/reject",
        data={"note": "x", "csrf": csrf, "status": "pending"},
        follow_redirects=False,
    )
    assert first.headers["location"] == (
        f"/items/{reviewed.hostile_item}?status=pending&done=rejected&of={reviewed.schema_item}"
    )
    shown = client.get(first.headers["location"]).text
    assert f"#{reviewed.schema_item} rejected; next pending item: #{reviewed.hostile_item}" in shown
    assert 'data-left="1" data-total="2"' in shown
    # Said only while it is true: the queue does not claim to be empty otherwise.
    assert 'id="queue-empty"' not in client.get("/?done=rejected&of=1").text

    last = client.post(
        f"/items/{reviewed.hostile_item}/reject",
        data={"note": "x", "csrf": csrf, "status": "pending"},
        follow_redirects=False,
    )
    assert last.headers["location"] == f"/?status=pending&done=rejected&of={reviewed.hostile_item}"
    queue = client.get(last.headers["location"]).text
    assert '<span id="queue-empty">Queue empty' in queue


def _fixed(reviewed: Reviewed) -> str:
    return json.dumps(reviewed.fixed_item)


@pytest.mark.parametrize(
    ("mode", "content", "message"),
    [
        (0o640, f"alice:{ALICE}\n", "its group or others may read or write it (mode 0640)"),
        (0o604, f"alice:{ALICE}\n", "chmod 600"),
        (0o600, "alice:short\n", "line 1: the token of alice is not"),
        (0o600, b"alice:\xff\n", "not UTF-8 text (byte 6)"),
        (0o600, "x" * (1 << 20) + "y", "larger than 1048576 bytes"),
    ],
)
def test_a_reviewers_file_that_cannot_be_used_is_refused(
    tmp_path: Path, mode: int, content: str | bytes, message: str
) -> None:
    path = tmp_path / "reviewers.txt"
    data = content.encode() if isinstance(content, str) else content
    path.write_bytes(data)
    path.chmod(mode)

    with pytest.raises(ConfigurationError) as raised:
        load_reviewers(path)

    assert message in str(raised.value)
    assert ALICE not in str(raised.value)


def test_a_reviewers_file_is_a_regular_private_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no such file"):
        load_reviewers(tmp_path / "missing.txt")
    with pytest.raises(ConfigurationError, match="expected a regular file"):
        load_reviewers(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fifo.chmod(0o600)
    with pytest.raises(ConfigurationError, match="expected a regular file"):
        load_reviewers(fifo)
    good = tmp_path / "reviewers.txt"
    good.write_text(f"alice:{ALICE}\n", encoding="utf-8")
    good.chmod(0o600)
    assert [r.name for r in load_reviewers(good)] == ["alice"]
