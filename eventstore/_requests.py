"""Append requests: a caller's batch encoded for the writer, with the slot for its outcome."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ._claims import Claim
from ._events import _ENCODER as _BODY_ENCODER
from ._events import (
    UNCHANGED_INDEX,
    EventBody,
    RunIndex,
    RunIndexHook,
    event_tag,
    run_index_hook,
)
from ._format import (
    COMPRESS_AT,
    FRAME_EVENTS,
    FRAME_TYPE,
    STORED_TAGLESS,
    STORED_WHOLE,
    Row,
    encode_rows,
    frame_rows,
    pack_frame,
    tagless_cut,
)
from ._protocol import AppendResult, SnapshotAfter

__all__ = ["AppendRequest", "HeldRelease", "Pending", "prepare"]

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


class HeldRelease(Pending[None]):
    """A release of ``claim`` that a PostgreSQL store's writer holds for the run's append
    at expected seq ``with_append`` (see ClaimingStore.submit_release); a SQLite store's
    is an ownership request (eventstore._sqlite_claims)."""

    __slots__ = ("claim", "with_append")

    def __init__(self, claim: Claim, with_append: int) -> None:
        super().__init__()
        self.claim = claim
        self.with_append = with_append


class AppendRequest(Pending[AppendResult]):
    """One caller's batch on its way through the writer, with the slot for its outcome
    (see :class:`Pending`; ``on_done`` is SqliteEventStore.submit's)."""

    __slots__ = (
        "bodies",
        "expected_seq",
        "index",
        "release",
        "rows",
        "run_id",
        "snapshot",
        "tags",
        "versions",
    )

    def __init__(
        self,
        run_id: str,
        tags: Sequence[str],
        versions: Sequence[int],
        bodies: list[bytes],
        index: RunIndex,
        expected_seq: int | None,
    ) -> None:
        # Pending's fields, set here (one call fewer per append).
        self.future = None
        self.done = False
        self.result = None
        self.error = None
        self.on_done = None
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
        #: A release of the run's claim to commit with the batch, after it and only if it
        #: is written (a SQLite store's ``submit_release(..., with_append=seq)``).
        self.release: Pending[Any] | None = None

    @property
    def status(self) -> tuple[str | None, str | None]:
        """The batch's (status, graph hash) change (the first two fields of ``index``)."""
        return self.index.status, self.index.graph_hash

    def stored_rows(self) -> list[tuple[int, str, int, bytes]]:
        """The rows to write (computed once, in the writer thread if prepare left them)."""
        if self.rows is None:
            self.rows = encode_rows(list(self.tags), list(self.versions), self.bodies)
        return self.rows


#: Per event class: (tag, schema version, run listing hook or None, tag prefix length).
_TYPE_INFO: dict[type[EventBody], tuple[str, int, RunIndexHook | None, int]] = {}

#: A batch's shape, learnt once per sequence of body classes: its tags and versions (tuples
#: the requests share, never changed), the bodies that change the run listing (position,
#: hook), and each body's tag prefix length. A run's steps append a handful of shapes.
_Shape = tuple[
    tuple[str, ...], tuple[int, ...], tuple[tuple[int, RunIndexHook], ...], tuple[int, ...]
]
_SHAPES: dict[tuple[type[EventBody], ...], _Shape] = {}
#: Batches of up to this many events have their shape kept, and at most _SHAPES_KEPT shapes.
_SHAPE_EVENTS = 8
_SHAPES_KEPT = 1024


def _type_info(cls: type[EventBody], data: bytes) -> tuple[str, int, RunIndexHook | None, int]:
    """Learn a class's row facts from its first encoded body (``data``)."""
    tag = event_tag(cls)
    # A tagged struct's encoding starts with its tag; if this class's does not, its
    # bodies are stored whole.
    cut = tagless_cut(tag, data)
    info = (tag, cls.schema_version, run_index_hook(cls), cut)
    _TYPE_INFO[cls] = info
    return info


def _shape(classes: tuple[type[EventBody], ...], datas: list[bytes]) -> _Shape:
    """The shape of a batch of bodies of ``classes`` encoded as ``datas``."""
    infos = [
        _TYPE_INFO.get(cls) or _type_info(cls, data)
        for cls, data in zip(classes, datas, strict=True)
    ]
    shape = (
        tuple(info[0] for info in infos),
        tuple(info[1] for info in infos),
        tuple((i, info[2]) for i, info in enumerate(infos) if info[2] is not None),
        tuple(info[3] for info in infos),
    )
    if len(classes) <= _SHAPE_EVENTS and len(_SHAPES) < _SHAPES_KEPT:
        _SHAPES[classes] = shape
    return shape


def prepare(
    run_id: str,
    events: Sequence[EventBody],
    expected_seq: int | None,
    snapshot: SnapshotAfter | None = None,
    *,
    rows: bool = True,
) -> AppendRequest:
    """Encode a batch into a request (in the caller's task, so bad input raises there).

    ``rows=False`` makes no stored forms or rows (for a store that keeps bodies whole).
    Otherwise small bodies get their stored form and rows here. A batch with a body to
    compress is left to the writer thread (AppendRequest.stored_rows): zlib gives up the GIL, and on
    the event loop each call was a chance for the writer thread to take it and keep the
    loop waiting.
    """
    # encode_body's encoder, mapped in C: no Python call per body.
    datas = list(map(_BODY_ENCODER.encode, events))
    classes = tuple(map(type, events))
    tags, versions, hooks, cuts = _SHAPES.get(classes) or _shape(classes, datas)
    index = UNCHANGED_INDEX
    if hooks:
        merged: RunIndex | None = None
        for i, hook in hooks:
            change = hook(events[i])
            if merged is None and type(change) is RunIndex:
                merged = change  # what merging it into no change gives (a run's start, end)
            else:
                merged = _merge_index(merged, change)
        assert merged is not None
        index = merged
    request = AppendRequest(run_id, tags, versions, datas, index, expected_seq)
    request.snapshot = snapshot
    if rows:
        stored: list[bytes] = []
        i = 0  # datas and cuts (the shape's) go together: no zip made and its keyword parsed
        for data in datas:
            if len(data) >= COMPRESS_AT:
                break  # compressed by the writer thread, with the rest of the batch
            # What store_body does for a small body, without checking the tag again.
            cut = cuts[i]
            i += 1
            stored.append(STORED_TAGLESS + data[cut:] if cut else STORED_WHOLE + data)
        else:
            request.rows = _framed(tags, versions, stored)
    return request


def _framed(tags: Sequence[str], versions: Sequence[int], stored: list[bytes]) -> list[Row]:
    """frame_rows for the common batch: one event, or one frame."""
    count = len(stored)
    if count == 1:
        return [(1, tags[0], versions[0], stored[0])]
    if count <= FRAME_EVENTS:
        return [(count, FRAME_TYPE, 0, pack_frame(tags, versions, stored))]
    return frame_rows(list(tags), list(versions), stored)


def _merge_index(
    index: RunIndex | None, change: RunIndex | tuple[str | None, str | None]
) -> RunIndex:
    """``index`` with the fields ``change`` sets (a later event's change wins)."""
    merged = list(index or UNCHANGED_INDEX)
    for i, value in enumerate(change):
        if value is not None:
            merged[i] = value
    return RunIndex(*merged)
