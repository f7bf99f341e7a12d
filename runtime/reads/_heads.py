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

from collections.abc import Iterable, Sequence

import anyio

from eventstore import (
    Event,
    EventStore,
    HeadsFile,
    HeadsFileContents,
    HeadsFileReader,
    RecordedHead,
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
    """The store's heads file as read so far, read on from where it was as it grows."""

    __slots__ = ("_by_run", "_lock", "_reader", "heads")

    def __init__(self, heads: HeadsFile | None) -> None:
        self.heads = heads
        self._reader = None if heads is None else HeadsFileReader(heads.path)
        self._by_run: dict[str, list[RecordedHead]] = {}
        self._lock = anyio.Lock()  # one read of the file at a time (the reader's state)

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
        heads = await self._heads_of(run_id, flush=True)
        if upto is not None and heads:
            heads = [head for head in heads if head.seq <= upto]
        if not heads:
            return None
        if events is None:
            missing = await check_heads(store, run_id, heads)
        else:
            missing = heads_missing(events, heads)
        return self._named(missing)

    async def check_read(
        self, store: EventStore, run_id: str, events: Sequence[Event], first_seq: int
    ) -> tuple[int, str] | None:
        """:meth:`check` for a read of the run's events from ``first_seq`` on (``events``;
        through a snapshot, the events before were not read): the heads recorded at the
        seqs read are checked against them, and the newest head before them and the newest
        after them each by a read of its one event (after them: appended since, by the
        run's owner; none there means the log lost its tail). ``verify`` checks every
        head. Heads this process recorded and has not written yet are not waited for."""
        heads = await self._heads_of(run_id, flush=False)
        if not heads:
            return None
        end = events[-1].seq if events else first_seq - 1
        inside: list[RecordedHead] = []
        before: RecordedHead | None = None
        after: RecordedHead | None = None
        for head in heads:
            if head.seq < first_seq:
                if before is None or head.seq >= before.seq:
                    before = head
            elif head.seq > end:
                if after is None or head.seq >= after.seq:
                    after = head
            else:
                inside.append(head)
        missing = heads_missing(events, inside)
        for alone in (before, after):
            if missing is None and alone is not None:
                missing = await check_heads(store, run_id, [alone])
        return self._named(missing)

    def _named(self, missing: tuple[int, str] | None) -> tuple[int, str] | None:
        if missing is None or self.heads is None:
            return missing
        return missing[0], f"{missing[1]} (recorded in {self.heads.path})"

    async def _heads_of(self, run_id: str, *, flush: bool) -> list[RecordedHead] | None:
        if self._reader is None:
            return None
        await self._read_on(flush)
        return self._by_run.get(run_id)

    async def _read_on(self, flush: bool) -> None:
        """Take in what the file gained since the last read (all of it if it was replaced)."""
        assert self.heads is not None and self._reader is not None
        if flush:  # heads recorded here but not written yet count too
            await anyio.to_thread.run_sync(self.heads.flush)
        reader, by_run = self._reader, self._by_run
        async with self._lock:
            known = len(reader.heads)
            added = await anyio.to_thread.run_sync(reader.read)
            if len(reader.heads) != known + len(added):  # read again from the start
                by_run.clear()
                added = reader.heads
            for head in added:
                kept = by_run.get(head.run_id)
                if kept is None:
                    by_run[head.run_id] = [head]
                else:
                    kept.append(head)

    async def contents(self) -> HeadsFileContents | None:
        """The file's contents (None when the store keeps no heads file); a file that does
        not exist yet reads as no heads. Raises OSError if it cannot be read."""
        if self._reader is None:
            return None
        await self._read_on(True)
        return self._reader.contents()
