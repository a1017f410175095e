"""Email: a notification sent as a plain-text message over SMTP.

STARTTLS unless the definition says ``starttls: false`` (a relay on the same host); a
server that does not offer it is refused rather than spoken to in the clear. The user
name and password are read from the variables the definition names when sending, and
never shown. Every failure is a :class:`~salvagelane.errors.SinkError` naming the server,
so the outbox records it and tries again.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from typing import Any, ClassVar

from salvagelane import environment
from salvagelane.definitions.model import EmailSpec
from salvagelane.errors import ConfigurationError, SinkError

SUBJECT_CHARS = 160


class EmailSink:
    """Sends ``payload["text"]`` (its first line is the subject) to ``spec.to``."""

    kind: ClassVar[str] = "email"

    def __init__(self, spec: EmailSpec, *, tls: ssl.SSLContext | None = None) -> None:
        self._spec = spec
        # Tests hand a context that trusts their own certificate authority.
        self._tls = tls

    @property
    def target(self) -> str:
        return self._spec.target

    def deliver(self, payload: Mapping[str, Any]) -> None:
        spec = self._spec
        message = message_of(payload, sender=spec.sender, to=spec.to)
        try:
            credentials = self._credentials()
            with smtplib.SMTP(spec.smtp_host, spec.smtp_port, timeout=spec.timeout_seconds) as smtp:
                smtp.ehlo()
                if spec.starttls:
                    if not smtp.has_extn("starttls"):
                        raise SinkError(
                            f"{self.target}: the server does not offer STARTTLS (expected it "
                            "unless the notification says starttls: false); nothing was sent",
                            target=self.target,
                        )
                    smtp.starttls(context=self._tls or ssl.create_default_context())
                    smtp.ehlo()
                if credentials is not None:
                    smtp.login(*credentials)
                smtp.send_message(message)
        except SinkError:
            raise
        except ConfigurationError as exc:
            raise SinkError(f"{self.target}: {exc}", target=self.target) from exc
        except (TimeoutError, smtplib.SMTPException, OSError, ssl.SSLError) as exc:
            raise SinkError(
                f"{self.target}: sending failed: {type(exc).__name__}: {exc}",
                target=self.target,
                retryable=True,
            ) from exc

    def _credentials(self) -> tuple[str, str] | None:
        spec = self._spec
        if spec.password_env is None:
            return None
        password = environment.secret(spec.password_env, "the SMTP password")
        user = (
            environment.secret(spec.username_env, "the SMTP user name")
            if spec.username_env is not None
            else spec.sender
        )
        return user, password


def message_of(payload: Mapping[str, Any], *, sender: str, to: tuple[str, ...]) -> EmailMessage:
    """The email of a notification: its text's first line as the subject, the whole text
    as the body."""
    text = str(payload.get("text") or "")
    subject = (text.splitlines() or ["salvagelane notification"])[0]
    message = EmailMessage()
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["Subject"] = subject[:SUBJECT_CHARS]
    message.set_content(text + "\n")
    return message
