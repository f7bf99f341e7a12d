"""Checking a store against the heads its runs' owners recorded (or an auditor kept).

A recorded head (run id, seq, chain hash) must still be in the log: the run's event at
that seq holds that hash. A chain hash covers every event before it, so a log edited and
rechained consistently up to the head, or cut before it, fails here though its own chain
checks out. See :mod:`eventstore._heads` for the heads file the store keeps.
"""

from __future__ import annotations

import os

import anyio

from eventstore import EventStore, HeadsFile, HeadsFileContents, RecordedHead, read_heads_file

__all__ = ["HeadsCache", "check_head"]


async def check_head(store: EventStore, run_id: str, seq: int, hash: str) -> str | None:
    """Why the head (``run_id``, ``seq``, ``hash``) is not in ``store``'s log, or None."""
    found = None
    async for event in store.read(run_id, from_seq=seq, to_seq=seq):
        found = event
    if found is None:
        if await store.get_run(run_id) is None:
            return "run missing from the store"
        return f"log lost its tail: the kept head is seq {seq}, the log ends before it"
    if found.hash != hash:
        return "hash at the kept head's seq differs"
    return None


class HeadsCache:
    """The store's heads file as last read, read again only once the file changed."""

    __slots__ = ("_contents", "_key", "_newest", "heads")

    def __init__(self, heads: HeadsFile | None) -> None:
        self.heads = heads
        self._key: tuple[int, int] | None = None
        self._contents: HeadsFileContents | None = None
        self._newest: dict[str, RecordedHead] = {}

    async def newest(self, run_id: str) -> tuple[HeadsFileContents, RecordedHead] | None:
        """The file and the run's newest recorded head in it, or None (no file, no head)."""
        contents = await self.contents()
        head = None if contents is None else self._newest.get(run_id)
        return None if contents is None or head is None else (contents, head)

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
            self._contents, self._newest, self._key = None, {}, None
            return HeadsFileContents(path=path, heads=[])
        key = (stat.st_size, stat.st_mtime_ns)
        if self._contents is None or key != self._key:
            self._contents = await anyio.to_thread.run_sync(read_heads_file, path)
            self._newest = self._contents.newest()
            self._key = key
        return self._contents
