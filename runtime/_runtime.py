"""The Python API: ``async with Runtime(store=...) as rt``."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import TYPE_CHECKING, Any

from actors import ActorSystem, MailboxConfig
from eventstore import Event, EventStore, open_store

from ._backend import check_backend
from ._config import OwnershipConfig, RecoveryConfig, TimeoutConfig
from ._errors import RunStateError
from ._handle import RunHandle
from ._node_factory import NodeFactory
from ._result import RunOutcome, RunResult
from .control._approvals import decide_gate, grant, reject
from .control._draining import claim_to_resume
from .control._handover import submit, submit_resume
from .control._launch import start_named, start_run
from .control._open import open_control
from .control._ownership import default_worker_id
from .control._regraph import replace_graph
from .control._resume import fork_here, resume_from_log
from .control._run_control import RunControl
from .control._watch import RunChange, watch_store
from .engine._runlog import CommitHook
from .events._state import RunState
from .events._values import check_input, check_run_id, check_seq, check_text
from .llm._tools import Tool, ToolRegistry
from .llm._verdict import JudgeProtocol
from .providers._base import LlmProvider
from .replay._driver import recorded_events, replay_run
from .replay._report import ReplayReport
from .spec._model import GraphSpec
from .spec._parallel import BranchStrategy
from .spec._validate import validate_graph

_log = logging.getLogger("magistrate.runtime")

if TYPE_CHECKING:
    from .observe._metrics import RuntimeMetrics  # prometheus_client: loaded by who makes metrics

__all__ = ["Runtime"]


class Runtime:
    """Runs graphs on an event store; one per application is enough.

    ``store`` is an EventStore, a store URL or SQLite file path (see
    :func:`eventstore.open_store`; opened and closed by the runtime), or None for an
    in-memory log with no durability.

    What nodes run with (held by its :class:`NodeFactory`, ``nodes``): ``functions`` maps
    names used in specs to callables (looked up before import paths); ``tools`` are what
    LLM nodes may call (each node offers those its ``tools`` names); ``judges`` maps names
    used in ``NodeSpec.judge`` to custom judges; ``provider`` serves LLM nodes, judges and
    llm_decide edges; ``providers`` names further providers a spec refers to by name
    (evaluators of ``llm_judge`` verifiers, judges of parallel branches);
    ``branch_strategies`` maps names used in ``NodeSpec.parallel.strategy`` to custom
    ``BranchStrategy`` objects. ``context_budget_tokens`` is the conversation size above
    which LLM nodes compact older turns; ``timeouts`` (:class:`TimeoutConfig`) bounds a
    node attempt, a tool call and a judge verdict.

    ``allow_imports`` lists the module prefixes from which a graph may import callables
    and judges by ``"package.module:attr"`` path (``["myapp.nodes"]`` allows
    ``myapp.nodes`` and ``myapp.nodes.*``). It is empty by default: a graph may then name
    only what is registered here (``functions``, ``tools``, ``judges``), so a graph file
    stays data. Listing a prefix makes every graph file this runtime runs code that may
    call whatever those modules define.

    ``hooks`` are called after every commit with (run_id, last seq, events). ``metrics``
    (a :class:`RuntimeMetrics`) counts what every run's events say, for Prometheus; runs
    also log under ``magistrate.runs``. ``mailbox`` configures the actors' mailboxes.

    Ownership (stores that record it, :class:`eventstore.ClaimingStore`: both built-in
    stores): every run executed here is claimed first, as ``ownership``
    (:class:`OwnershipConfig`) says, and a run whose claim is lost stops at once (its
    result raises LeaseLostError). With ``recovery`` (:class:`RecoveryConfig`) the runtime
    is a worker: it claims and resumes runs that are running with no live lease (a crashed
    process's, or submitted with :meth:`submit`).

    Closing (leaving ``async with``) always finishes: every run still live here is
    cancelled and a RunCancelled event recorded (reason "the runtime closed", with the run's
    resume point, so :meth:`resume` continues it); a node blocked in a thread is abandoned,
    and a run whose executor does not stop within a few seconds is stopped and its
    cancellation recorded from its committed log. Except in a worker (``recovery`` with
    a store that records ownership): its runs are handed over, not cancelled; their claims
    are released with nothing recorded, and another worker resumes them.
    """

    def __init__(
        self,
        store: EventStore | str | os.PathLike[str] | None = None,
        *,
        provider: LlmProvider | None = None,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        tools: ToolRegistry | Iterable[Tool] | None = None,
        judges: Mapping[str, JudgeProtocol] | None = None,
        providers: Mapping[str, LlmProvider] | None = None,
        branch_strategies: Mapping[str, BranchStrategy] | None = None,
        allow_imports: Sequence[str] = (),
        context_budget_tokens: int = 60_000,
        timeouts: TimeoutConfig | None = None,
        ownership: OwnershipConfig | None = None,
        recovery: RecoveryConfig | None = None,
        hooks: Sequence[CommitHook] = (),
        metrics: RuntimeMetrics | None = None,
        mailbox: MailboxConfig | None = None,
    ) -> None:
        self.nodes = NodeFactory(
            provider=provider,
            providers=providers,
            functions=functions,
            tools=tools,
            judges=judges,
            branch_strategies=branch_strategies,
            allow_imports=allow_imports,
            timeouts=timeouts,
            context_budget_tokens=context_budget_tokens,
        )
        self.ownership = ownership or OwnershipConfig()
        self.recovery = recovery
        self.worker_id = self.ownership.worker_id or default_worker_id()
        self.hooks = list(hooks)
        self.metrics = metrics
        self.store: EventStore | None = None
        self._store_arg = store
        self._mailbox = mailbox
        self._stack: AsyncExitStack | None = None
        self._control: RunControl | None = None

    async def __aenter__(self) -> Runtime:
        if self._stack is not None:  # open, or still opening (in another task)
            raise RunStateError("-", "open", "this Runtime is open already: make another")
        check_backend()
        stack = self._stack = AsyncExitStack()
        try:
            if isinstance(self._store_arg, (str, os.PathLike)):
                store = open_store(self._store_arg)
                await stack.enter_async_context(store)
                self.store = store
            else:
                self.store = self._store_arg
            self._control = await open_control(
                stack,
                self.store,
                hooks=self.hooks,
                metrics=self.metrics,
                mailbox=self._mailbox,
                worker_id=self.worker_id,
                ownership=self.ownership,
                recovery=self.recovery,
                continue_run=self._continue,
            )
        except BaseException:
            self._stack = None
            await stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        control = self._running  # not open: RunStateError
        assert self._stack is not None
        try:
            await control.closing.cancel_live_runs()
        finally:
            control.live.clear()
            stack, self._stack = self._stack, None
            try:
                await stack.__aexit__(*exc_info)
            finally:
                self._control = None  # used after this, it says it is closed

    @property
    def system(self) -> ActorSystem:
        return self._running.live.system

    @property
    def _running(self) -> RunControl:
        if self._control is None:
            raise RunStateError(
                "-", "closed", "the Runtime is not open: use it inside 'async with Runtime(...)'"
            )
        return self._control

    # ------------------------------------------------------------------ runs

    async def start(
        self,
        graph: GraphSpec,
        *,
        input: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> RunHandle:
        """Validate ``graph`` and start a run; return its handle once the run's start is
        committed.

        Blocks until the run's first events (``run.started`` and its entry node's start)
        are committed to the store, whatever the graph's durability, so any reader of the
        store (another process, the HTTP API) finds the run as soon as this returns; it
        does not wait for any node. Cancelling the call leaves the run going; a call
        cancelled while it waits for the store's room (backpressure: a new run waits there
        while the store's writer is full, before anything of it is made) starts nothing.
        Raises SpecErrors (before anything is written) for an invalid graph, or one naming
        a function, judge or tool that is neither registered nor an allowed import, or
        with LLM nodes and no provider; MemoryValueError for an input value the log cannot
        store unchanged; ValueError for a ``run_id`` no front could name (empty, a ``/``, a
        control character); RunStateError for a ``run_id`` already running in this runtime
        (or, without a store, held by it). A ``run_id`` already in the store is not taken
        over: the handle's result raises RunStateError and nothing runs.
        """
        validate_graph(graph)
        self.nodes.check(graph)
        check_input(input)
        check_run_id(run_id)
        control = self._running
        start = start_run if run_id is None else start_named  # one start of an id at a time
        return await start(control, self.nodes, self.metrics, graph, dict(input or {}), run_id)

    async def submit(
        self,
        graph: GraphSpec,
        *,
        input: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> str:
        """Record a run for any worker to execute (see ``magistrate worker``); return its id:
        the graph's structure is validated and the run's start recorded (status running,
        no owner); a runtime with ``recovery`` on the same store claims and runs it.
        Nothing runs here, and nothing the graph names is needed or imported here (no
        functions, tools, judges or provider): the worker that claims the run checks that
        it can execute it, and records ``run.unrunnable`` when it cannot. Raises SpecErrors
        for an invalid graph, ValueError for a ``run_id`` no front could name,
        RunStateError without a store that records ownership.
        """
        validate_graph(graph)
        check_input(input)
        check_run_id(run_id)
        return await submit(self._running, graph, dict(input or {}), run_id)

    async def submit_resume(self, run_id: str, *, input: Mapping[str, Any] | None = None) -> None:
        """Hand a paused run to any worker: record ``input`` and its resumption, for a
        runtime with ``recovery`` on the same store to claim and continue it (the
        paused nodes run without pausing again). Nothing runs here. Raises RunNotFoundError,
        RunStateError unless the run is paused, and without a store that records ownership.
        """
        await submit_resume(self._running, run_id, input)

    async def resume(
        self,
        run_id: str,
        *,
        input: Mapping[str, Any] | None = None,
        graph: GraphSpec | None = None,
        force: bool = False,
    ) -> RunHandle:
        """Resume a paused, cancelled or crashed run from its log, in this process.

        A completed node never runs again; a node that started and did not complete runs
        again. ``input`` is recorded just after ``run.resumed``. With ``graph``, the run
        moves to it (``graph.replaced``) if its replay against it diverges nowhere, or anyway
        with ``force`` (see :func:`runtime.control._regraph.replace_graph`). Raises
        RunNotFoundError; RunChangedError for a finished run ("already completed");
        RunStateError for one already running here, or one waiting at a gate (only
        :meth:`approve` passes it; a run cancelled there waits there again);
        GraphChangeRefused, recording nothing, when the replay diverged.
        """
        self._running.closing.check()  # before a graph.replaced is recorded
        if graph is not None:
            logs, replay = self._running.logs, self.replay
            await replace_graph(logs, self.nodes, replay, run_id, graph, force=force)
        return await self._resume_here(run_id, input, True)

    async def _resume_here(
        self, run_id: str, input: Mapping[str, Any] | None, gated: bool
    ) -> RunHandle:
        control = self._running
        async with control.acting_on(run_id):  # after an approval or resume under way
            if control.live.running_here(run_id):
                raise RunStateError(run_id, "running", "it is already running in this runtime")
            check_input(input)
            await control.ready_to_resume(run_id)  # an abandoned attempt here ends first
            ownership = control.ownership
            try:
                if ownership is not None and run_id not in ownership.claims:  # a fork's: taken
                    await claim_to_resume(ownership, control.logs, run_id)  # or draining there
                return await self._resume(run_id, input, gated=gated)
            except BaseException:  # the claim is given up, unless the run was launched
                if ownership is not None and not control.live.running_here(run_id):
                    await ownership.release(run_id)  # (a cancelled wait: the run goes on)
                raise

    async def _continue(self, run_id: str, outcome: RunOutcome | None) -> RunHandle:
        """Continue a run held here from its log (recovery, or another process appended)."""
        return await self._resume(run_id, None, outcome=outcome)

    async def approve(
        self,
        run_id: str,
        *,
        by: str,
        input: Mapping[str, Any] | None = None,
        expected_seq: int | None = None,
    ) -> RunHandle | None:
        """Approve the gate a paused run waits at (every front calls this): one
        ``approval.granted`` (``by``, ``input`` into memory, the node) at the pause's seq;
        then the run goes on here if this runtime can execute it (its handle), else it is
        left running for its owner or a worker (None). ``expected_seq``: the run's last seq
        as the approver saw it (a log not ending there: RunChangedError). Raises
        RunNotFoundError; RunStateError, recording nothing, for a run waiting at no gate (a
        cancelled one: resume it to wait at its gate again), a gated node lacking input
        keys (named), a run moved by another writer since the pause; MemoryValueError;
        TypeError or ValueError for a ``by`` naming nobody, an ``expected_seq`` not a seq."""
        check_text("by", by, required=True)
        check_input(input)
        check_seq("expected_seq", expected_seq)
        record = partial(grant, input=dict(input or {}), by=by, expected_seq=expected_seq)
        return await decide_gate(self._running, self.nodes, run_id, record, self._decided)

    async def reject(
        self, run_id: str, *, by: str, reason: str = "", expected_seq: int | None = None
    ) -> RunHandle | None:
        """Reject the gate a paused run waits at, for good (``approval.rejected``: who,
        why): the node's ``on_failure`` edges fire as :meth:`approve` goes on, else the run
        ends cancelled in the same append (None). Raises as :meth:`approve` does."""
        check_text("by", by, required=True)
        check_text("reason", reason)
        check_seq("expected_seq", expected_seq)
        record = partial(reject, by=by, reason=reason, expected_seq=expected_seq)
        return await decide_gate(self._running, self.nodes, run_id, record, self._decided)

    async def _decided(self, run_id: str, at_seq: int) -> RunHandle:
        """Continue a run from the gate decision at ``at_seq`` (see decide_gate)."""
        return await self._resume(run_id, None, at_seq=at_seq)

    async def _resume(
        self,
        run_id: str,
        input: Mapping[str, Any] | None,
        *,
        outcome: RunOutcome | None = None,
        gated: bool = True,
        at_seq: int | None = None,
    ) -> RunHandle:
        return await resume_from_log(
            self._running, self.nodes, self.metrics, run_id, input, outcome, gated, at_seq
        )

    async def fork(
        self, run_id: str, at_seq: int, *, input: Mapping[str, Any] | None = None
    ) -> RunHandle:
        """Start a new run from ``run_id``'s first ``at_seq`` events; return its handle.

        The new run's log is a copy of seqs 1..``at_seq`` (re-chained under the new id)
        followed by a ``run.forked`` event naming the source, its seq and its chain hash,
        written in one atomic batch and claimed for this runtime with it (no worker takes
        it first). It is then resumed here like a paused run, with ``input`` injected
        (recorded) first: a node started and not completed at ``at_seq`` runs again; a
        user's pause at ``at_seq`` is passed, while a pause node no approval in the copy
        opened waits at its gate in the fork (a fork never skips an approval). The source
        run is not touched. Raises RunNotFoundError, RunStateError when ``at_seq`` is
        outside the log, at or after the run's ``run.finished`` event, or inside what one
        append recorded (a node's writes, completion and edges; a fan-out's edges; a
        turn's results and outputs; a parallel round's selection and the winner's turns;
        a RETRY and its feedback: the message names the seq where it ends), CorruptLogError
        when the hash chain of seqs 1..``at_seq`` is broken or no longer holds a head the
        store's heads file recorded in them (a fork never launders an edit), and SpecErrors,
        writing nothing, for a graph this runtime cannot run; TypeError for an ``at_seq``
        that is not an int.
        """
        check_seq("at_seq", at_seq, below_one=True)  # outside the log: RunStateError
        resume = partial(self._resume_here, input=input, gated=False)
        return await fork_here(self._running, self.nodes.check, run_id, at_seq, resume)

    def watch_runs(
        self, *, after: int | None = None, every_event: bool = False
    ) -> AsyncIterator[RunChange]:
        """Every run's status changes (:class:`RunChange`; every event with ``every_event``)
        in the store's commit order, whichever process appends them, from the store's newest
        event (taken when iteration starts) or store position ``after``, until the store
        closes. Raises RunStateError without a store."""
        store = self._running.logs.store
        if store is None:
            raise RunStateError("-", "in memory", "watching runs needs an event store")
        return watch_store(store, after=after, every_event=every_event)

    async def result(self, run_id: str) -> RunResult:
        """The run's result: waits for a run live in this runtime, else reads the log."""
        return await self._running.result(run_id)

    async def pause(self, run_id: str) -> None:
        """Ask a running run to pause at its next node boundary (does not wait for it).

        A run live in another process (with a store that records ownership) is paused by
        appending RunPaused; its owner stops it within its control interval, and a node
        in flight there runs again when the run is resumed.
        """
        await self._running.pause(run_id)

    async def cancel(self, run_id: str, *, reason: str = "") -> None:
        """Cancel a run: a live one stops at once (partial outputs are flushed into memory);
        a paused one is marked cancelled. A live one whose graph has ended and whose goal is
        being scored is recorded finished as the graph ended it, unscored. Does not wait;
        ``result()`` tells when it stopped. TypeError or ValueError, recording nothing, for
        a ``reason`` that is not text.
        """
        check_text("reason", reason)
        await self._running.cancel(run_id, reason)

    async def inject_input(self, run_id: str, data: Mapping[str, Any]) -> None:
        """Merge ``data`` into the run's memory, recorded as an InputInjected event (a run
        live here has taken it once this returns: it is recorded before its walk ends).

        Raises MemoryValueError, recording nothing, for a value the log cannot store
        unchanged; RunChangedError, recording nothing, for a finished run or one whose goal
        is being scored (its graph has ended: the scorecard reads memory as it was)."""
        check_input(data, "data")
        await self._running.inject_input(run_id, dict(data))

    async def get_state(self, run_id: str, *, at_seq: int | None = None) -> RunState:
        """The run's state as the fold of its log, up to ``at_seq`` (time travel) if given.

        Reads the run's newest snapshot that still matches its log and folds only the
        events after it (see ``runtime.events._snapshots``); the result is the same without it.
        Raises RunNotFoundError, or ValueError for an ``at_seq`` below 1 (seqs start at 1)
        or past the run's last event.
        """
        check_seq("at_seq", at_seq)
        return await self._running.logs.get_state(run_id, at_seq=at_seq)

    async def read_events(self, run_id: str, *, to_seq: int | None = None) -> list[Event]:
        """The run's events in order (from the store, or the in-memory log), through
        ``to_seq`` if given (TypeError or ValueError for one that is not a seq)."""
        check_seq("to_seq", to_seq)
        return await self._running.logs.read_events(run_id, to_seq=to_seq)

    async def replay(
        self,
        run_id: str,
        graph: GraphSpec | None = None,
        *,
        rerun_functions: bool = False,
        allow_imports: Sequence[str] = (),
        rejudge: bool = False,
    ) -> ReplayReport:
        """Run ``run_id`` again from its start against ``graph`` (None: its recorded one) in
        memory, serving its recorded model answers (``rejudge``: judges asked again, live),
        tool results and function outputs (``rerun_functions``: run), deciding the rest
        again: what differs (docs/replay.md). Raises RunNotFoundError, CorruptLogError."""
        events = await recorded_events(self._running.logs, run_id)
        return await replay_run(
            events, graph, self.nodes, Runtime, rerun_functions, allow_imports, rejudge
        )
