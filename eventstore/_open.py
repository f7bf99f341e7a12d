"""Open a store from a URL: the one place that maps a store URL to a backend."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ._protocol import EventStore
from ._sqlite import SqliteEventStore

__all__ = ["open_store"]


def open_store(url: str | os.PathLike[str]) -> EventStore:
    """The (unopened) store that ``url`` names; use it with ``async with``.

    - ``postgresql://user@host:port/dbname`` (or ``postgres://``): a
      :class:`PostgresEventStore`; a ``schema=NAME`` query parameter picks the schema that
      holds its tables (``magistrate`` by default), the other parameters go to libpq.
    - ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (as SQLAlchemy
      spells them): a :class:`SqliteEventStore`.
    - anything else is the path of a SQLite file.

    Raises ValueError for a URL of another scheme (``mysql://...``) or a bad schema name.
    """
    text = os.fspath(url)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("postgresql", "postgres"):
        from ._postgres import PostgresEventStore  # psycopg is loaded only here

        parts = urlsplit(text)
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = [value for key, value in query if key == "schema"]
        rest = urlencode([(key, value) for key, value in query if key != "schema"])
        plain = urlunsplit(parts._replace(query=rest))
        if schema:
            return PostgresEventStore(plain, schema=schema[-1])
        return PostgresEventStore(plain)
    if scheme == "sqlite":
        path = text[len("sqlite:///") :] if text.lower().startswith("sqlite:///") else ""
        if not path:
            raise ValueError(f"a SQLite store URL is sqlite:///path.db, got {text!r}")
        return SqliteEventStore(path)
    if scheme:
        raise ValueError(
            f"unknown store URL scheme {scheme!r} in {text!r}: use a file path, "
            "sqlite:///path.db or postgresql://..."
        )
    return SqliteEventStore(text)
