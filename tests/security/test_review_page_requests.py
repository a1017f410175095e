"""Issue 29.5: the review page checks the access token before it reads a request's body,
reads a form only up to a cap, and reads no multipart. Against ``salvagelane ui`` as a
real process, over a raw socket: the client announces a huge body, sends a few bytes and
waits; the answer must come without the rest, and every refusal carries the security
headers.

Before, ``Request.form()`` read the whole body first: an unauthenticated 200 MB POST to
``/reject-all`` (any local user, or any web page through a no-cors form POST) made the
server hold it all before its 403.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from starlette.testclient import TestClient

from salvagelane.store import Store, upgrade
from salvagelane.ui.app import Settings, create_app
from salvagelane.ui.forms import FORM_BYTES
from salvagelane.ui.security import CSP, Access
from tests.support.cli import ROOT
from tests.support.review_page import TOKEN
from tests.support.ui_server import RunningUi, running_ui

ANSWER_WAIT = 30.0
"""Seconds a refusal may take to come back; a server that waits for the announced body
never answers, and the receive times out (the test fails then, it does not measure)."""
HUGE = 200_000_000
CSRF = Access(token=TOKEN, loopback=True).csrf()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningUi]:
    scratch = tmp_path_factory.mktemp("review-page")
    url = f"sqlite:///{scratch / 'runs.db'}"
    upgrade(url)
    with running_ui(url, cwd=scratch) as running:
        yield running


def exchange(server: RunningUi, head: list[str], body: bytes = b"") -> tuple[int, dict[str, str]]:
    """Send ``head`` (request line and headers) and the first bytes ``body`` of what may
    be announced as far more; the status and headers of the answer, read without
    sending another byte."""
    address = urlsplit(server.base)
    assert address.hostname is not None
    assert address.port is not None
    with socket.create_connection((address.hostname, address.port), timeout=ANSWER_WAIT) as sock:
        sock.sendall(("\r\n".join([*head, f"Host: {address.netloc}", "", ""])).encode() + body)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            assert chunk, f"the server closed the connection without an answer: {received!r}"
            received += chunk
    status_line, *lines = received.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


def form_of(**fields: str) -> bytes:
    return urlencode(fields).encode()


def test_an_unauthenticated_huge_post_is_refused_before_its_body(server: RunningUi) -> None:
    start = form_of(note="flood", confirmed="1", csrf=CSRF)
    status, headers = exchange(
        server,
        [
            "POST /reject-all HTTP/1.1",
            "Content-Type: application/x-www-form-urlencoded",
            f"Content-Length: {HUGE}",
        ],
        start,
    )

    assert status == 403
    assert headers["content-security-policy"] == CSP
    assert headers["connection"] == "close"  # the rest of the body is never read


def test_a_huge_post_with_the_token_is_413_before_its_body(server: RunningUi) -> None:
    status, headers = exchange(
        server,
        [
            "POST /reject-all HTTP/1.1",
            f"Cookie: salvagelane_ui={TOKEN}",
            "Content-Type: application/x-www-form-urlencoded",
            f"Content-Length: {HUGE}",
        ],
        form_of(note="flood", csrf=CSRF),
    )

    assert status == 413
    assert headers["content-security-policy"] == CSP
    assert headers["connection"] == "close"


def test_a_chunked_body_is_read_only_up_to_the_cap(server: RunningUi) -> None:
    """No length announced: the server reads up to the cap and refuses there, though the
    client has not said where the body ends."""
    form = form_of(csrf=CSRF, note="x" * (FORM_BYTES + 1024))
    chunk = b"%x\r\n%s\r\n" % (len(form), form)  # one chunk, and no last chunk after it
    status, headers = exchange(
        server,
        [
            "POST /reject-all HTTP/1.1",
            f"Cookie: salvagelane_ui={TOKEN}",
            "Content-Type: application/x-www-form-urlencoded",
            "Transfer-Encoding: chunked",
        ],
        chunk,
    )

    assert status == 413
    assert headers["content-security-policy"] == CSP


def test_multipart_is_refused(server: RunningUi) -> None:
    boundary = "b0und4ry"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="csrf"\r\n\r\n{CSRF}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\nnoise\r\n'
        f"--{boundary}--\r\n"
    ).encode()
    status, headers = exchange(
        server,
        [
            "POST /reject-all HTTP/1.1",
            f"Cookie: salvagelane_ui={TOKEN}",
            f"Content-Type: multipart/form-data; boundary={boundary}",
            f"Content-Length: {len(body)}",
        ],
        body,
    )

    assert status == 415
    assert headers["content-security-policy"] == CSP


def test_a_form_within_the_cap_is_still_read(server: RunningUi) -> None:
    """The refusals above are of the size and type, not of every POST."""
    body = form_of(csrf=CSRF, note="noise")
    status, headers = exchange(
        server,
        [
            "POST /reject-all HTTP/1.1",
            f"Cookie: salvagelane_ui={TOKEN}",
            "Content-Type: application/x-www-form-urlencoded; charset=utf-8",
            f"Content-Length: {len(body)}",
        ],
        body,
    )

    assert status == 200  # the confirmation page: nothing pending in this database
    assert headers["content-security-policy"] == CSP


def test_an_unexpected_error_still_carries_the_security_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug's bare 500 comes from Starlette's outermost middleware; the headers are added
    outside it."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade(url)
    with Store.open(url) as store:

        def broken() -> list[str]:
            raise RuntimeError("a bug")

        monkeypatch.setattr(store, "instruction_ids", broken)
        settings = Settings(
            store=store,
            access=Access(token=TOKEN, loopback=True),
            instructions_dir=ROOT / "instructions",
            actor="alice",
        )
        client = TestClient(
            create_app(settings),
            base_url="http://127.0.0.1:8765",
            raise_server_exceptions=False,
        )

        answer = client.get("/")

    assert answer.status_code == 500
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["x-frame-options"] == "DENY"
    assert "a bug" not in answer.text
