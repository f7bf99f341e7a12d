"""Taking another process's pause requests and input into a live run's log without
stopping it.

A pause asked for from outside the run's owner is one ``run.pause_requested`` appended to
the run's log; input given there is one ``input.injected``. The owner's watch of the
store's heads may see them first (:func:`take_in_foreign`), or the owner's appends meet
them (ConcurrencyError): every batch of the run handed to the store after their seq fails
then, and the log is *rebased* (:class:`Rebase`): no batch is handed over meanwhile, and
once every batch in flight has been answered the failed ones are appended again, in their
order, as one batch after the foreign events, except the start of a node (its first
attempt, from the executor's non-waiting start) held by a pause: the executor is told
(:class:`StartHeld`) and holds that node, so the run pauses at the first node boundary
after the request was committed, the node running then finishing with its outputs kept,
as an in-process pause does.

Either way the live state is then *refolded* (:func:`refold`): the fold of the committed
log, and the bodies staged since applied after it; no seq the state records is moved by
hand. Input reaches memory so, as input given in-process does: the nodes that start after
it read it, those running go on. But a batch the owner decided before it saw the input
(a node's end and the edges it takes, a start and the inputs it read, the run's end) may
not go after it: so input is taken in only while everything the owner staged and every
failed batch is :data:`UNDECIDED` (a running node's own progress, other controls), and
only while the run's walk takes input (its intake is open: not while its goal is scored);
with input, the state is refolded before the failed batches go again, so that what the run
stages meanwhile reads it. Anything else another process appended (a cancel, an
approval), input met otherwise, or a batch that committed after the foreign events (its
numbers are wrong), is not taken in: the conflict stands and the runtime settles the run
from its log (its running nodes run again).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

import anyio

from eventstore import (
    AppendResult,
    ConcurrencyError,
    Event,
    EventBody,
    EventStore,
    SnapshotTaken,
    StoreError,
)

from ..events._catalogue import (
    ConversationCompacted,
    InputInjected,
    LlmTurn,
    MessageAdded,
    NodeStarted,
    OutputSet,
    PauseRequested,
    StallDetected,
    ToolResult,
    Verdict,
)
from ..events._snapshots import load_state
from ..events._state import RunState, apply
from ._intake import Intake

__all__ = ["UNDECIDED", "FailedBatch", "Rebase", "StartHeld", "refold", "take_in_foreign"]

#: What another process appends that the owner takes in without stopping the run.
TAKEN: frozenset[type[EventBody]] = frozenset({PauseRequested, InputInjected})
#: Events that decide nothing from the run's memory: a running node's own progress (made
#: from the inputs it started with) and the controls. Only these may go after input the
#: owner had not seen when it staged them.
UNDECIDED: frozenset[type[EventBody]] = frozenset(
    {
        OutputSet,
        LlmTurn,
        ToolResult,
        MessageAdded,
        ConversationCompacted,
        Verdict,
        StallDetected,
        *TAKEN,
    }
)


class RunLog(Protocol):
    """What this module reads and moves of a run's log (``_runlog.RunLog``)."""

    run_id: str
    store: EventStore | None
    state: RunState
    last_seq: int
    snapshot_seq: int
    in_flight: int
    failed: BaseException | None
    pending: list[EventBody]
    rebase: Rebase | None
    observers: tuple[Any, ...]
    intake: Intake | None

    def committed(self, result: AppendResult | None) -> None: ...


class StartHeld(Exception):
    """The answer to a node start's batch whose start a pause from another process held:
    the rest of the batch is committed, the node is not to run (the executor holds it)."""


def _inputs(events: Iterable[Event]) -> bool:
    return any(type(event.body) is InputInjected for event in events)


def _takes_input(log: RunLog, kept: Sequence[EventBody] = ()) -> bool:
    """Whether input appended by another process can go into ``log``'s run now: its walk
    takes input, and nothing it staged (nor ``kept``, failed batches to append again after
    the input) was decided without it."""
    intake = log.intake
    if intake is not None and intake.closed is not None:
        return False
    return all(type(body) in UNDECIDED for body in (*kept, *log.pending))


async def _foreign_after(log: RunLog, seq: int) -> list[Event] | None:
    """The run's committed events after ``seq`` if they are all pause requests or input
    (or there are none), else None."""
    assert log.store is not None
    events = [event async for event in log.store.read(log.run_id, from_seq=seq + 1)]
    if not all(type(event.body) in TAKEN for event in events):
        return None
    return events


async def refold(
    log: RunLog,
    through: int,
    *,
    unchanged: int | None = None,
    inputs: bool = False,
    kept: Sequence[EventBody] = (),
) -> bool:
    """Make the live state the fold of the committed log through seq ``through`` (read
    through its snapshot), with ``kept`` (bodies about to be appended after it) and the
    bodies staged since (``log.pending``) applied after it; the state object stays the
    same (the executor and the nodes hold it). ``unchanged``: only if the log still ends
    at that seq with nothing in flight once the read is done (else False, nothing changed:
    a batch handed over meanwhile meets the foreign events, and the rebase that follows
    refolds). ``inputs``: the foreign events hold input, taken in only if the run takes
    it once the read is done (else False, nothing changed)."""
    assert log.store is not None
    folded, _events, _snapshot = await load_state(log.store, log.run_id, to_seq=through)
    if unchanged is not None and (
        log.last_seq != unchanged or log.in_flight or log.rebase is not None
    ):
        return False
    if inputs and not _takes_input(log, kept):
        return False
    seq = folded.last_seq
    for body in (*kept, *log.pending):
        seq += 1
        apply(folded, body, seq)
    folded.last_seq = seq
    state = log.state
    for field in state.__struct_fields__:
        setattr(state, field, getattr(folded, field))
    log.last_seq = through + len(kept)
    log.snapshot_seq = min(log.snapshot_seq, through)
    return True


async def take_in_foreign(log: RunLog) -> Literal["taken", "busy", "other"]:
    """Another process appended to the run (its head in the store is past this log's):
    take its pause requests and input in now, before the owner's next append meets them.
    "busy": a batch is in flight, or input waits for what the run staged (its answer, or
    the next look, decides); "other": something else was appended, or input the run
    cannot take now, the run must be settled from its log."""
    if log.failed is not None:
        return "other"
    if log.in_flight or log.store is None or log.rebase is not None:
        return "busy"
    at = log.last_seq
    events = await _foreign_after(log, at)
    if log.in_flight or log.last_seq != at or log.rebase is not None:
        return "busy"  # appended meanwhile: looked at again later
    if events is None:
        return "other"
    if not events:
        return "busy"
    inputs = _inputs(events)
    if inputs and not _takes_input(log):
        return "other"
    through = at + len(events)
    return "taken" if await refold(log, through, unchanged=at, inputs=inputs) else "busy"


class FailedBatch:
    """A batch that met another writer's events, and how to answer it: ``submitted``
    (a non-waiting batch's answer, ``_runlog.Submission``) or the waiting appender's slot."""

    __slots__ = ("batch", "error", "expected", "held", "kept", "submitted", "waiting")

    def __init__(self, batch: list[EventBody], expected: int, submitted: Any) -> None:
        self.batch = batch
        self.kept = batch
        self.expected = expected
        self.submitted = submitted
        self.waiting = anyio.Event() if submitted is None else None
        self.error: BaseException | None = None
        self.held = False


class Rebase:
    """The failed batches of one conflict, appended again after the foreign pause
    requests once no batch of the run is in flight (see the module docstring)."""

    def __init__(self, log: RunLog, error: ConcurrencyError) -> None:
        self.log = log
        self.error: BaseException = error
        self.failed: list[FailedBatch] = []
        self.broken = False  # a batch of the run failed otherwise: the conflict stands
        #: The seqs of batches that committed after the conflict anyway (their expected
        #: seq was the head the foreign events made): they stay where they landed.
        self.landed: set[int] = set()
        self.started = False
        self.done = anyio.Event()

    def add(self, batch: list[EventBody], expected: int, submitted: Any) -> FailedBatch:
        failed = FailedBatch(batch, expected, submitted)
        self.failed.append(failed)
        return failed

    def answered(self, result: AppendResult | None) -> None:
        """Another batch of the run was answered while this waits: committed where it
        landed (``result``), or failed (None)."""
        if result is None:
            self.broken = True
        else:
            self.landed.update(range(result.first_seq, result.last_seq + 1))

    def ready(self) -> bool:
        """Whether it can run now (every batch of the run answered); marks it started."""
        if self.started or self.log.in_flight:
            return False
        self.started = True
        return True

    def _kept(self, failed: FailedBatch) -> list[EventBody]:
        """What of ``failed`` is appended again: not its snapshot (the state it holds is
        renumbered), nor a first start the pause holds (a non-waiting start's)."""
        bodies = [b for b in failed.batch if type(b) is not SnapshotTaken]
        start = bodies[-1] if bodies else None
        holds = getattr(failed.submitted, "holds_starts", False)
        if type(start) is NodeStarted and start.attempt == 1 and holds:
            failed.held = True
            bodies.pop()
        failed.kept = bodies
        return bodies

    async def _head_after(self, first: int) -> tuple[int, bool] | None:
        """The run's head, and whether input came, if what follows ``first`` in the log is
        pause requests and input (one at least) and this log's batches that landed
        meanwhile; else None."""
        log = self.log
        assert log.store is not None
        events = [event async for event in log.store.read(log.run_id, from_seq=first + 1)]
        foreign = [event for event in events if event.seq not in self.landed]
        if not foreign or not all(type(event.body) in TAKEN for event in foreign):
            return None
        return events[-1].seq, _inputs(foreign)

    async def run(self) -> None:
        """Append the failed batches again after the foreign events, refold the state,
        and answer each batch (their failure, if the conflict stands)."""
        log = self.log
        result: AppendResult | None = None
        failure: BaseException | None = self.error
        with anyio.CancelScope(shield=True):
            try:
                failed = sorted(self.failed, key=lambda f: f.expected)
                first = failed[0].expected
                for _ in range(5):  # each try takes in what was appended since the last
                    found = None if self.broken else await self._head_after(first)
                    if found is None:
                        break
                    head, inputs = found
                    bodies = [body for f in failed for body in self._kept(f)]
                    # Input reaches the state before the batches go again (what the run
                    # stages meanwhile reads it), if nothing kept or staged was decided
                    # without it; else the conflict stands.
                    if inputs and not await refold(log, head, inputs=True, kept=bodies):
                        break
                    assert log.store is not None
                    try:
                        through = head
                        if bodies:
                            result = await log.store.append(log.run_id, bodies, expected_seq=head)
                            through = result.last_seq
                        await refold(log, through)
                        failure = None
                        break
                    except ConcurrencyError as exc:
                        failure = exc
                    except StoreError as exc:
                        failure = exc
                        break
            except Exception as exc:  # a read that failed: the conflict stands
                failure = exc
            finally:
                if failure is not None and log.failed is None:
                    log.failed = failure
                if failure is None:
                    log.committed(result)
                log.rebase = None
                self._answer(failed, result, failure)
                self.done.set()

    def give_up(self) -> None:
        """Answer every batch with the conflict (the rebase cannot run)."""
        log = self.log
        if log.failed is None:
            log.failed = self.error
        log.rebase = None
        self._answer(self.failed, None, self.error)
        self.done.set()

    def _answer(
        self, failed: list[FailedBatch], result: AppendResult | None, failure: BaseException | None
    ) -> None:
        log = self.log
        for f in failed:
            error: BaseException | None = failure
            if error is None and f.held:
                error = StartHeld()
            if f.submitted is not None:
                if failure is None and f.kept:
                    for observer in log.observers:  # what of it was committed
                        observer(log.run_id, f.kept, None)
                f.submitted.on_done(result, error)
            else:
                f.error = error
                assert f.waiting is not None
                f.waiting.set()
