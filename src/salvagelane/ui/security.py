"""Who may read and who may change: the access token, CSRF, the Host check and the
headers every response carries (docs/adr/0012-review-page.md).

- Every request that changes data needs the access token (a cookie set when the URL
  printed at start, ``/?token=...``, is opened) *and* the CSRF token of the page it was
  sent from (a form field: an HMAC of the access token, so another site cannot forge it).
- With named reviewers (``--reviewers FILE``, :mod:`salvagelane.ui.reviewers`) each
  reviewer signs in with their own token, and their name is the actor of every change
  they make; their CSRF token is an HMAC of their token's digest.
- Read-only pages need the token too, unless the server is bound to a loopback address.
- On a loopback address only loopback ``Host`` headers are answered, so a web page
  elsewhere cannot reach the server through DNS rebinding.
- Every response carries a strict Content-Security-Policy: scripts, styles and images
  from the server itself only, no inline script or style, no frames, forms post back here.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from salvagelane.ui.reviewers import Reviewer, token_digest

COOKIE = "salvagelane_ui"
CSRF_FIELD = "csrf"
TOKEN_PARAMETER = "token"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True, slots=True)
class Signed:
    """Who a request signed in as: ``reviewer`` (a named reviewer's name, the actor of
    every change they make) or None for the server's one shared token; ``csrf``: the
    CSRF token of the forms rendered for them."""

    reviewer: str | None
    csrf: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Access:
    """The server's access rules: its token, or the named reviewers and their tokens'
    digests (``--reviewers``: then only their tokens sign in), and whether it listens on
    loopback only."""

    token: str = ""
    loopback: bool
    reviewers: tuple[Reviewer, ...] = ()

    def csrf(self) -> str:
        """The CSRF token forms carry: derived from the access token, never equal to it."""
        return _csrf_of(self.token.encode())

    def signed(self, request: Request) -> Signed | None:
        """Who ``request`` signed in as (cookie or ``Authorization: Bearer``), or None."""
        return self.signed_with(request.cookies.get(COOKIE) or _bearer(request) or "")

    def signed_with(self, given: str) -> Signed | None:
        """Who the token ``given`` signs in, or None. With reviewers every digest is
        compared, in constant time, whichever matches."""
        if not given:
            return None
        if not self.reviewers:
            if self.token and hmac.compare_digest(given.encode(), self.token.encode()):
                return Signed(reviewer=None, csrf=self.csrf())
            return None
        digest = token_digest(given)
        found: Reviewer | None = None
        for reviewer in self.reviewers:
            if hmac.compare_digest(digest, reviewer.digest):
                found = reviewer
        if found is None:
            return None
        return Signed(reviewer=found.name, csrf=_csrf_of(found.digest))

    def holds_token(self, request: Request) -> bool:
        """Whether ``request`` carries a token that signs in."""
        return self.signed(request) is not None

    def may_read(self, request: Request) -> bool:
        return self.loopback or self.holds_token(request)

    def may_change(self, request: Request, form_csrf: str | None) -> bool:
        """A token, and the CSRF token of a page this server rendered for its holder."""
        signed = self.signed(request)
        if signed is None:
            return False
        return form_csrf is not None and hmac.compare_digest(
            form_csrf.encode(), signed.csrf.encode()
        )

    def host_allowed(self, host_header: str | None) -> bool:
        """On loopback, only loopback names in ``Host`` (DNS rebinding)."""
        if not self.loopback:
            return True
        if not host_header:
            return False
        host = host_header.rsplit(":", 1)[0] if not host_header.endswith("]") else host_header
        if host.startswith("[") and "]" in host:
            host = host[1 : host.index("]")]
        return is_loopback(host)


def _csrf_of(key: bytes) -> str:
    return hmac.new(key, b"salvagelane-ui-csrf", hashlib.sha256).hexdigest()


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


class SecurityHeaders:
    """ASGI middleware: :data:`HEADERS` on every HTTP response, static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [
                    (name.encode(), value.encode())
                    for name, value in HEADERS.items()
                    if name.encode() not in present
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)
