"""The Python API: ``async with Runtime(store=...) as rt``."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from actors import ActorRef, ActorSystem, MailboxConfig
from eventstore import (
    ClaimingStore,
    ConcurrencyError,
    Event,
    EventBody,
    EventStore,
    open_store,
)

from ._errors import RunNotFoundError, RunStateError
from ._fork import copy_prefix
from ._node_runners import NodeRunners
from ._ownership import OwnedOutcome, RunOwnership, default_worker_id
from ._result import RunOutcome, RunResult
from ._run_control import FINAL, RunControl, result_from_state
from .engine._executor import ExecutorActor
from .engine._function_node import PlainFunction
from .engine._messages import CancelRun, InjectInput, PauseRun, StartRun
from .engine._runlog import CommitHook, CommitObserver, RunLog
from .events._catalogue import InputInjected, RunResumed, RunStarted
from .events._snapshots import load_state
from .events._state import RunState, fold
from .events._values import check_input
from .llm._goals import score_goal
from .llm._judge import JudgeProtocol
from .llm._tools import Tool, ToolRegistry
from .observe._logging import log_run_events
from .providers._base import LlmProvider
from .spec._load import graph_from_dict
from .spec._model import GraphSpec, graph_hash, shared_graph_dict
from .spec._parallel import BranchStrategy
from .spec._validate import validate_graph

_log = logging.getLogger("magistrate.runtime")

if TYPE_CHECKING:
    from .observe._metrics import RuntimeMetrics  # prometheus_client: loaded by who makes metrics

__all__ = ["RunHandle", "Runtime"]


class RunHandle:
    """A started (or resumed) run in this process."""

    def __init__(self, runtime: Runtime, run_id: str, outcome: RunOutcome) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self._outcome = outcome

    async def result(self) -> RunResult:
        """Wait until the run completes, fails, pauses or is cancelled; return its result.

        Raises whatever stopped the executor itself (a store error, for instance).
        Cancelling the wait does not affect the run.
        """
        return await self._outcome.wait()


class Runtime(RunControl, NodeRunners):
    """Runs graphs on an event store; one per application is enough.

    ``store`` is an EventStore, a store URL or SQLite file path (see
    :func:`eventstore.open_store`; opened and closed by the runtime), or None for an
    in-memory log with no durability. ``functions`` maps names used in specs to callables
    (looked up before import paths). ``provider`` is the LLM provider for LLM nodes,
    judges and llm_decide edges. ``hooks`` are called after every
    commit with (run_id, last seq, events). ``metrics`` (a :class:`RuntimeMetrics`) counts
    what every run's events say, for Prometheus; runs also log under ``magistrate.runs``.
    ``tools`` are what LLM nodes may call (each node offers those its ``tools`` names);
    ``judges`` maps names used in ``NodeSpec.judge`` to custom judges;
    ``context_budget_tokens`` is the conversation size above which LLM nodes compact
    older turns; ``judge_timeout`` (seconds) bounds each judge verdict of an LLM node (a
    judge that does not answer in time gets the judge-failure verdict).

    ``allow_imports`` lists the module prefixes from which a graph may import callables
    and judges by ``"package.module:attr"`` path (``["myapp.nodes"]`` allows
    ``myapp.nodes`` and ``myapp.nodes.*``). It is empty by default: a graph may then name
    only what is registered here (``functions``, ``tools``, ``judges``), so a graph file
    stays data. Listing a prefix makes every graph file this runtime runs code that may
    call whatever those modules define.

    ``node_timeout`` and ``tool_timeout`` (seconds, None for no limit) bound one attempt
    of a node and one tool call where the spec sets no ``timeout`` / ``tool_timeout``:
    a node past its limit fails with NodeTimeoutError, one whose tool call is past its
    limit with ToolTimeoutError (retry policy and on_failure edges apply), and a
    blocking ``def`` is abandoned in its worker thread.

    Ownership (stores that record it, :class:`eventstore.ClaimingStore`: both built-in
    stores): every run executed here is claimed first as ``worker_id`` (default
    ``host:pid:random``) with a lease of ``lease_seconds``, renewed at a third of that while
    the run is live; a run whose claim is lost stops at once (its result raises
    LeaseLostError). Other processes' cancel, pause and input reach a run live here within
    ``control_interval`` seconds. With ``recover=True`` the runtime claims and resumes, at
    start and every ``recover_interval`` seconds, runs that are running with no live lease
    (a crashed process's, or submitted with :meth:`submit`), up to ``concurrency`` live runs.

    Closing (leaving ``async with``) always finishes: every run still live here is
    cancelled and a RunCancelled event recorded (reason "the runtime closed", with the run's
    resume point, so :meth:`resume` continues it); a node blocked in a thread is abandoned,
    and a run whose executor does not stop within a few seconds is stopped and its
    cancellation recorded from its committed log. Except in a worker (``recover=True`` with
    a store that records ownership): its runs are handed over, not cancelled; their claims
    are released with nothing recorded, and another worker resumes them.

    ``providers`` names further providers (evaluators of ``llm_judge`` verifiers, judges
    of parallel branches); a spec refers to them by name. ``branch_strategies`` maps names
    used in ``NodeSpec.parallel.strategy`` to custom strategy objects (``BranchStrategy``).
    """

    def __init__(
        self,
        store: EventStore | str | os.PathLike[str] | None = None,
        *,
        provider: LlmProvider | None = None,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        hooks: Sequence[CommitHook] = (),
        mailbox: MailboxConfig | None = None,
        tools: ToolRegistry | Iterable[Tool] | None = None,
        judges: Mapping[str, JudgeProtocol] | None = None,
        context_budget_tokens: int = 60_000,
        judge_timeout: float = 300.0,
        allow_imports: Sequence[str] = (),
        node_timeout: float | None = 600.0,
        tool_timeout: float | None = 120.0,
        worker_id: str | None = None,
        recover: bool = False,
        lease_seconds: float = 15.0,
        control_interval: float = 0.25,
        recover_interval: float | None = None,
        concurrency: int = 100,
        providers: Mapping[str, LlmProvider] | None = None,
        branch_strategies: Mapping[str, BranchStrategy] | None = None,
        metrics: RuntimeMetrics | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.worker_id = worker_id or default_worker_id()
        self.recover = recover
        self.lease_seconds = lease_seconds
        self.control_interval = control_interval
        self.recover_interval = recover_interval or lease_seconds / 2
        self.concurrency = concurrency
        self._ownership: RunOwnership | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._store_arg = store
        self.providers: dict[str, LlmProvider] = dict(providers or {})
        self.branch_strategies: dict[str, BranchStrategy] = dict(branch_strategies or {})
        self.store: EventStore | None = None
        self.provider = provider
        self.functions: dict[str, Callable[..., Any]] = dict(functions or {})
        self.hooks = list(hooks)
        self.metrics = metrics
        self.observers: list[CommitObserver] = [log_run_events]
        if metrics is not None:
            self.observers.append(metrics.observe)
        self._mailbox = mailbox
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools or ())
        self.judges: dict[str, JudgeProtocol] = dict(judges or {})
        if isinstance(allow_imports, str):
            raise TypeError("allow_imports is a sequence of module prefixes, not one string")
        self.allow_imports: tuple[str, ...] = tuple(allow_imports)
        self.node_timeout = node_timeout
        self.tool_timeout = tool_timeout
        # The registered judges plus those imported (under allow_imports) by started graphs.
        self._judge_map: dict[str, JudgeProtocol] = dict(self.judges)
        self.context_budget_tokens = context_budget_tokens
        self.judge_timeout = judge_timeout
        self._stack: AsyncExitStack | None = None
        self._system: ActorSystem | None = None
        self._live: dict[str, tuple[ActorRef, RunOutcome, RunLog]] = {}
        self._unstopped: list[tuple[str, RunOutcome]] = []

        self._memory_logs: dict[str, RunLog] = {}
        self._plain_cache: dict[str, PlainFunction] = {}

    async def __aenter__(self) -> Runtime:
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            if isinstance(self._store_arg, (str, os.PathLike)):
                store = open_store(self._store_arg)
                await stack.enter_async_context(store)
                self.store = store
            else:
                self.store = self._store_arg
            if self.metrics is not None and self.store is not None:
                self.metrics.watch_store(self.store)
            if isinstance(self.store, ClaimingStore):
                self._ownership = RunOwnership(
                    self.store,
                    self.worker_id,
                    lease=self.lease_seconds,
                    control_interval=self.control_interval,
                    recover_interval=self.recover_interval,
                )
                # Runs out first: claims are given up once the actor system has stopped.
                stack.push_async_callback(self._release_all)
            # Runs once the actor system has stopped (see _cancel_live_runs).
            stack.push_async_callback(self._record_unstopped)
            self._system = await stack.enter_async_context(
                ActorSystem(default_mailbox=self._mailbox)
            )
            if self._ownership is not None:
                await self._start_ownership(stack, self._ownership)
            elif self.store is not None:
                # Settles a run whose append met another process's events (see _settle).
                await self._open_tasks(stack)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def _open_tasks(self, stack: AsyncExitStack) -> anyio.abc.TaskGroup:
        """The runtime's own background tasks, cancelled when the runtime closes."""
        tasks = anyio.create_task_group()
        await tasks.__aenter__()

        async def stop_tasks() -> None:
            # Not given the block's exception: an error raised inside ``async with
            # Runtime(...)`` reaches the caller as itself, not wrapped in a group.
            tasks.cancel_scope.cancel()
            await tasks.__aexit__(None, None, None)

        stack.push_async_callback(stop_tasks)
        self._tasks = tasks
        return tasks

    async def _start_ownership(self, stack: AsyncExitStack, ownership: RunOwnership) -> None:
        tasks = await self._open_tasks(stack)
        tasks.start_soon(ownership.keep_leases, self._on_lease_lost)
        tasks.start_soon(ownership.watch_control, self._heads, self._on_foreign_events)
        if self.recover:
            tasks.start_soon(ownership.recover, self._room, self._resume_claimed)

    async def _release_all(self) -> None:
        if self._ownership is not None:
            for run_id in list(self._ownership.claims):
                await self._ownership.release(run_id)

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._stack is not None
        try:
            await self._cancel_live_runs()
        finally:
            self._live.clear()
            await self._stack.__aexit__(*exc_info)
            self._stack = None

    @property
    def system(self) -> ActorSystem:
        if self._system is None:
            raise RunStateError("-", "closed", "use 'async with Runtime(...) as rt' first")
        return self._system

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
        does not wait for any node. Cancelling the call leaves the run going.

        Raises SpecErrors (before anything is written) for an invalid graph, or one naming
        a function, judge or tool that is neither registered nor an allowed import, or
        with LLM nodes and no provider; MemoryValueError for an input value the log cannot
        store unchanged; RunStateError for a ``run_id`` already running in this runtime.
        """
        validate_graph(graph)
        self._check_graph(graph)
        check_input(input)
        if run_id is not None and self._running_here(run_id):
            raise RunStateError(run_id, "running", "it is already running in this runtime")
        if self._ownership is not None:
            run_id = await self._ownership.claim_start(run_id, durable=graph.durability == "sync")
        run_id = run_id or uuid.uuid4().hex
        started = anyio.Event()

        def committed(_run_id: str, _bodies: Sequence[EventBody], _elapsed: float | None) -> None:
            started.set()

        log = RunLog(run_id, self.store, hooks=self.hooks, observers=(*self.observers, committed))
        handle = await self._launch(run_id, graph, log, input=dict(input or {}), started=started)
        await started.wait()
        return handle

    async def submit(
        self,
        graph: GraphSpec,
        *,
        input: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> str:
        """Record a run for any worker to execute (see ``magistrate worker``); return its id.

        The run is validated and its start recorded (status running, no owner); a runtime
        with ``recover=True`` on the same store claims and runs it. Nothing runs here.
        Raises SpecErrors for an invalid graph, RunStateError without a store that records
        ownership.
        """
        validate_graph(graph)
        self._check_graph(graph)
        check_input(input)
        if self.store is None or self._ownership is None:
            raise RunStateError("-", "no store", "submit needs a store that records ownership")
        run_id = run_id or uuid.uuid4().hex
        started = RunStarted(
            graph=shared_graph_dict(graph),
            graph_hash=graph_hash(graph),
            entry=graph.entry_node,
            goal=None if graph.goal is None else msgspec.to_builtins(graph.goal),
            input=dict(input or {}),
        )
        await self.store.append(run_id, [started], expected_seq=0)
        return run_id

    async def submit_resume(self, run_id: str, *, input: Mapping[str, Any] | None = None) -> None:
        """Hand a paused run to any worker: record ``input`` and its resumption, for a
        runtime with ``recover=True`` on the same store to claim and continue it (the
        paused nodes run without pausing again). Nothing runs here. Raises RunNotFoundError,
        RunStateError unless the run is paused, and without a store that records ownership.
        """
        if self.store is None or self._ownership is None:
            raise RunStateError(run_id, "-", "submit_resume needs a store that records ownership")
        for _ in range(50):
            state = await self.get_state(run_id)
            if state.status != "paused":
                raise RunStateError(run_id, state.status, "only a paused run can be handed on")
            bodies: list[EventBody] = [InputInjected(data=dict(input))] if input else []
            bodies.append(RunResumed(note="handed to any worker"))
            try:
                await self.store.append(run_id, bodies, expected_seq=state.last_seq)
                return
            except ConcurrencyError:
                await anyio.sleep(0.01)  # appended to meanwhile: read again
        raise RunStateError(run_id, "paused", "could not hand it on: the run kept moving")

    async def resume(self, run_id: str, *, input: Mapping[str, Any] | None = None) -> RunHandle:
        """Resume a paused, cancelled or crashed run from its log, in this process.

        A completed node never runs again; a node that started and did not complete runs
        again. ``input`` is injected (recorded) first. Raises RunNotFoundError, or
        RunStateError for a finished run or one already running here.
        """
        if self._running_here(run_id):
            raise RunStateError(run_id, "running", "it is already running in this runtime")
        check_input(input)
        ownership = self._ownership
        if ownership is None or run_id in ownership.claims:
            return await self._resume(run_id, input)
        await ownership.claim(run_id)  # RunOwnedError if it is live elsewhere
        try:
            return await self._resume(run_id, input)
        except BaseException:
            await ownership.release(run_id)
            raise

    async def _resume(
        self,
        run_id: str,
        input: Mapping[str, Any] | None,
        *,
        outcome: RunOutcome | None = None,
    ) -> RunHandle:
        state, _events = await self._read_state(run_id)
        if state.status in FINAL:
            raise RunStateError(run_id, state.status, "a finished run cannot be resumed")
        if state.graph is None:
            raise RunNotFoundError(run_id)
        graph = graph_from_dict(state.graph)
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
        self._check_graph(graph)
        log = self._memory_logs.get(run_id) or RunLog(
            run_id, self.store, last_seq=state.last_seq, hooks=self.hooks, observers=self.observers
        )
        return await self._launch(
            run_id,
            graph,
            log,
            resume_from=state,
            resume_input=dict(input or {}) or None,
            outcome=outcome,
        )

    async def fork(
        self, run_id: str, at_seq: int, *, input: Mapping[str, Any] | None = None
    ) -> RunHandle:
        """Start a new run from ``run_id``'s first ``at_seq`` events; return its handle.

        The new run's log is a copy of seqs 1..``at_seq`` (re-chained under the new id)
        followed by a ``run.forked`` event naming the source, its seq and its chain hash;
        the copy is written in one atomic batch. The new run is then resumed here like a
        paused run, with ``input`` injected (recorded) first: a node that had started and
        not completed at ``at_seq`` runs again; a pause at ``at_seq`` is passed (the fork
        answers it), while a pause node due at ``at_seq`` that had not paused yet pauses
        the fork (a fork never skips an approval). The source
        run is not touched. Raises RunNotFoundError, or RunStateError when ``at_seq`` is
        outside the log, at or after the run's ``run.finished`` event, or between a node's
        ``node.completed`` and the ``edge.taken`` that follows it.
        """
        new_id = await copy_prefix(self, run_id, at_seq)
        return await self.resume(new_id, input=input)

    async def _launch(
        self,
        run_id: str,
        graph: GraphSpec,
        log: RunLog,
        *,
        input: dict[str, Any] | None = None,
        resume_from: RunState | None = None,
        resume_input: dict[str, Any] | None = None,
        outcome: RunOutcome | None = None,
        started: anyio.Event | None = None,
    ) -> RunHandle:
        """Spawn the run's executor. ``started`` (from :meth:`start`) is set once the run
        stopped or met a conflict, in case its first commit never came."""

        def forget() -> None:
            if started is not None:
                started.set()
            # A stopped run is read back from the log; keep no reference to it here.
            live = self._live.get(run_id)
            if live is not None and live[1] is outcome:
                del self._live[run_id]
                if self._ownership is not None and self._tasks is not None:
                    self._ownership.release_soon(run_id, self._tasks)

        if outcome is None:
            if self.store is None:
                outcome = RunOutcome(on_done=forget)
            else:
                # A store another process may append to: a run whose append meets that
                # process's events (ConcurrencyError) stops and obeys its log (_settle).
                def conflict(error: BaseException) -> None:
                    if started is not None:
                        started.set()
                    self._settle_soon(run_id, error)

                outcome = OwnedOutcome(forget, conflict)
        elif isinstance(outcome, OwnedOutcome):
            outcome.holding = False
        if self.metrics is not None:
            self.metrics.run_launched(run_id, graph)
        executor = ExecutorActor(
            run_id=run_id,
            graph=graph,
            log=log,
            node_factory=self._make_node,
            provider=self.provider,
            outcome=outcome,
            input=input,
            resume_from=resume_from,
            resume_input=resume_input,
            score_goal=partial(score_goal, providers=self.provider_named),
        )
        ref = self.system.spawn(executor, name=f"run:{run_id}")
        self._live[run_id] = (ref, outcome, log)
        if self.store is None:
            self._memory_logs[run_id] = log
        await ref.tell(StartRun())
        return RunHandle(self, run_id, outcome)

    async def result(self, run_id: str) -> RunResult:
        """The run's result: waits for a run live in this runtime, else reads the log."""
        live = self._live.get(run_id)
        if live is not None:
            return await live[1].wait()
        state = await self.get_state(run_id)
        return result_from_state(state)

    async def pause(self, run_id: str) -> None:
        """Ask a running run to pause at its next node boundary (does not wait for it).

        A run live in another process (with a store that records ownership) is paused by
        appending RunPaused; its owner stops it within its control interval, and a node
        in flight there runs again when the run is resumed.
        """
        live = self._live.get(run_id)
        if (live is None or live[1].done) and self._ownership is not None:
            await self._control_elsewhere(run_id, "pause")
            return
        if live is None or live[1].done:
            # As a store's runtime answers (RunNotFoundError for a run it never saw).
            state = await self.get_state(run_id)
            raise RunStateError(run_id, state.status, "only a running run can pause")
        await live[0].tell(PauseRun())

    async def cancel(self, run_id: str, *, reason: str = "") -> None:
        """Cancel a run: a live one stops at once (partial outputs are flushed into memory);
        a paused one is marked cancelled. A live one whose graph has ended and whose goal is
        being scored is recorded finished as the graph ended it, unscored. Does not wait;
        ``result()`` tells when it stopped.
        """
        live = self._live.get(run_id)
        if live is not None and not live[1].done:
            await live[0].tell(CancelRun(reason=reason))
            return
        await self._control_elsewhere(run_id, "cancel", reason=reason)

    async def inject_input(self, run_id: str, data: Mapping[str, Any]) -> None:
        """Merge ``data`` into the run's memory, recorded as an InputInjected event.

        Raises MemoryValueError, recording nothing, for a value the log cannot store
        unchanged."""
        check_input(data, "data")
        live = self._live.get(run_id)
        if live is not None and not live[1].done:
            await live[0].tell(InjectInput(data=dict(data)))
            return
        await self._control_elsewhere(run_id, "inject", data=dict(data))

    async def get_state(self, run_id: str, *, at_seq: int | None = None) -> RunState:
        """The run's state as the fold of its log, up to ``at_seq`` (time travel) if given.

        Reads the run's newest snapshot that still matches its log and folds only the
        events after it (see ``runtime.events._snapshots``); the result is the same without it.
        Raises RunNotFoundError, or ValueError for an ``at_seq`` below 1 (seqs start at 1)
        or past the run's last event.
        """
        if at_seq is not None and at_seq < 1:
            raise ValueError(f"at_seq must be 1 or more (seqs start at 1), got {at_seq}")
        state, _events = await self._read_state(run_id, to_seq=at_seq)
        if at_seq is not None and at_seq > state.last_seq:
            raise ValueError(f"at_seq {at_seq} is past the run's last event (seq {state.last_seq})")
        return state

    async def _read_state(
        self, run_id: str, *, to_seq: int | None = None
    ) -> tuple[RunState, list[Event]]:
        """The fold of the run's log (through a snapshot where one matches) and the events
        folded after it; RunNotFoundError for a run without events."""
        if self.store is not None:
            observe = None if self.metrics is None else self.metrics.snapshot_read
            state, events = await load_state(self.store, run_id, to_seq=to_seq, observe=observe)
        else:
            events = await self.read_events(run_id, to_seq=to_seq)
            state = fold(events)
        if state.last_seq == 0:
            raise RunNotFoundError(run_id)
        return state, events

    async def read_events(self, run_id: str, *, to_seq: int | None = None) -> list[Event]:
        """The run's events in order (from the store, or the in-memory log)."""
        if self.store is not None:
            return await self.store.read_all(run_id, to_seq=to_seq)
        log = self._memory_logs.get(run_id)
        if log is None:
            return []
        return log.events(to_seq=to_seq)
