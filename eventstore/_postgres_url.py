"""A PostgreSQL store's address in messages: where it is, and why a connection failed,
without the connection string's password."""

from __future__ import annotations

import re
from urllib.parse import unquote

import psycopg

__all__ = ["address", "connect_failure"]

# A password given as a query parameter, as written.
_PASSWORD_PARAMETER = re.compile(r"[?&]password=([^&#]*)")


def _read(url: str) -> dict[str, str] | None:
    """libpq's reading of ``url``, or None when it cannot read it."""
    try:
        return {key: str(value) for key, value in psycopg.conninfo.conninfo_to_dict(url).items()}
    except psycopg.ProgrammingError:
        return None


def _written_password(url: str) -> str | None:
    """The password of a ``scheme://user:password@host...`` URL as written: everything
    between the user name and the last ``@`` before the query (None for none, or empty)."""
    _, scheme, rest = url.partition("://")
    userinfo, at, _ = rest.split("?", 1)[0].rpartition("@")
    _, colon, password = userinfo.partition(":")
    return password if scheme and at and colon and password else None


def _misread(url: str, info: dict[str, str] | None) -> bool:
    """Whether libpq reads ``url``'s password otherwise than it is written, or cannot read
    the URL while it has one: an ``@``, ``/`` or ``%`` in it not percent-encoded, which
    makes libpq take part of it for the host, port or database (or refuse it quoted)."""
    written = _written_password(url)
    if written is None:
        return False
    return info is None or info.get("password") != unquote(written)


def address(url: str, schema: str) -> str:
    """The database and schema of ``url`` (a libpq connection string or URL), for messages;
    no password (nor a host, port or database read from one)."""
    info = _read(url)
    if info is None or _misread(url, info):
        return f"PostgreSQL schema {schema}"
    host = info.get("host", "localhost")
    return f"postgresql://{host}:{info.get('port', 5432)}/{info.get('dbname', '')} schema {schema}"


def connect_failure(url: str, error: psycopg.Error) -> str:
    """libpq's reason for a failed connection to ``url`` as one line, without its password."""
    info = _read(url)
    if _misread(url, info):
        return (
            "the store URL's password is not read as written: percent-encode it "
            "(an '@' in it is %40, a '/' %2F, a '%' %25)"
        )
    reason = " ".join(str(error).split())
    secrets = [match.group(1) for match in _PASSWORD_PARAMETER.finditer(url)]
    secrets += [(info or {}).get("password") or "", _written_password(url) or ""]
    for secret in sorted(
        {s for s in secrets if s} | {unquote(s) for s in secrets if s}, key=len, reverse=True
    ):
        reason = reason.replace(secret, "***")
    return reason
