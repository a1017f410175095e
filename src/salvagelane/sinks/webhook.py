"""A sink POSTing the report as JSON to a webhook URL.

Retries, the overall deadline and the capped read of an error body are the connectors'
(:mod:`salvagelane._http`): connection errors, timeouts, 408, 409, 429 and 5xx
are retried with backoff (honouring ``retry-after``), other answers are not. The bearer
token is read through ``key_lookup`` at delivery time from the variable named by
``token_env``, sent only in the ``Authorization`` header, and scrubbed from every message.

The URL is ``url``, or the one held by the variable ``url_env``, read at delivery time
(a chat webhook's URL is its own secret). The sink's :attr:`~WebhookSink.target`, under
which its deliveries are recorded and shown, is the URL without userinfo and query
string, or ``$NAME`` for a URL from the environment: never a credential.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import httpx

from salvagelane import environment
from salvagelane._http import (
    ERROR_BODY_BYTES,
    Deadline,
    HttpCaller,
    HttpSettings,
    http_error,
    read_capped,
)
from salvagelane.errors import ConnectorError, ProviderError, SinkError
from salvagelane.logs import redact_url, register_secret, register_url

WEBHOOK_SETTINGS = HttpSettings(timeout_seconds=30.0, deadline_seconds=120.0)
"""A webhook answers fast or not at all: shorter waits than a model call's. Its body is
read only to quote an error, at most :data:`~salvagelane._http.ERROR_BODY_BYTES`."""


def _webhook_url_from(name: str) -> str:
    return environment.url(name, "the webhook's URL")


class WebhookSink:
    """Delivers a payload with one JSON POST to ``url`` or to the URL held by the
    variable ``url_env`` (exactly one of them); any 2xx answer is success.

    ``settings`` bound the delivery (default :data:`WEBHOOK_SETTINGS`); ``key_lookup``
    reads the token (default :func:`salvagelane.environment.api_key`), ``url_lookup`` the
    URL named by ``url_env``; ``clock`` and ``sleep`` default to real time (tests inject
    fakes)."""

    kind: ClassVar[str] = "webhook"

    def __init__(
        self,
        client: httpx.Client,
        *,
        url: str | None = None,
        url_env: str | None = None,
        token_env: str | None = None,
        settings: HttpSettings = WEBHOOK_SETTINGS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        key_lookup: Callable[[str], str] = environment.api_key,
        url_lookup: Callable[[str], str] = _webhook_url_from,
    ) -> None:
        if (url is None) == (url_env is None):
            raise SinkError(
                "webhook: expected exactly one of url and url_env",
                target=f"${url_env}" if url is None else redact_url(url),
            )
        self._url = url
        self.url_env = url_env
        if url is not None:
            register_url(url)
        problem = settings.problem()
        if problem is not None:
            raise SinkError(f"webhook {self.target}: {problem}", target=self.target)
        self.token_env = token_env
        self._http = HttpCaller(client, settings, clock=clock, sleep=sleep)
        self._body_cap = settings.max_response_bytes or ERROR_BODY_BYTES
        self._key_lookup = key_lookup
        self._url_lookup = url_lookup

    def __repr__(self) -> str:
        return f"WebhookSink(target={self.target!r}, token_env={self.token_env!r})"

    @property
    def target(self) -> str:
        if self._url is None:
            return f"${self.url_env}"
        return redact_url(self._url)

    def deliver(self, payload: Mapping[str, Any]) -> None:
        target = self.target
        try:
            token = self._key_lookup(self.token_env) if self.token_env else None
            url = self._url if self._url is not None else self._url_lookup(str(self.url_env))
        except ConnectorError as exc:
            # The lookup names the variable, never its value.
            raise SinkError(f"webhook {target}: {exc}", target=target) from exc
        if token is not None:
            register_secret(token)
        try:
            body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SinkError(
                f"webhook {target}: expected a JSON-ready payload, got {type(exc).__name__}: {exc}",
                target=target,
            ) from exc
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"

        def attempt(deadline: Deadline) -> None:
            self._http.post(
                url,
                body=body,
                headers=headers,
                deadline=deadline,
                handle=lambda response: self._check(response, deadline, token),
                secret=token,
                shown=target,
            )

        try:
            self._http.run(target, attempt)
        except ProviderError as exc:
            # Its message is already scrubbed of the token.
            raise SinkError(
                f"webhook delivery failed: {exc}", target=target, retryable=exc.retryable
            ) from exc

    def _check(self, response: httpx.Response, deadline: Deadline, token: str | None) -> None:
        if response.is_success:
            return
        try:
            raw = read_capped(response, deadline, self.target, cap=self._body_cap)
        except ProviderError as exc:
            # Too big or too slow to quote; the status still says what went wrong.
            raw = f"(body not quoted: {exc})".encode()
        raise http_error(self.target, response, raw, token)
