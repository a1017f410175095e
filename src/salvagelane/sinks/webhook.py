"""A sink POSTing the report as JSON to a webhook URL.

Retries, the overall deadline and the capped read of an error body are the connectors'
(:mod:`salvagelane.connectors.http`): connection errors, timeouts, 408, 409, 429 and 5xx
are retried with backoff (honouring ``retry-after``), other answers are not. The bearer
token is read through ``key_lookup`` at delivery time from the variable named by
``token_env``, sent only in the ``Authorization`` header, and scrubbed from every message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, Unpack

import httpx

from salvagelane import environment
from salvagelane.connectors.http import (
    CallOptions,
    Deadline,
    HttpCaller,
    HttpSettings,
    http_error,
    reject_unknown,
)
from salvagelane.errors import ConnectorError, ProviderError, SinkError

# An error body is read only to quote it: a small cap is plenty.
_ERROR_BODY_BYTES = 64 * 1024


class WebhookSink:
    """Delivers a payload with one JSON POST to ``url`` (any 2xx answer is success)."""

    kind: ClassVar[str] = "webhook"

    def __init__(
        self,
        client: httpx.Client,
        *,
        url: str,
        token_env: str | None = None,
        **options: Unpack[CallOptions],
    ) -> None:
        reject_unknown(type(self).__name__, options, CallOptions.__optional_keys__)
        # A webhook answers fast or not at all: shorter waits than a model call's.
        settings = HttpSettings.of(
            options,
            timeout_seconds=30.0,
            deadline_seconds=120.0,
            max_response_bytes=_ERROR_BODY_BYTES,
        )
        problem = settings.problem()
        if problem is not None:
            raise SinkError(f"webhook {url}: {problem}", target=url)
        self._url = url
        self.token_env = token_env
        self._http = HttpCaller.of(client, settings, options)
        self._key_lookup = options.get("key_lookup", environment.api_key)

    def __repr__(self) -> str:
        return f"WebhookSink(url={self._url!r}, token_env={self.token_env!r})"

    @property
    def target(self) -> str:
        return self._url

    def deliver(self, payload: Mapping[str, Any]) -> None:
        try:
            token = self._key_lookup(self.token_env) if self.token_env else None
        except ConnectorError as exc:
            # The lookup names the variable, never its value.
            raise SinkError(f"webhook {self._url}: {exc}", target=self._url) from exc
        try:
            body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SinkError(
                f"webhook {self._url}: expected a JSON-ready payload, got "
                f"{type(exc).__name__}: {exc}",
                target=self._url,
            ) from exc
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"

        def attempt(deadline: Deadline) -> None:
            self._http.post(
                self._url,
                body=body,
                headers=headers,
                deadline=deadline,
                handle=lambda response: self._check(response, deadline, token),
                secret=token,
            )

        try:
            self._http.run(self._url, attempt)
        except ProviderError as exc:
            # Its message is already scrubbed of the token.
            raise SinkError(
                f"webhook delivery failed: {exc}", target=self._url, retryable=exc.retryable
            ) from exc

    def _check(self, response: httpx.Response, deadline: Deadline, token: str | None) -> None:
        if response.is_success:
            return
        try:
            raw = self._http.read_capped(response, deadline, self._url)
        except ProviderError as exc:
            # Too big or too slow to quote; the status still says what went wrong.
            raw = f"(body not quoted: {exc})".encode()
        raise http_error(self._url, response, raw, token)
