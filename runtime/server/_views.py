"""The runs list's filters, as the HTTP API's query takes them."""

from __future__ import annotations

import re

import msgspec

from eventstore import RunQuery

__all__ = ["RunFilter"]

#: A ``graph`` filter of this form names a graph hash; anything else, a graph id.
_GRAPH_HASH = re.compile(r"[0-9a-f]{64}")


class RunFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Filters of the runs list. ``graph`` is a graph id, or a graph hash (64 hex digits);
    ``created_after <= created < created_before`` in Unix seconds."""

    status: str | None = None
    quality: str | None = None
    graph: str | None = None
    created_after: float | None = None
    created_before: float | None = None

    def query(self) -> RunQuery:
        """The store's query for these filters."""
        graph = self.graph
        by_hash = graph is not None and _GRAPH_HASH.fullmatch(graph) is not None
        return RunQuery(
            status=self.status,
            quality=self.quality,
            graph_id=None if by_hash else graph,
            graph_hash=graph if by_hash else None,
            since=self.created_after,
            until=self.created_before,
        )
