"""Filling the run listing's columns from a file's events, for a file older than them."""

from __future__ import annotations

import json
import sqlite3

import msgspec

from ._errors import UnknownEventError
from ._events import EVENT_TYPES, RunIndex, decode_body, run_index_hook
from ._format import FRAME_TYPE, FormatError, decode_row, load_body

__all__ = ["fill_run_index"]

_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


def fill_run_index(conn: sqlite3.Connection) -> None:
    """Set each run's graph id, quality and origin from its events (inside the caller's
    transaction).

    Applies the ``run_index`` hooks registered now to the events of their types, in log
    order, as appends do; status and graph hash stay as the file has them. Rows that
    cannot be read are skipped (verify reports them). Without hooks it changes nothing.
    """
    hooked = sorted(tag for tag, cls in EVENT_TYPES.items() if run_index_hook(cls) is not None)
    if not hooked:
        return
    wanted = set(hooked)
    found: dict[int, list[str | None]] = {}  # run key -> [graph id, quality, origin]
    after = 0
    while True:
        rows = conn.execute(
            "SELECT position, run, type, version, hash, body FROM events WHERE position > ? "
            "AND (type = ? OR type IN (SELECT value FROM json_each(?))) ORDER BY position "
            "LIMIT 1000",
            (after, FRAME_TYPE, json.dumps(hooked)),
        ).fetchall()
        if not rows:
            break
        for _, run, row_type, version, hashes, body in rows:
            try:
                items = decode_row(row_type, version, bytes(hashes), bytes(body))
            except FormatError:
                continue
            for tag, item_version, _, stored in items:
                if tag not in wanted:
                    continue
                try:
                    event = decode_body(tag, item_version, load_body(stored, tag))
                except (FormatError, UnknownEventError, *_DECODE_ERRORS):
                    continue
                hook = run_index_hook(type(event))
                if hook is None:
                    continue
                index = RunIndex(*hook(event))
                values = found.setdefault(run, [None, None, None])
                for i, value in enumerate((index.graph_id, index.quality, index.origin)):
                    if value is not None:
                        values[i] = value or None
        after = rows[-1][0]
    conn.executemany(
        "UPDATE runs SET graph_id = ?, quality = ?, origin = ? WHERE run = ?",
        [(graph_id, quality, origin, run) for run, (graph_id, quality, origin) in found.items()],
    )
