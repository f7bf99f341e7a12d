"""The append side of one run's event log, shared by the executor and the run's nodes.

Its batches carry the run's snapshots: every ``SNAPSHOT_EVERY`` events, and with a pause
or end sooner when worth its bytes (``runtime.events._snapshots.worth_at_rest``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from time import perf_counter

import anyio
from anyio.lowlevel import checkpoint as _checkpoint

from actors import ActorError, settle
from eventstore import (
    AppendResult,
    ConcurrencyError,
    Event,
    EventBody,
    EventStore,
    LeaseLostError,
    SnapshotAfter,
    StoreError,
)

from ..events._new_state import new_state
from ..events._snapshots import SNAPSHOT_EVERY
from ..events._state import RunState, apply
from ._foreign import FailedBatch, Rebase
from ._intake import Intake
from ._log_hooks import CommitHook, CommitObserver, RunHooks
from ._log_snapshot import snapshot_due, untake

__all__ = ["CommitHook", "CommitObserver", "RunHooks", "RunLog", "Submission"]

#: A run log with a store keeps no in-memory log: its (never filled) stand-in.
_NO_EVENTS: list[EventBody] = []
#: An empty queue (never filled: a log queues into a list of its own, see RunLog.pending).
_NO_PENDING: list[EventBody] = []


class Submission:
    """The store's answer to a :meth:`RunLog.submit` batch (filled in by ``submit``): records
    a store failure, tells the observers of a commit, then calls a subclass's :meth:`on_done`
    (engine/_start_on_commit.py). One object per step for the cyclic GC, not two."""

    __slots__ = ("batch", "began", "expected", "log")

    #: Whether its last event is a node start a foreign pause may hold (_foreign.py); whether
    #: the batch records the run's end (its bodies staged), with a snapshot at rest when due.
    holds_starts = at_rest = False

    log: RunLog
    batch: list[EventBody]
    expected: int
    began: float

    def on_done(self, result: AppendResult | None, error: BaseException | None) -> None:
        """The batch committed (``result``) or failed (``error``); on the loop, never raises."""
        raise NotImplementedError

    def __call__(self, result: AppendResult | None, error: BaseException | None) -> None:
        log = self.log
        log.in_flight -= 1
        if type(error) is ConcurrencyError and log.spawn is not None:
            # Another process appended: its pause requests and input are taken in (_foreign.py).
            log.conflicted(self.batch, self.expected, error, self)
            return
        if log.rebase is not None:
            log.rebase.answered(result)  # committed after the conflict, or failed
            log.rebase_when_ready()
        if error is None:
            log.committed(result)
            observers = log.observers
            if observers:
                elapsed = perf_counter() - self.began
                for observer in observers:
                    observer(log.run_id, self.batch, elapsed)
        elif isinstance(error, StoreError) and log.failed is None:
            log.failed = error
        self.on_done(result, error)


class RunLog:
    """Numbers a run's events and appends them to the store in order.

    Every task of one run (the executor, its nodes, its branches) appends through this one
    object, so the log order is the order of the calls; sequence numbers are assigned when
    a batch is submitted, and the store commits batches in submission order. A batch that
    races a foreign writer fails with ConcurrencyError. ``store=None`` keeps the log in
    memory only (no durability).

    ``state`` is the run's live state: every body appended here is applied to it
    (:func:`apply`) when it is handed over, in log order, so it is the fold of the log
    written so far (a resume passes the fold of the stored log and continues with it).
    The executor decides from it, and a node reads its own part of it (an LLM node its
    visit, a parallel node its round in progress, an ``llm_judge`` verifier its recorded
    results, every node its output accumulator ``state.outputs``) instead of reading the
    log.
    """

    def __init__(
        self,
        run_id: str,
        store: EventStore | None,
        *,
        last_seq: int = 0,
        hooks: Sequence[CommitHook] = (),
        write_behind: int = 64,
        state: RunState | None = None,
        observers: Sequence[CommitObserver] = (),
    ) -> None:
        self.run_id = run_id
        self.state = new_state(run_id, last_seq) if state is None else state
        self.store = store
        #: The store's heads file, if it keeps one (eventstore.HeadsFile): see committed().
        self.heads = None if store is None else store.heads_file
        self.last_seq = last_seq
        self.write_behind = write_behind
        #: Bodies queued for the next commit: the shared empty list while none is (most
        #: of a run's life: one tracked list fewer per live run), never changed in place.
        self.pending: list[EventBody] = _NO_PENDING
        self.hooks = tuple(hooks)
        self.observers = tuple(observers)
        self.memory_events: list[EventBody] = [] if store is None else _NO_EVENTS  # in-memory log
        #: A snapshot of the live state goes with the first batch, whatever path it takes,
        #: once this many events were handed over since the last (see runtime.events._snapshots).
        self.snapshot_every = SNAPSHOT_EVERY
        self.snapshot_seq = self.state.last_seq
        #: Bytes of the run's last snapshot (0: none this log knows of): what one at rest replaces.
        self.snapshot_bytes = 0
        # The first store error of an append: the seqs numbered after it are wrong, so every
        # later append raises it too instead of landing on a head another writer moved.
        self.failed: BaseException | None = None
        #: The run's hooks into its runtime (None: none, no claims): a batch is never
        #: handed to the store unless ``holds()`` (the run's claim is still held here),
        #: else the log fails with LeaseLostError; ``drain``/``drained`` count its threads.
        self.run_hooks: RunHooks | None = None
        #: Batches handed to the store and not answered yet.
        self.in_flight = 0
        #: Input given for the run, its executor to record it (_intake.py); None: none yet.
        self.intake: Intake | None = None
        #: Starts a task (a runtime's, on a store other processes append to): then a
        #: batch that meets another process's pause requests or input takes them in and
        #: goes again (see _foreign.py); None: every conflict fails the log.
        self.spawn: Callable[..., object] | None = None
        #: The batches that met another process's pause requests or input, appended again once
        #: every batch in flight was answered (_foreign.py); none is handed over meanwhile.
        self.rebase: Rebase | None = None

    async def append(
        self,
        bodies: Sequence[EventBody],
        *,
        durable: bool = True,
        shield: bool = True,
        at_rest: bool = False,
    ) -> int:
        """Append ``bodies`` after everything appended before; return the last seq.

        ``durable=True`` (the default): the bodies, and any write-behind bodies queued
        before them, are committed as one atomic batch before this returns (it blocks on
        the store's group commit). ``durable=False`` queues them write-behind: they are
        committed with the next durable append, or once ``write_behind`` bodies are queued.
        Every appender goes through this one queue, so the log order is the call order.

        Raises the store's errors (ConcurrencyError when another writer got there first).
        A pending cancellation is taken on entry (appending nothing). Cancellation cannot
        interrupt a submitted batch: the commit is shielded (from an anyio scope, and from a
        native ``Task.cancel``, which is raised once the batch is taken in), so the caller
        learns how it ended and the hooks run. ``shield=False`` is for a caller cancelled
        only when the whole runtime stops (the executor): a cancellation then leaves the
        batch to the store, which still commits it, and the hooks are not called.
        ``at_rest=True``: the batch records the run's pause or end, and carries a snapshot
        of the state after it when worth its bytes (``worth_at_rest``: at least
        ``SNAPSHOT_AT_REST`` events since the last one, the state small beside them),
        committed in the batch's transaction (so before the caller reports a result).
        """
        if self.rebase is not None:
            with anyio.CancelScope(shield=shield):
                await self.rebase.done.wait()  # the batches before this one go first
        if self.failed is not None:
            raise self.failed
        if shield:
            # A node whose only awaits are appends (a set_output progress loop, a model
            # that answers at once) must still yield and take a cancellation: the shield
            # hides it during a commit, and the in-memory log never suspends at all. Taken
            # before anything is handed over, so a submitted batch is still answered.
            await _checkpoint()
        pending = self._queue(bodies)
        self._track(bodies, self.last_seq + len(pending) - len(bodies) + 1)
        self.state.last_seq = self.last_seq + len(pending)
        if not durable and len(pending) < self.write_behind:
            return self.last_seq + len(pending)
        # The commit itself, here rather than in flush(): one coroutine fewer per append.
        if not pending:
            return self.last_seq
        batch, self.pending = pending, _NO_PENDING
        expected = self.last_seq
        # The state is the fold of the log through this batch's last event.
        snapshot = None if self.store is None else self._snapshot(batch, len(batch), at_rest)
        self.last_seq += len(batch)
        began = elapsed = perf_counter()
        cancelled: BaseException | None = None  # the task's own, held during the commit
        if self.store is None:
            self.memory_events.extend(batch)
        else:
            if self.run_hooks is not None and not self.run_hooks.holds():
                self.failed = LeaseLostError(self.run_id, None, None, None)
                raise self.failed
            self.in_flight += 1
            try:
                if shield:
                    # Shielded: once submitted, a batch must be answered, or the next
                    # append's expected_seq would be wrong; a commit takes milliseconds.
                    # The anyio shield holds an anyio scope's cancellation; settle, the
                    # task's own (its deadline's Task.cancel goes through the shield),
                    # raised below once the batch is taken in.
                    with anyio.CancelScope(shield=True):
                        appending, cancelled = await settle(
                            self.store.append(
                                self.run_id, batch, expected_seq=expected, snapshot=snapshot
                            )
                        )
                    committed = appending.result()
                else:
                    committed = await self.store.append(
                        self.run_id, batch, expected_seq=expected, snapshot=snapshot
                    )
            except ConcurrencyError as exc:
                self.in_flight -= 1
                if self.spawn is None:
                    self.failed = exc
                    raise
                failed = self.conflicted(batch, expected, exc, None)
                with anyio.CancelScope(shield=True):  # answered once the log is rebased
                    assert failed.waiting is not None
                    await failed.waiting.wait()
                if failed.error is not None:
                    raise failed.error from None
            except StoreError as exc:
                self.in_flight -= 1
                self.failed = exc
                if self.rebase is not None:
                    self.rebase.answered(None)
                self.rebase_when_ready()
                raise
            except Exception:
                # Refused before it reached the store (a body it cannot encode): nothing
                # was written, so the next append goes at the same seq; this batch is lost.
                self.in_flight -= 1
                self.last_seq = expected
                self.rebase_when_ready()
                raise
            else:
                self.in_flight -= 1
                self.committed(committed)
                if self.rebase is not None:
                    self.rebase.answered(committed)  # committed after the conflict
                    self.rebase_when_ready()
            elapsed = perf_counter() - began
        for observer in self.observers:
            observer(self.run_id, batch, None if self.store is None else elapsed)
        for hook in self.hooks:
            result = hook(self.run_id, self.last_seq, batch)
            if result is not None:
                await result
        if cancelled is not None:
            raise cancelled
        return self.last_seq

    def _snapshot(
        self, batch: list[EventBody], events: int, at_rest: bool = False
    ) -> SnapshotAfter | None:
        """A snapshot of the live state after the first ``events`` of ``batch``, its taken
        event inserted after them, when due (_log_snapshot.py); it rides with the batch (the
        store saves it in the batch's transaction), so it costs no write and never waits.
        Due ``snapshot_every`` events after the last; at rest, sooner when worth it."""
        snapshot = snapshot_due(
            self.state,
            batch,
            events,
            at_rest,
            since_seq=self.snapshot_seq,
            every=self.snapshot_every,
            last_bytes=self.snapshot_bytes,
        )
        if snapshot is not None:
            self.snapshot_seq = self.state.last_seq
            self.snapshot_bytes = len(snapshot.data)
        return snapshot

    def stage(self, body: EventBody, then: EventBody | None = None) -> None:
        """Queue ``body`` (``then`` after it) for the next commit (any append's) and apply it now.

        For a caller that decides from the state before it commits (the executor, which
        commits one batch per step). Nothing is written until an append or submit.
        """
        pending = self.pending
        if pending is _NO_PENDING:
            pending = self.pending = [body]
        else:
            pending.append(body)
        seq = self.last_seq + len(pending)
        state = self.state
        apply(state, body, seq)
        if then is not None:  # a step's second body: one call for both
            pending.append(then)
            apply(state, then, seq := seq + 1)
        state.last_seq = seq

    def append_now(self, bodies: Sequence[EventBody]) -> bool:
        """:meth:`append`, durably, where nothing is to wait for (an in-memory log without
        commit hooks); False, doing nothing, elsewhere."""
        if self.store is not None or self.hooks or self.failed is not None:
            return False
        pending = self._queue(bodies)
        self._track(bodies, self.last_seq + len(pending) - len(bodies) + 1)
        batch, self.pending = pending, _NO_PENDING
        self.last_seq = self.state.last_seq = self.last_seq + len(batch)
        self.memory_events.extend(batch)
        for observer in self.observers:
            observer(self.run_id, batch, None)
        return True

    def _queue(self, bodies: Sequence[EventBody]) -> list[EventBody]:
        """The queue with ``bodies`` added: a list of its own once anything is queued."""
        pending = self.pending
        if pending is _NO_PENDING:
            if bodies:
                pending = self.pending = list(bodies)
        else:
            pending.extend(bodies)
        return pending

    def _requeue(self, batch: list[EventBody], queued: int) -> None:
        """Put back the first ``queued`` bodies of a batch the store did not take."""
        del batch[queued:]
        self.pending = batch if queued else _NO_PENDING

    def _track(self, bodies: Sequence[EventBody], first_seq: int) -> None:
        """Apply ``bodies``, the run's events ``first_seq``, ``first_seq + 1``, ..."""
        for seq, body in enumerate(bodies, first_seq):
            apply(self.state, body, seq)

    def submit(self, bodies: Sequence[EventBody], answer: Submission) -> bool:
        """A durable :meth:`append` that does not wait: ``answer`` runs at the end.

        For a caller with nothing to do until the commit (the executor starting a node):
        it is not woken for the commit, its continuation runs from the store's answer. The
        bodies (and any queued write-behind bodies) go in one batch, in call order with
        every other append, as with ``append``. ``answer.on_done(result, None)`` once
        committed, ``answer.on_done(None, error)`` if the batch failed; it runs on the event
        loop and must not raise. Returns False, doing nothing, where this cannot be done (no
        store, commit hooks to await, or a store whose queue is full): then use ``append``.
        """
        store = self.store
        if store is None or self.hooks or not (bodies or answer.at_rest) or self.failed:
            return False
        if self.rebase is not None:
            return False  # append waits for it
        if self.run_hooks is not None and not self.run_hooks.holds():
            return False  # append refuses it
        # The queue itself becomes the batch (no copy a step), handed over or put back.
        batch, queued = self.pending, len(self.pending)
        if batch is _NO_PENDING:
            batch = list(bodies)
        else:
            batch.extend(bodies)
        self.pending = _NO_PENDING
        # Before the bodies are applied: the state then ends with the queued bodies.
        snapshot_seq, state_seq = self.snapshot_seq, self.state.last_seq
        snapshot = self._snapshot(batch, queued, answer.at_rest)
        undo = snapshot is not None
        answer.log, answer.batch, answer.expected = self, batch, self.last_seq
        answer.began = perf_counter()
        try:
            handed = store.submit(
                self.run_id, batch, expected_seq=self.last_seq, on_done=answer, snapshot=snapshot
            )
        except StoreError as exc:  # a closed store: as append
            self._requeue(batch, queued)
            self.failed = exc
            raise
        except Exception:
            # Refused before it reached the store (a body it cannot encode), as append
            # does: nothing was written and this batch is lost, queued bodies included,
            # so the next append (the run's failure) goes at the same seq.
            self.snapshot_seq = snapshot_seq
            if undo:
                untake(self.state, state_seq)
            raise
        if not handed:
            # Due again with the next batch (its taken event was not handed over).
            self._requeue(batch, queued)
            self.snapshot_seq = snapshot_seq
            if undo:
                untake(self.state, state_seq)
            return False
        self.in_flight += 1
        last_seq = self.last_seq = self.last_seq + len(batch)
        self._track(bodies, last_seq - len(bodies) + 1)
        self.state.last_seq = last_seq
        return True

    def committed(self, result: AppendResult | None) -> None:
        """A batch of the run committed (``result``): its head goes to the store's heads file
        (eventstore.HeadsFile: a thread writes each moving run's newest head), if any."""
        heads = self.heads
        if heads is not None and result is not None:
            heads.record(self.run_id, result.last_seq, result.last_hash)

    def conflicted(
        self,
        batch: list[EventBody],
        expected: int,
        error: ConcurrencyError,
        submitted: Submission | None,
    ) -> FailedBatch:
        """``batch``, appended at ``expected``, met another writer's events: it waits for
        the rebase of the log (made by the first such batch), which runs once no batch
        of the run is in flight (_foreign.py); the rebase answers it."""
        if self.rebase is None:
            self.rebase = Rebase(self, error)
        failed = self.rebase.add(batch, expected, submitted)
        self.rebase_when_ready()
        return failed

    def rebase_when_ready(self) -> None:
        """Start the pending rebase if no batch of the run is in flight any more."""
        rebase = self.rebase
        if rebase is None or not rebase.ready():
            return
        try:
            assert self.spawn is not None
            self.spawn(rebase.run)
        except (ActorError, RuntimeError):
            rebase.give_up()  # the runtime's tasks are stopping: the conflict stands

    async def flush(self) -> int:
        """Commit every queued body as one batch (no-op when none); return the last seq."""
        return await self.append((), durable=True)

    def events(self, *, to_seq: int | None = None) -> list[Event]:
        """The in-memory log (``store=None``) as envelopes, for folding; no hash chain."""
        bodies = self.memory_events if to_seq is None else self.memory_events[:to_seq]
        return [
            Event(
                run_id=self.run_id,
                seq=i,
                position=i,
                ts=0.0,
                version=type(body).schema_version,
                prev_hash="",
                hash="",
                body=body,
            )
            for i, body in enumerate(bodies, start=1)
        ]
