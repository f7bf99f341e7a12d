"""A runtime's access to run logs: reading a run's events and state, and opening the
:class:`RunLog` a run appends through (kept here when there is no store)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from eventstore import BackpressuringStore, CorruptLogError, Event, EventStore, StoreError

from ._errors import RunChangedError, RunNotFoundError, RunStateError
from ._result import FINAL
from .engine._runlog import CommitHook, CommitObserver, RunLog
from .events._snapshots import SnapshotOutcome, SnapshotRead, load_state
from .events._state import RunState, fold
from .reads._heads import HeadsCache
from .spec._load import graph_from_dict
from .spec._model import GraphSpec, graph_hash

__all__ = ["RunLogs"]

_log = logging.getLogger("magistrate.runtime")


class RunLogs:
    """The runs of one ``store`` (None: in-memory logs, which live as long as this object).

    Every log opened here calls ``hooks`` and ``observers`` after each commit;
    ``snapshot_read`` (if given) is told how each state read used a snapshot.
    """

    def __init__(
        self,
        store: EventStore | None,
        *,
        hooks: Sequence[CommitHook] = (),
        observers: Sequence[CommitObserver] = (),
        snapshot_read: Callable[[SnapshotOutcome], None] | None = None,
    ) -> None:
        self.store = store
        #: The store, if a new run waits for its writer's room before it is made (checked
        #: once here, not at every start); else None.
        self.room: BackpressuringStore | None = (
            store if isinstance(store, BackpressuringStore) else None
        )
        # Tuples, which a log keeps as they are (``tuple`` of a tuple is itself): every log
        # shares them instead of holding a copy each.
        self.hooks = tuple(hooks)
        self.observers = tuple(observers)
        self._snapshot_read = snapshot_read
        self._memory: dict[str, RunLog] = {}
        #: The heads the store's heads file recorded (none without one): see read_verified.
        self.heads = HeadsCache(None if store is None else store.heads_file)

    def create(self, run_id: str, *, observers: Sequence[CommitObserver] = ()) -> RunLog:
        """A new, empty log for ``run_id``, whose commits also go to ``observers``.

        Without a store, RunStateError if this runtime holds a run of that id already (a
        store's first append meets the stored run instead: see RunControl._settle)."""
        if self.store is None:
            held = self._memory.get(run_id)
            if held is not None:
                why = "a run with this id is already in this runtime (resume or fork it instead)"
                raise RunStateError(run_id, held.state.status, why)
        log = RunLog(run_id, self.store, hooks=self.hooks, observers=(*self.observers, *observers))
        if self.store is None:
            self._memory[run_id] = log
        return log

    def reopen(self, run_id: str, last_seq: int, snapshot: SnapshotRead | None = None) -> RunLog:
        """The log to append to ``run_id`` after its event ``last_seq``: the in-memory log
        itself without a store. ``snapshot``: the run's snapshot as the read of its state
        found it (:meth:`read_resumable`); the log's next snapshot counts from it and
        replaces it (without: from ``last_seq``, replacing none)."""
        log = self._memory.get(run_id)
        if log is None:
            log = RunLog(
                run_id, self.store, last_seq=last_seq, hooks=self.hooks, observers=self.observers
            )
            if snapshot is not None:
                log.snapshot_seq, log.snapshot_bytes = snapshot.seq, snapshot.size
            if self.store is None:
                self._memory[run_id] = log
        return log

    async def read_events(
        self, run_id: str, *, from_seq: int = 1, to_seq: int | None = None
    ) -> list[Event]:
        """The run's events from ``from_seq`` in order (from the store, or the in-memory
        log)."""
        if self.store is not None:
            if from_seq <= 1:
                return await self.store.read_all(run_id, to_seq=to_seq)
            return [e async for e in self.store.read(run_id, from_seq=from_seq, to_seq=to_seq)]
        log = self._memory.get(run_id)
        if log is None:
            return []
        return log.events(to_seq=to_seq)[from_seq - 1 :]

    async def read_verified(self, run_id: str, *, to_seq: int | None = None) -> list[Event]:
        """The run's events through ``to_seq`` from the store, their hash chain checked as
        they are read and against the heads its heads file recorded for them (as ``verify``
        does): CorruptLogError names the first bad seq and why, so a log rechained or cut
        after a head was recorded is refused although its own chain checks out."""
        assert self.store is not None
        events = await self.store.read_all(run_id, to_seq=to_seq, verify=True)
        try:
            missing = await self.heads.check(self.store, run_id, events, upto=to_seq)
        except OSError as exc:
            raise StoreError(f"cannot read the heads file: {exc}") from exc
        if missing is not None and events:
            raise CorruptLogError(run_id, *missing)
        return events

    async def read_state(
        self, run_id: str, *, to_seq: int | None = None
    ) -> tuple[RunState, list[Event], SnapshotRead]:
        """The fold of the run's log (through a snapshot where one matches), the events
        folded after it and what the read found of the run's snapshot; RunNotFoundError
        for a run without events."""
        if self.store is not None:
            state, events, snapshot = await load_state(
                self.store, run_id, to_seq=to_seq, observe=self._snapshot_read
            )
        else:
            events = await self.read_events(run_id, to_seq=to_seq)
            state, snapshot = fold(events), SnapshotRead(0, 0)
        if state.last_seq == 0:
            raise RunNotFoundError(run_id)
        return state, events, snapshot

    async def get_state(self, run_id: str, *, at_seq: int | None = None) -> RunState:
        """The run's state as the fold of its log, up to ``at_seq`` if given (see
        :meth:`runtime.Runtime.get_state`)."""
        if at_seq is not None and at_seq < 1:
            raise ValueError(f"at_seq must be 1 or more (seqs start at 1), got {at_seq}")
        state, _events, _snapshot = await self.read_state(run_id, to_seq=at_seq)
        if at_seq is not None and at_seq > state.last_seq:
            raise ValueError(f"at_seq {at_seq} is past the run's last event (seq {state.last_seq})")
        return state

    async def read_resumable(self, run_id: str) -> tuple[RunState, GraphSpec, SnapshotRead]:
        """What resuming ``run_id`` starts from: its state (an open fan-out included, read
        through its snapshot like the rest), its graph, and its snapshot as the read found
        it (for :meth:`reopen`). Raises RunNotFoundError, or RunChangedError (a
        RunStateError: "already completed") for a finished run, and CorruptLogError for a
        log that no longer holds a head its heads file recorded (checked at the seqs read,
        and the newest heads before and after them: :meth:`HeadsCache.check_read`), so a
        log rewritten while its run waited is not resumed, approved or rejected."""
        state, events, snapshot = await self.read_state(run_id)
        if state.status in FINAL:
            raise RunChangedError(run_id, state.status, "a finished run cannot be resumed")
        if state.graph is None:
            raise RunNotFoundError(run_id)
        if self.store is not None:
            try:
                missing = await self.heads.check_read(self.store, run_id, events, snapshot.seq + 1)
            except OSError as exc:
                raise StoreError(f"cannot read the heads file: {exc}") from exc
            if missing is not None:
                raise CorruptLogError(run_id, *missing)
        graph = graph_from_dict(state.graph, recorded=True)
        if state.graph_hash is not None and graph_hash(graph) != state.graph_hash:
            # The log holds the graph without its defaults (compact_graph_dict): fields or
            # defaults changed since the run started, and it goes on with today's reading.
            _log.warning(
                "run %s: its graph reads back with hash %s, not the recorded %s (the spec's "
                "fields or defaults changed since it started); it resumes as read now",
                run_id,
                graph_hash(graph),
                state.graph_hash,
            )
        return state, graph, snapshot
