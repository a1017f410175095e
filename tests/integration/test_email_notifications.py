"""Email notifications against a real local SMTP server (aiosmtpd): STARTTLS with a
certificate of the test's own authority, a password read from the environment, and a
server that offers no STARTTLS refused before anything is sent."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from salvagelane.connectors import ReplayConnector
from salvagelane.definitions import Instruction, load_instruction
from salvagelane.events import logged_stream
from salvagelane.runtime.executor import Executor
from salvagelane.runtime.notifications import Notifier, notifications_of
from salvagelane.store import Store
from salvagelane.vocabulary import Trigger
from tests.integration.test_notifications import FIRST_FIRE
from tests.support.cli import FIXTURE
from tests.support.run_setup import Project, store

__all__ = ["store"]

PASSWORD = "smtp-test-password-1234"


@dataclass
class Mailbox:
    messages: list[Any] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(
            (envelope.rcpt_tos, message_from_bytes(envelope.content, policy=policy.default))
        )
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


def _server(authority: trustme.CA, mailbox: Mailbox, *, starttls: bool) -> Controller:
    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, auth: Any) -> Any:
        ok = isinstance(auth, LoginPassword) and auth.password == PASSWORD.encode()
        if ok:
            mailbox.logins.append(auth.login.decode())
        return AuthResult(success=ok)

    context = None
    if starttls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        authority.issue_cert("127.0.0.1").configure_cert(context)
    return Controller(
        mailbox,
        hostname="127.0.0.1",
        port=_free_port(),
        tls_context=context,
        require_starttls=starttls,
        authenticator=authenticate,
        auth_require_tls=starttls,
    )


@pytest.fixture
def trusted(authority: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client trusts the test's authority (as a host's trust store would)."""
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setenv("SMTP_USER", "alerts")
    monkeypatch.setenv("SMTP_PASSWORD", PASSWORD)


def emailing(tmp_path: Path, port: int, *, starttls: bool = True) -> Instruction:
    project = Project.create(tmp_path / "project")
    notify = (
        "notify:\n  - on: [partial]\n    email:\n      to: [ops@example.test]\n"
        "      from: salvagelane@example.test\n      smtp_host: 127.0.0.1\n"
        f"      smtp_port: {port}\n      starttls: {'true' if starttls else 'false'}\n"
        "      username_env: SMTP_USER\n      password_env: SMTP_PASSWORD\n"
    )
    return load_instruction(project.edit({}, append=notify))


def run_notifying(store: Store, instruction: Instruction) -> str:
    with httpx.Client() as client:
        events = logged_stream()
        Notifier(
            store,
            definitions=lambda: {instruction.id: instruction},
            notifications_for=lambda i: notifications_of(i, client),
        ).subscribe(events)
        executor = Executor(store, connector_for=lambda i: ReplayConnector(FIXTURE), events=events)
        return executor.run(instruction, trigger=Trigger.SCHEDULE, scheduled_for=FIRST_FIRE).run_id


@pytest.fixture
def mailbox() -> Mailbox:
    return Mailbox()


@pytest.fixture
def tls_server(authority: trustme.CA, mailbox: Mailbox) -> Iterator[Controller]:
    server = _server(authority, mailbox, starttls=True)
    server.start()
    yield server
    server.stop()


@pytest.mark.usefixtures("trusted")
def test_a_partial_run_is_emailed_over_starttls_with_the_password(
    store: Store, tmp_path: Path, tls_server: Controller, mailbox: Mailbox
) -> None:
    run_id = run_notifying(store, emailing(tmp_path, tls_server.port))
    ((recipients, message),) = mailbox.messages
    assert recipients == ["ops@example.test"]
    assert mailbox.logins == ["alerts"]
    assert message["From"] == "salvagelane@example.test"
    assert message["Subject"] == (
        f"daily-triage: run {run_id[:8]} (fire 2026-11-20T05:20:00Z) ended partial: "
        "kept 7 of 8 items, 1 quarantined"
    )
    assert "item 8 of the output: truncated" in message.get_content()
    (delivery,) = store.get_run(run_id).deliveries
    assert (delivery.kind, delivery.status) == ("notify-email", "delivered")
    assert PASSWORD not in (delivery.error or "")


@pytest.mark.usefixtures("trusted")
def test_a_server_without_starttls_is_refused_and_nothing_is_sent(
    store: Store, tmp_path: Path, authority: trustme.CA, mailbox: Mailbox
) -> None:
    plain = _server(authority, mailbox, starttls=False)
    plain.start()
    try:
        run_id = run_notifying(store, emailing(tmp_path, plain.port))
    finally:
        plain.stop()
    assert mailbox.messages == []
    (delivery,) = store.get_run(run_id).deliveries
    assert delivery.status == "failed"
    assert delivery.error is not None
    assert "does not offer STARTTLS" in delivery.error
