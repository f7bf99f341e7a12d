"""The backend-neutral store interface and the records it returns."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import ClassVar, Literal, Protocol, Self, runtime_checkable

import msgspec

from ._events import Event, EventBody
from ._heads import HeadsFile
from ._runquery import RunInfo, RunPage, RunQuery

__all__ = [
    "AppendResult",
    "BackpressuringStore",
    "DurabilityConfig",
    "EventStore",
    "Snapshot",
    "SnapshotAfter",
    "StoreStatistics",
    "VerifyReport",
]


_ALL_RUNS = RunQuery()


class DurabilityConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How hard the store works to keep what it acknowledged.

    ``synchronous`` is SQLite's pragma: FULL (the default) fsyncs the WAL at every commit, so
    an acknowledged append survives power loss; NORMAL may lose the last commits on power loss
    (never on a process crash); OFF leaves syncing to the OS. ``max_batch`` caps how many
    appends one group commit takes (the writer also takes at most half of the appends in
    flight).
    ``page_size`` applies to new stores only. 1024 is the default because an event log mixes
    small rows with 1-4 KB ones (LLM turns, memory values): on 4 KB pages a row that does not
    fit the page's free space starts a new page and strands that space (a 50-step run
    appending 2 KB values filled 4 KB pages ~60%), while on 1 KB pages such rows spill into
    overflow pages that are filled completely. A commit also
    writes only the 1 KB pages it touched to the WAL, not 4 KB ones.
    """

    synchronous: Literal["FULL", "NORMAL", "OFF"] = "FULL"
    max_batch: int = 1000
    page_size: int = 1024

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"DurabilityConfig.max_batch must be >= 1, got {self.max_batch}")
        if self.page_size < 512 or self.page_size > 65536 or self.page_size & (self.page_size - 1):
            raise ValueError(
                f"DurabilityConfig.page_size must be a power of two in 512..65536, "
                f"got {self.page_size}"
            )


class AppendResult(msgspec.Struct, frozen=True, gc=False):
    """Where a committed batch landed: its seqs, the last global position and the last hash.

    ``gc=False``: numbers and a string, one per committed batch, never in a cycle."""

    first_seq: int
    last_seq: int
    last_position: int
    last_hash: str


class VerifyReport(msgspec.Struct, frozen=True):
    """The outcome of checking a run's hash chain. ``broken_at`` is the first bad seq."""

    run_id: str
    ok: bool
    checked: int
    broken_at: int | None
    reason: str | None


class Snapshot(msgspec.Struct, frozen=True):
    """A derived cache of a run's folded state as of ``seq``, stored beside the log.

    ``hash`` is the chain hash of the run's event at ``seq`` (hex) and ``version`` names the
    fold that made ``data``. That event is the :class:`~eventstore.SnapshotTaken` holding
    the digest of ``data``: whoever loads a snapshot checks it (:func:`eventstore.binds`),
    the chain from it to the run's head and its own fold's version, and ignores a snapshot
    that does not match (one saved without its event included). The store keeps ``data`` as
    opaque bytes and never reads it; deleting snapshots changes no result, only how long a
    fold takes.
    """

    run_id: str
    seq: int
    hash: str
    version: str
    data: bytes


class SnapshotAfter(msgspec.Struct, frozen=True):
    """A snapshot handed over with an append: the state after the batch's first ``events``.

    The batch's event ``events`` is the :class:`~eventstore.SnapshotTaken` that binds it
    (its version, the digest of ``data``; the append raises ValueError otherwise), and the
    state is the one through the event before it. The store saves it as the run's
    :class:`Snapshot` at that event's seq and chain hash, in the transaction that writes
    the batch, so it costs no transaction of its own and lands only if the batch does.
    ``1 <= events <= len(batch)``.
    """

    events: int
    version: str
    data: bytes


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a store's writer since it was opened."""

    appends: int
    events: int
    batches: int
    mean_batch_size: float
    max_batch_size: int
    commit_seconds_total: float
    conflicts: int = 0
    queued: int = 0
    #: Group commits by size (appends in one transaction): ``batch_size_counts[i]`` counts
    #: the commits whose size is at most ``BATCH_SIZE_BOUNDS[i]`` and above the bound
    #: before; the last counts the larger ones. Empty for a writer that keeps none.
    batch_size_counts: tuple[int, ...] = ()

    #: The upper bounds of the batch-size buckets.
    BATCH_SIZE_BOUNDS: ClassVar[tuple[int, ...]] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

    @staticmethod
    def batch_size_bucket(size: int) -> int:
        """The index in ``batch_size_counts`` of a commit of ``size`` appends."""
        return bisect_left(StoreStatistics.BATCH_SIZE_BOUNDS, size)


@runtime_checkable
class EventStore(Protocol):
    """An append-only, per-run event log: :class:`eventstore.SqliteEventStore` and
    :class:`eventstore.PostgresEventStore` implement it.

    See :class:`eventstore.SqliteEventStore` for each method's full semantics; every
    implementation must pass ``tests/eventstore/test_store.py``. What a store may do
    besides is declared by further protocols, which a caller checks with ``isinstance``:
    :class:`eventstore.ClaimingStore` (run ownership),
    :class:`eventstore.NotifyingStore` (announcing runnable runs) and
    :class:`eventstore.BackpressuringStore` (room for a new run, waited for before it).
    """

    @property
    def heads_file(self) -> HeadsFile | None: ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def append(
        self,
        run_id: str,
        events: Sequence[EventBody],
        *,
        expected_seq: int | None,
        snapshot: SnapshotAfter | None = None,
    ) -> AppendResult: ...

    def submit(
        self,
        run_id: str,
        events: Sequence[EventBody],
        *,
        expected_seq: int | None,
        on_done: Callable[[AppendResult | None, BaseException | None], None],
        snapshot: SnapshotAfter | None = None,
    ) -> bool: ...

    def read(
        self,
        run_id: str,
        *,
        from_seq: int = 1,
        to_seq: int | None = None,
        verify: bool = False,
    ) -> AsyncIterator[Event]: ...

    async def read_all(
        self, run_id: str, *, to_seq: int | None = None, verify: bool = False
    ) -> list[Event]: ...

    async def verify(self, run_id: str) -> VerifyReport: ...

    def tail(
        self, *, from_position: int = 0, poll_interval: float = 0.05
    ) -> AsyncIterator[Event]: ...

    async def head_position(self) -> int: ...

    async def list_runs(self, *, status: str | None = None, limit: int = 100) -> list[RunInfo]: ...

    async def query_runs(
        self, query: RunQuery = _ALL_RUNS, *, cursor: str | None = None, limit: int = 100
    ) -> RunPage: ...

    async def get_run(self, run_id: str) -> RunInfo | None: ...

    def statistics(self) -> StoreStatistics: ...

    async def save_snapshot(self, snapshot: Snapshot) -> None: ...

    async def load_snapshot(self, run_id: str) -> Snapshot | None: ...

    async def delete_snapshots(self, run_id: str | None = None) -> int: ...


@runtime_checkable
class BackpressuringStore(Protocol):
    """A store whose writer's room for a new run can be waited for before the run is made
    (both built-in stores).

    The writer has room when it would take a new run's first append, and a claim held for
    it, at once. ``Runtime.start`` waits for room before it makes anything of the run (no
    run, no executor), so starts beyond what the writer takes hold a coroutine each, not a
    run. A store without these methods never makes a start wait (its first append may
    still wait for the writer, in the run's executor).
    """

    def has_room(self) -> bool:
        """Whether :meth:`wait_for_room` would return at once: a caller about to start a
        run awaits it only when not. Raises StoreClosedError unless the store is open."""
        ...

    async def wait_for_room(self) -> None:
        """Return once the writer has room (at once if it has now, or once it closes).
        Raises StoreClosedError unless the store is open."""
        ...
