"""Append requests: a caller's batch encoded for the writer, with the slot for its outcome."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ._events import (
    UNCHANGED_INDEX,
    EventBody,
    RunIndex,
    RunIndexHook,
    encode_body,
    event_tag,
    run_index_hook,
)
from ._format import COMPRESS_AT, STORED_TAGLESS, STORED_WHOLE, encode_rows, frame_rows, tagless_cut
from ._protocol import AppendResult, SnapshotAfter

__all__ = ["AppendRequest", "Pending", "prepare"]

_log = logging.getLogger("magistrate.eventstore")
_T = TypeVar("_T")


class Pending(Generic[_T]):
    """A request to a store's writer with the slot for its answer.

    Created and answered on the event loop thread (a writer thread only fills ``result`` /
    ``error``): :meth:`finish` or :meth:`fail` wakes the caller waiting in :meth:`wait`, or
    calls ``on_done(result, error)`` when one is set.
    """

    __slots__ = ("done", "error", "future", "on_done", "result")

    def __init__(self) -> None:
        # Made by wait() only: a request answered through on_done needs none.
        self.future: asyncio.Future[None] | None = None
        self.done = False
        self.result: _T | None = None
        self.error: BaseException | None = None
        self.on_done: Callable[[_T | None, BaseException | None], None] | None = None

    async def wait(self) -> None:
        """Return once the request is answered (finished or failed)."""
        if not self.done:
            # A bare future, not an anyio.Event: it is the cheapest wake-up on asyncio (the
            # store is asyncio-only, as aiosqlite is), and appends are the hot path.
            self.future = asyncio.get_running_loop().create_future()
            await self.future

    def finish(self) -> None:
        """Answer the request with its ``result`` or ``error`` (once; later calls do nothing)."""
        if self.done:
            return
        self.done = True
        # A waiter that was cancelled left its future cancelled: nothing to wake, and
        # setting it would raise (and stop the writer that answers the batch).
        future = self.future
        if future is not None and not future.done():
            future.set_result(None)
        on_done = self.on_done
        if on_done is not None:
            self.on_done = None
            error = self.error
            try:
                on_done(None if error is not None else self.result, error)
            except Exception:  # never let one caller's callback stop the others' answers
                _log.exception("a store callback failed")

    def fail(self, error: BaseException) -> None:
        """Answer the request with ``error`` (unless it was answered already)."""
        if self.done:
            return
        self.error = error
        self.result = None
        self.finish()


class AppendRequest(Pending[AppendResult]):
    """One caller's batch on its way through the writer, with the slot for its outcome
    (see :class:`Pending`; ``on_done`` is SqliteEventStore.submit's)."""

    __slots__ = (
        "bodies",
        "expected_seq",
        "index",
        "rows",
        "run_id",
        "snapshot",
        "tags",
        "versions",
    )

    def __init__(
        self,
        run_id: str,
        tags: list[str],
        versions: list[int],
        bodies: list[bytes],
        index: RunIndex,
        expected_seq: int | None,
    ) -> None:
        super().__init__()
        self.run_id = run_id
        self.tags = tags
        self.versions = versions
        self.bodies = bodies  # encoded (what the hash covers)
        # The rows to write, (event count, type, version, body as stored): made by
        # prepare, or by the writer thread (stored_rows) when a body is to be compressed.
        self.rows: list[tuple[int, str, int, bytes]] | None = None
        # What the batch changes in the run's listing row (None: unchanged, "": cleared).
        self.index = index
        self.expected_seq = expected_seq
        #: A snapshot to save in the batch's transaction (SqliteEventStore.append).
        self.snapshot: SnapshotAfter | None = None

    @property
    def status(self) -> tuple[str | None, str | None]:
        """The batch's (status, graph hash) change (the first two fields of ``index``)."""
        return self.index.status, self.index.graph_hash

    def stored_rows(self) -> list[tuple[int, str, int, bytes]]:
        """The rows to write (computed once, in the writer thread if prepare left them)."""
        if self.rows is None:
            self.rows = encode_rows(self.tags, self.versions, self.bodies)
        return self.rows


#: Per event class: (tag, schema version, run listing hook or None, tag prefix length).
_TYPE_INFO: dict[type[EventBody], tuple[str, int, RunIndexHook | None, int]] = {}


def _type_info(cls: type[EventBody], data: bytes) -> tuple[str, int, RunIndexHook | None, int]:
    """Learn a class's row facts from its first encoded body (``data``)."""
    tag = event_tag(cls)
    # A tagged struct's encoding starts with its tag; if this class's does not, its
    # bodies are stored whole.
    cut = tagless_cut(tag, data)
    info = (tag, cls.schema_version, run_index_hook(cls), cut)
    _TYPE_INFO[cls] = info
    return info


def prepare(
    run_id: str,
    events: Sequence[EventBody],
    expected_seq: int | None,
    *,
    rows: bool = True,
    snapshot: SnapshotAfter | None = None,
) -> AppendRequest:
    """Encode a batch into a request (in the caller's task, so bad input raises there).

    ``rows=False`` makes no stored forms or rows (for a store that keeps bodies whole).
    Otherwise small bodies get their stored form and rows here. A batch with a body to
    compress is left to the writer thread (AppendRequest.stored_rows): zlib gives up the GIL, and on
    the event loop each call was a chance for the writer thread to take it and keep the
    loop waiting.
    """
    encode = encode_body
    datas = [encode(body) for body in events]
    infos = _TYPE_INFO
    tags: list[str] = []
    versions: list[int] = []
    stored: list[bytes] = []
    index: RunIndex | None = None
    large = False
    for body, data in zip(events, datas, strict=True):
        cls = type(body)
        info = infos.get(cls) or _type_info(cls, data)
        tags.append(info[0])
        versions.append(info[1])
        if info[2] is not None:
            index = _merge_index(index, info[2](body))
        if rows:
            if len(data) < COMPRESS_AT:
                # What store_body does for a small body, without checking the tag again
                # (every event takes this path).
                cut = info[3]
                stored.append(STORED_TAGLESS + data[cut:] if cut else STORED_WHOLE + data)
            else:
                large = True
    request = AppendRequest(
        run_id, tags, versions, datas, UNCHANGED_INDEX if index is None else index, expected_seq
    )
    request.snapshot = snapshot
    if rows and not large:
        request.rows = frame_rows(tags, versions, stored)
    return request


def _merge_index(
    index: RunIndex | None, change: RunIndex | tuple[str | None, str | None]
) -> RunIndex:
    """``index`` with the fields ``change`` sets (a later event's change wins)."""
    merged = list(index or UNCHANGED_INDEX)
    for i, value in enumerate(change):
        if value is not None:
            merged[i] = value
    return RunIndex(*merged)
