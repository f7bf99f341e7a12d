"""A PostgreSQL store's address in messages: where it is, and why a connection failed,
without the connection string's password."""

from __future__ import annotations

import psycopg

__all__ = ["address", "connect_failure"]


def address(url: str, schema: str) -> str:
    """The database and schema of ``url`` (a libpq connection string or URL), for messages;
    no password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return f"PostgreSQL schema {schema}"
    host = info.get("host", "localhost")
    return f"postgresql://{host}:{info.get('port', 5432)}/{info.get('dbname', '')} schema {schema}"


def connect_failure(url: str, error: psycopg.Error) -> str:
    """libpq's reason for a failed connection to ``url`` as one line, without its password."""
    reason = " ".join(str(error).split())
    try:
        password = psycopg.conninfo.conninfo_to_dict(url).get("password")
    except psycopg.ProgrammingError:
        password = None
    if password:
        reason = reason.replace(str(password), "***")
    return reason
