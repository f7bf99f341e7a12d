"""The PostgreSQL store's run listing: its columns and indexes, the query, the upgrade.

Version 2 of the layout gives the runs row the graph id and quality the ``run_index``
hooks record, and one index per filter ending in ``(created, run)``, the listing's order
(see :mod:`eventstore._runquery`), so a page of any one filter, time range and cursor is
one index range scan without a sort. Rows a claim made before the run's first append
(``last_seq`` 0) are left out of every listing.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
import psycopg
from psycopg import sql

from ._errors import UnknownEventError
from ._events import EVENT_TYPES, RunIndex, decode_body, run_index_hook
from ._runquery import RunQuery, page_sql

__all__ = ["RUN_COLUMNS", "V2_DDL", "V3_DDL", "V4_DDL", "fill_run_index", "page_statement"]

# Then the run's owner, which the runs row holds beside the run: while its lease is
# unexpired on the server's clock (as the claims statements read it).
RUN_COLUMNS = (
    "r.run_id, r.status, r.created, r.updated, r.last_seq, r.graph_hash, r.graph_id, r.quality, "
    "CASE WHEN r.lease_expires >= extract(epoch FROM clock_timestamp())::float8 THEN r.owner END, "
    "r.origin, "
    "CASE WHEN r.lease_expires >= extract(epoch FROM clock_timestamp())::float8 "
    "THEN r.draining END, "
    "CASE WHEN r.lease_expires >= extract(epoch FROM clock_timestamp())::float8 "
    "THEN r.draining_since END"
)


def page_statement(query: RunQuery, cursor: str | None, limit: int) -> tuple[str, tuple[Any, ...]]:
    """The statement (and parameters) of one page of the run listing; rows a claim made
    before the run's first append are left out."""
    return page_sql(RUN_COLUMNS, query, cursor, limit, "%s", extra=("r.last_seq > 0",))


# Statements separated by ";", each formatted with the schema's identifier.
V2_DDL = """
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS graph_id TEXT;
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS quality TEXT;
DROP INDEX IF EXISTS {schema}.runs_status;
CREATE INDEX runs_status ON {schema}.runs (status, created, run);
CREATE INDEX runs_created ON {schema}.runs (created, run);
CREATE INDEX runs_quality ON {schema}.runs (quality, created, run);
CREATE INDEX runs_graph ON {schema}.runs (graph_id, created, run);
CREATE INDEX runs_graph_hash ON {schema}.runs (graph_hash, created, run)
"""
V3_DDL = """
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS origin TEXT
"""
# A claim's draining mark (see ClaimingStore.mark_draining), beside the claim.
V4_DDL = """
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS draining TEXT;
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS draining_since DOUBLE PRECISION
"""

_DECODE_ERRORS = (UnknownEventError, msgspec.DecodeError, msgspec.ValidationError)


async def fill_run_index(conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str) -> None:
    """Set each run's graph id, quality and origin from its events (in the caller's
    transaction).

    Applies the ``run_index`` hooks registered now to the events of their types, in log
    order, as appends do. Events that cannot be decoded are skipped (verify reports them).
    """
    hooked = sorted(tag for tag, cls in EVENT_TYPES.items() if run_index_hook(cls) is not None)
    if not hooked:
        return
    ident = sql.Identifier(schema)
    found: dict[int, list[str | None]] = {}  # run key -> [graph id, quality, origin]
    after = 0
    while True:
        cur = await conn.execute(
            sql.SQL(
                "SELECT position, run, type, version, body FROM {}.events "
                "WHERE position > %s AND type = ANY(%s) ORDER BY position LIMIT 1000"
            ).format(ident),
            (after, hooked),
        )
        rows = await cur.fetchall()
        if not rows:
            break
        for _, run, tag, version, body in rows:
            try:
                event = decode_body(str(tag), int(str(version)), cast(bytes, body))
            except _DECODE_ERRORS:
                continue
            hook = run_index_hook(type(event))
            if hook is None:
                continue
            index = RunIndex(*hook(event))
            values = found.setdefault(int(str(run)), [None, None, None])
            for i, value in enumerate((index.graph_id, index.quality, index.origin)):
                if value is not None:
                    values[i] = value or None
        after = int(str(rows[-1][0]))
    if found:
        runs = list(found)
        await conn.execute(
            sql.SQL(
                "UPDATE {}.runs r SET graph_id = v.graph_id, quality = v.quality, "
                "origin = v.origin FROM unnest(%s::bigint[], %s::text[], %s::text[], "
                "%s::text[]) AS v(run, graph_id, quality, origin) WHERE r.run = v.run"
            ).format(ident),
            (runs, *([found[r][i] for r in runs] for i in range(3))),
        )
