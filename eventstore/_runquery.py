"""Run listings: the row, the filter, keyset pages, the cursor and their SQL.

Both stores list runs newest first by ``(created, run key)``: the time of the run's first
append, ties broken by the store's own run key. A page ends with a cursor naming the last
row's ``(created, run key)``; the next page holds the rows strictly after it in that order.
So a page is one index range scan whatever its depth (no OFFSET), and runs created while a
client pages (they sort first) neither shift nor repeat the rows of later pages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = [
    "RunInfo",
    "RunPage",
    "RunQuery",
    "decode_cursor",
    "encode_cursor",
    "page_of",
    "page_sql",
    "run_filter_sql",
]


class RunInfo(msgspec.Struct, frozen=True):
    """A row of the run listing. ``status``, ``graph_hash``, ``graph_id`` and ``quality`` are
    what the run's events' ``run_index`` hooks said when they were appended (``status`` is
    "new" until one says otherwise); ``created`` is the time of the run's first append;
    ``last_seq`` and ``updated`` (time of the last append) are live.

    ``owner`` is not from the log: it is the owner (worker id) whose claim on the run is
    unexpired when the row is read, on the store's clock (see :class:`ClaimingStore`), or
    None when no live claim holds the run, or the store records no ownership.
    ``draining`` (with ``draining_since``, the store's clock) is that claim's mark while
    its owner keeps it for an abandoned attempt still running there (the node ids, comma
    separated; see :meth:`ClaimingStore.mark_draining`), else None.
    """

    run_id: str
    status: str
    created: float
    updated: float
    last_seq: int
    graph_hash: str | None
    graph_id: str | None = None
    quality: str | None = None
    owner: str | None = None
    origin: str | None = None
    draining: str | None = None
    draining_since: float | None = None


class RunQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Which runs a listing holds: every field given must match (an AND).

    ``status``, ``quality``, ``graph_id`` and ``graph_hash`` compare with the values the
    runs' ``run_index`` hooks recorded (see :class:`eventstore.RunIndex`); ``since`` and
    ``until`` bound ``created`` (Unix seconds, ``since <= created < until``).
    """

    status: str | None = None
    quality: str | None = None
    graph_id: str | None = None
    graph_hash: str | None = None
    since: float | None = None
    until: float | None = None

    def __post_init__(self) -> None:
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"RunQuery.{name} must be a finite number, got {value!r}")


class RunPage(msgspec.Struct, frozen=True):
    """One page of a run listing, newest first; ``next_cursor`` is None on the last page."""

    runs: list[RunInfo]
    next_cursor: str | None


def encode_cursor(created: float, run: int) -> str:
    """The cursor after a row: its ``created`` (exactly, as ``repr`` gives it) and run key."""
    return f"{created!r}~{run}"


def decode_cursor(cursor: str) -> tuple[float, int]:
    """``(created, run key)`` from a cursor; ValueError for one no store made."""
    created, sep, run = cursor.partition("~")
    try:
        if not sep or len(cursor) > 80:
            raise ValueError
        value, key = float(created), int(run)
    except ValueError:
        raise ValueError(f"not a run listing cursor: {cursor[:80]!r}") from None
    if not math.isfinite(value) or key < 0 or key >= 2**63:
        raise ValueError(f"not a run listing cursor: {cursor[:80]!r}")
    return value, key


def run_filter_sql(
    query: RunQuery, cursor: str | None, mark: str, alias: str = "r"
) -> tuple[list[str], list[Any]]:
    """The WHERE conditions (ANDed) and their parameters for ``query`` after ``cursor``.

    ``mark`` is the driver's placeholder (``?`` or ``%s``); ``alias`` the runs table's. The
    conditions name the columns the stores index: equality on one of status, quality,
    graph_id, graph_hash, then a range on ``(created, run)``.
    """
    where: list[str] = []
    params: list[Any] = []
    for column in ("status", "quality", "graph_id", "graph_hash"):
        value = getattr(query, column)
        if value is not None:
            where.append(f"{alias}.{column} = {mark}")
            params.append(value)
    if query.since is not None:
        where.append(f"{alias}.created >= {mark}")
        params.append(query.since)
    if query.until is not None:
        where.append(f"{alias}.created < {mark}")
        params.append(query.until)
    if cursor is not None:
        created, run = decode_cursor(cursor)
        where.append(f"({alias}.created, {alias}.run) < ({mark}, {mark})")
        params += [created, run]
    return where, params


def page_sql(
    columns: str,
    query: RunQuery,
    cursor: str | None,
    limit: int,
    mark: str,
    *,
    extra: Sequence[str] = (),
    join: str = "",
    column_params: Sequence[Any] = (),
) -> tuple[str, tuple[Any, ...]]:
    """The statement (and parameters) of one page of ``runs r``: ``columns`` then the run
    key, newest first, one row more than ``limit`` (to know whether a next page exists).
    ``extra`` are further conditions without parameters; ``join`` a join clause after
    ``runs r`` (a lookup by the run's key or id, which keeps the runs index's order);
    ``column_params`` the parameters of ``columns``."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    where, params = run_filter_sql(query, cursor, mark)
    where += extra
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    joined = f"{join} " if join else ""
    return (
        f"SELECT {columns}, r.run FROM runs r {joined}{clause}"
        f"ORDER BY r.created DESC, r.run DESC LIMIT {mark}",
        # One more, within the 64-bit integer both stores take (no store holds that many).
        (*column_params, *params, min(limit + 1, 2**63 - 1)),
    )


def page_of(rows: Sequence[Any], limit: int) -> RunPage:
    """The page of ``rows`` fetched by :func:`page_sql` (which asked for one more)."""
    more = len(rows) > limit
    kept = rows[:limit]
    next_cursor = encode_cursor(float(kept[-1][2]), int(kept[-1][-1])) if more else None
    return RunPage([RunInfo(*row[:-1]) for row in kept], next_cursor)
