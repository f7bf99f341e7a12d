"""Checking a store against the heads its runs' owners recorded (or an auditor kept).

A recorded head (run id, seq, chain hash) must still be in the log: the run's event at
that seq holds that hash. A chain hash covers every event before it, so a log edited and
rechained consistently up to the head, or cut before it, fails here though its own chain
checks out. Every head recorded for a run is checked, not only the newest: a log rewritten
and then extended by a later commit chains up to a new head recorded after the rewrite,
while the heads recorded before it no longer match. See :mod:`eventstore._heads` for the
heads file the store keeps.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import anyio

from eventstore import (
    Event,
    EventStore,
    HeadsFile,
    HeadsFileContents,
    RecordedHead,
    read_heads_file,
)

__all__ = ["HeadsCache", "check_head", "check_heads", "heads_missing"]


async def check_head(store: EventStore, run_id: str, seq: int, hash: str) -> str | None:
    """Why the head (``run_id``, ``seq``, ``hash``) is not in ``store``'s log, or None."""
    missing = await check_heads(store, run_id, [RecordedHead(run_id, seq, hash)])
    if missing is None:
        return None
    if await store.get_run(run_id) is None:
        return "run missing from the store"
    return missing[1]


def heads_missing(events: Iterable[Event], heads: Sequence[RecordedHead]) -> tuple[int, str] | None:
    """The first of a run's recorded ``heads`` that its ``events`` (in seq order, from some
    seq at or before the lowest head's on) do not hold, as (seq, why), or None."""
    if not heads:
        return None
    recorded: dict[int, str] = {}
    for head in sorted(heads, key=lambda head: head.seq):
        if recorded.setdefault(head.seq, head.hash) != head.hash:
            return head.seq, "two different hashes were recorded at this seq (a rewritten log)"
    last = 0
    for event in events:
        last = event.seq
        hash = recorded.get(last)
        if hash is not None and event.hash != hash:
            return last, "hash at the kept head's seq differs"
    top = max(recorded)
    if last < top:
        return top, f"log lost its tail: the kept head is seq {top}, the log ends before it"
    return None


async def check_heads(
    store: EventStore, run_id: str, heads: Sequence[RecordedHead]
) -> tuple[int, str] | None:
    """:func:`heads_missing` of the run's log in ``store`` (one read, of the seqs from the
    lowest head to the highest): the first recorded head no longer in it, as (seq, why),
    or None."""
    if not heads:
        return None
    seqs = [head.seq for head in heads]
    events = [e async for e in store.read(run_id, from_seq=min(seqs), to_seq=max(seqs))]
    return heads_missing(events, heads)


class HeadsCache:
    """The store's heads file as last read, read again only once the file changed."""

    __slots__ = ("_by_run", "_contents", "_key", "heads")

    def __init__(self, heads: HeadsFile | None) -> None:
        self.heads = heads
        self._key: tuple[int, int] | None = None
        self._contents: HeadsFileContents | None = None
        self._by_run: dict[str, list[RecordedHead]] = {}

    async def check(
        self,
        store: EventStore,
        run_id: str,
        events: Sequence[Event] | None = None,
        *,
        upto: int | None = None,
    ) -> tuple[int, str] | None:
        """The first head recorded for the run that its log no longer holds, as (seq, why,
        naming the file), or None: checked against ``events`` (the run's, in seq order from
        its first) if given, else read from ``store``; heads past ``upto`` (a prefix's end)
        are left out. Raises OSError if the file cannot be read."""
        contents = await self.contents()
        heads = None if contents is None else self._by_run.get(run_id)
        if upto is not None and heads:
            heads = [head for head in heads if head.seq <= upto]
        if contents is None or not heads:
            return None
        if events is None:
            missing = await check_heads(store, run_id, heads)
        else:
            missing = heads_missing(events, heads)
        if missing is None:
            return None
        return missing[0], f"{missing[1]} (recorded in {contents.path})"

    async def contents(self) -> HeadsFileContents | None:
        """The file's contents (None when the store keeps no heads file); a file that does
        not exist yet reads as no heads. Raises OSError if it cannot be read."""
        if self.heads is None:
            return None
        path = self.heads.path
        # Heads recorded here but not written yet count too.
        await anyio.to_thread.run_sync(self.heads.flush)
        try:
            stat = await anyio.to_thread.run_sync(os.stat, path)
        except FileNotFoundError:
            self._contents, self._by_run, self._key = None, {}, None
            return HeadsFileContents(path=path, heads=[])
        key = (stat.st_size, stat.st_mtime_ns)
        if self._contents is None or key != self._key:
            self._contents = await anyio.to_thread.run_sync(read_heads_file, path)
            by_run: dict[str, list[RecordedHead]] = {}
            for head in self._contents.heads:
                by_run.setdefault(head.run_id, []).append(head)
            self._by_run = by_run
            self._key = key
        return self._contents
