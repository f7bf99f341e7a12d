"""A graph id the command's store cannot keep, refused as bad input before anything is
recorded.

A run's graph id is a value of the store's run listing. SQLite keeps any text there; a
PostgreSQL store holds no NUL character in text, and its indexes hold no text longer than
2,000 bytes (UTF-8). Such a store refuses the run's first append (``Runtime.start`` and
``submit`` raise its ValueError, nothing written); the command refuses the graph before
it opens the store, exit 2, one line naming the field and the limit, creating nothing
(not even the store's schema).
"""

from __future__ import annotations

from eventstore import EventStore, SqliteEventStore

from .. import GraphSpec
from ._common import UsageError

__all__ = ["check_graph_id"]

#: The longest graph id (in UTF-8 bytes) a PostgreSQL store keeps: its listing's limit.
PG_MAX_GRAPH_ID_BYTES = 2000


def check_graph_id(graph: GraphSpec, store: EventStore, where: str) -> None:
    """UsageError naming ``where`` (the graph file) when ``store`` (opened or not) cannot
    keep ``graph``'s id; nothing is checked for a SQLite store, which keeps any."""
    if isinstance(store, SqliteEventStore):
        return
    from eventstore import PostgresEventStore  # loaded already where the store is one

    if not isinstance(store, PostgresEventStore):
        return
    value = graph.id
    if "\x00" in value:
        raise UsageError(
            f"{where}: the graph id {value!r} holds a NUL character (\\x00), which a "
            "PostgreSQL store cannot keep: remove it (nothing was recorded)"
        )
    size = len(value.encode(errors="replace"))
    if size > PG_MAX_GRAPH_ID_BYTES:
        raise UsageError(
            f"{where}: the graph id {value[:40]!r}... is {size} bytes long (UTF-8); a "
            f"PostgreSQL store keeps at most {PG_MAX_GRAPH_ID_BYTES}: shorten it "
            "(nothing was recorded)"
        )
