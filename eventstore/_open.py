"""Open a store from a URL: the one place that maps a store URL to a backend."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, unquote_plus, urlsplit, urlunsplit

from ._protocol import EventStore
from ._sqlite import SqliteEventStore

__all__ = ["heads_path_beside", "open_store"]


def open_store(
    url: str | os.PathLike[str],
    *,
    heads_file: str | os.PathLike[str] | None = None,
    create: bool = True,
) -> EventStore:
    """The (unopened) store that ``url`` names; use it with ``async with``.

    ``heads_file`` is the path of the store's heads file (:class:`HeadsFile`), where the runs'
    owners record each run's head when it pauses or ends and ``verify`` looks for them;
    None keeps none (:func:`heads_path_beside` names the usual one). ``create=False`` makes
    opening it create nothing: no SQLite file (or an empty one), or a PostgreSQL schema
    without its tables, raises StoreMissingError (a store of an older layout is still
    upgraded).

    - ``postgresql://user@host:port/dbname`` (or ``postgres://``): a
      :class:`PostgresEventStore`; a ``schema=NAME`` query parameter picks the schema that
      holds its tables (``magistrate`` by default), the other parameters go to libpq.
    - ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (as SQLAlchemy
      spells them): a :class:`SqliteEventStore`.
    - anything else is the path of a SQLite file.

    Raises ValueError for a URL of another scheme (``mysql://...``), a bad schema name or
    more than one.
    """
    text = os.fspath(url)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("postgresql", "postgres"):
        from ._postgres import PostgresEventStore  # psycopg is loaded only here

        parts = urlsplit(text)
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = [value for key, value in query if key == "schema"]
        if len(schema) > 1:  # which one was meant is not for the store to guess
            raise ValueError(f"a store URL names one schema, got {len(schema)}: {text!r}")
        # The other parameters go to libpq as written: it decodes %-escapes, not "+".
        rest = [
            item
            for item in parts.query.split("&")
            if item and unquote_plus(item).split("=")[0] != "schema"
        ]
        plain = urlunsplit(parts._replace(query="&".join(rest)))
        if schema:
            return PostgresEventStore(
                plain, schema=schema[-1], heads_file=heads_file, create=create
            )
        return PostgresEventStore(plain, heads_file=heads_file, create=create)
    if scheme == "sqlite":
        path = text[len("sqlite:///") :] if text.lower().startswith("sqlite:///") else ""
        if not path:
            raise ValueError(f"a SQLite store URL is sqlite:///path.db, got {text!r}")
        return SqliteEventStore(path, heads_file=heads_file, create=create)
    if scheme:
        raise ValueError(
            f"unknown store URL scheme {scheme!r} in {text!r}: use a file path, "
            "sqlite:///path.db or postgresql://..."
        )
    return SqliteEventStore(text, heads_file=heads_file, create=create)


def _sqlite_path(url: str | os.PathLike[str]) -> str | None:
    """The SQLite file ``url`` names (as :func:`open_store` reads it), or None for a URL
    of another backend."""
    text = os.fspath(url)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if not scheme:
        return text
    if scheme == "sqlite" and text.lower().startswith("sqlite:///"):
        return text[len("sqlite:///") :] or None
    return None


def heads_path_beside(url: str | os.PathLike[str]) -> str | None:
    """The heads file beside the SQLite store ``url`` names (its path plus ``.heads``), or
    None for a store that is not a file (a PostgreSQL store's heads file is named
    explicitly). A path through a symbolic link (the file's, or a directory's on the way)
    names the heads file beside the file it resolves to, as SQLite resolves it, so every
    path to one store names one heads file; a path through none is kept as it is given.
    Reads the file system (blocking), but needs no file to exist."""
    path = _sqlite_path(url)
    if path is None:
        return None
    real = os.path.realpath(path)
    return (path if real == os.path.abspath(path) else real) + ".heads"
