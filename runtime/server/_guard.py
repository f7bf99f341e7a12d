"""Who may ask what: the Host check, the bearer token, and the security headers of answers.

:class:`Guard` wraps the app as plain ASGI middleware (event streams pass through it
unbuffered). A request is answered in this order:

- its ``Host`` header must name one of the allowed hosts (400 otherwise), when a list is
  given: a web page that rebinds its own DNS name to the server's address is refused;
- a request that changes something (any method but GET, HEAD and OPTIONS) needs
  ``Authorization: Bearer <token>`` (401 otherwise); so does every read when reads are
  guarded, except the dashboard's shell and static files, which hold no run data and let
  a browser ask for the token;
- every answer carries a Content-Security-Policy that lets the page load only the
  dashboard's own scripts and styles, ``X-Frame-Options: DENY`` and
  ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

import msgspec
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["LOOPBACK_HOSTS", "Guard", "host_name"]

#: The bind addresses that count as loopback; any other address is exposed.
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")

_READS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Paths (below the app's mount point) that hold no run data: the dashboard's shell.
_OPEN_PREFIXES = ("/static/",)
_OPEN_PATHS = frozenset({"/", "/approvals"})
_SHELL_PREFIX = "/runs/"

_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def host_name(value: str) -> str:
    """The host of a ``Host`` header or a bind address, without port or IPv6 brackets,
    lower-cased: ``[::1]:8765`` -> ``::1``, ``Example.org:80`` -> ``example.org``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        return value.partition(":")[0]
    return value  # a bare host, or a bare IPv6 address (a bind address)


class Guard:
    """``app`` behind the Host check and the token, with security headers on every answer.

    ``token`` is what ``Authorization: Bearer`` must carry (the scheme's case is free, as
    RFC 9110 says); ``guard_reads`` asks it of reads too; ``allowed_hosts`` (names or
    addresses, without port) are the hosts a request may name, or None for any.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        guard_reads: bool,
        allowed_hosts: Iterable[str] | None,
    ) -> None:
        self.app = app
        self.token = token.encode()
        self.guard_reads = guard_reads
        self.allowed = None if allowed_hosts is None else {host_name(h) for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        headers = dict(scope.get("headers", []))
        if self.allowed is not None:
            host = headers.get(b"host", b"").decode("latin-1")
            if host_name(host) not in self.allowed:
                detail = "the Host header names no host this server answers for"
                await _refuse(secured, 400, "bad_host", detail, [])
                return
        if self._needs_token(scope) and not self._authorized(headers.get(b"authorization")):
            detail = "a valid bearer token is required"
            await _refuse(secured, 401, "unauthorized", detail, [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, secured)

    def _needs_token(self, scope: Scope) -> bool:
        if scope["method"] not in _READS:
            return True
        if not self.guard_reads:
            return False
        root = str(scope.get("root_path", ""))
        path = str(scope["path"])
        if root and path.startswith(root):
            path = path[len(root) :]
        open_page = path in _OPEN_PATHS or path.startswith(_OPEN_PREFIXES)
        run_page = path.startswith(_SHELL_PREFIX) and "/" not in path[len(_SHELL_PREFIX) :]
        return not (open_page or run_page)

    def _authorized(self, value: bytes | None) -> bool:
        if value is None:
            return False
        scheme, _, credentials = value.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return hmac.compare_digest(credentials.strip(), self.token)


async def _refuse(
    send: Send, status: int, error: str, detail: str, extra: list[tuple[bytes, bytes]]
) -> None:
    body = msgspec.json.encode({"error": error, "detail": detail})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
