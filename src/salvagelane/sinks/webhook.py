"""A sink POSTing the report as JSON to a webhook URL.

Retries, the overall deadline and the capped read of an error body are the connectors'
(:mod:`salvagelane.connectors.http`): connection errors, timeouts, 408, 409, 429 and 5xx
are retried with backoff (honouring ``retry-after``), other answers are not. The bearer
token is read through ``key_lookup`` at delivery time from the variable named by
``token_env``, sent only in the ``Authorization`` header, and scrubbed from every message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import httpx

from salvagelane import environment
from salvagelane.connectors.http import Deadline, HttpCaller, HttpSettings, http_error
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
        timeout_seconds: float = 30.0,
        deadline_seconds: float = 120.0,
        max_attempts: int = 5,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
        key_lookup: Callable[[str], str] = environment.api_key,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        settings = HttpSettings(
            timeout_seconds=timeout_seconds,
            deadline_seconds=deadline_seconds,
            max_response_bytes=_ERROR_BODY_BYTES,
            max_attempts=max_attempts,
            backoff_seconds=backoff_seconds,
            max_backoff_seconds=max_backoff_seconds,
        )
        problem = settings.problem()
        if problem is not None:
            raise SinkError(f"webhook {url}: {problem}", target=url)
        self._url = url
        self.token_env = token_env
        self._http = HttpCaller(client, settings, clock=clock, sleep=sleep)
        self._key_lookup = key_lookup

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
