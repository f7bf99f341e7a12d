"""The Python API: ``async with Runtime(store=...) as rt``."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

from actors import Actor, ActorRef, ActorSystem, MailboxConfig
from eventstore import Event, EventStore, open_store

from ._errors import RunNotFoundError, RunStateError, SpecError, SpecErrors
from ._events import InputInjected, RunCancelled
from ._executor import ExecutorActor
from ._fork import copy_prefix
from ._function_node import FunctionNodeActor, PlainFunction
from ._functions import resolve_callable
from ._judge import JudgeProtocol
from ._llm import LlmProvider
from ._llm_node import LlmNodeActor
from ._llm_support import SET_OUTPUT, resolve_judge
from ._messages import CancelRun, InjectInput, PauseRun, StartRun
from ._result import RunOutcome, RunResult
from ._runlog import CommitHook, RunLog
from ._spec import GraphSpec, NodeSpec, graph_hash
from ._spec_load import graph_from_dict
from ._spec_validate import validate_graph
from ._state import RunState, fold
from ._tools import Tool, ToolRegistry

_log = logging.getLogger("magistrate.runtime")

__all__ = ["RunHandle", "Runtime"]

_FINAL = ("completed", "failed")


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


class Runtime:
    """Runs graphs on an event store; one per application is enough.

    ``store`` is an EventStore, a store URL or SQLite file path (see
    :func:`eventstore.open_store`; opened and closed by the runtime), or None for an
    in-memory log with no durability. ``functions`` maps names used in specs to callables
    (looked up before import paths). ``provider`` is the LLM provider for LLM nodes,
    judges and llm_decide edges. ``hooks`` are called after every
    commit with (run_id, last seq, events). ``tools`` are what LLM nodes may call (each
    node offers those its ``tools`` names); ``judges`` maps names used in
    ``NodeSpec.judge`` to custom judges;
    ``context_budget_tokens`` is the conversation size above which LLM nodes compact
    older turns; ``judge_timeout`` (seconds) bounds each judge verdict of an LLM node (a
    judge that does not answer in time gets the judge-failure verdict).

    ``allow_imports`` lists the module prefixes from which a graph may import callables
    and judges by ``"package.module:attr"`` path (``["myapp.nodes"]`` allows
    ``myapp.nodes`` and ``myapp.nodes.*``). It is empty by default: a graph may then name
    only what is registered here (``functions``, ``tools``, ``judges``), so a graph file
    stays data. Listing a prefix makes every graph file this runtime runs code that may
    call whatever those modules define.
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
    ) -> None:
        self._store_arg = store
        self.store: EventStore | None = None
        self.provider = provider
        self.functions: dict[str, Callable[..., Any]] = dict(functions or {})
        self.hooks = list(hooks)
        self._mailbox = mailbox
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools or ())
        self.judges: dict[str, JudgeProtocol] = dict(judges or {})
        if isinstance(allow_imports, str):
            raise TypeError("allow_imports is a sequence of module prefixes, not one string")
        self.allow_imports: tuple[str, ...] = tuple(allow_imports)
        # The registered judges plus those imported (under allow_imports) by started graphs.
        self._judge_map: dict[str, JudgeProtocol] = dict(self.judges)
        self.context_budget_tokens = context_budget_tokens
        self.judge_timeout = judge_timeout
        self._stack: AsyncExitStack | None = None
        self._system: ActorSystem | None = None
        self._live: dict[str, tuple[ActorRef, RunOutcome, RunLog]] = {}
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
            self._system = await stack.enter_async_context(
                ActorSystem(default_mailbox=self._mailbox)
            )
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._stack is not None
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
        """Validate ``graph`` and start a run; return at once with its handle.

        Raises SpecErrors (before anything is written) for an invalid graph, or one naming
        a function, judge or tool that is neither registered nor an allowed import, or
        with LLM nodes and no provider.
        """
        validate_graph(graph)
        self._check_graph(graph)
        run_id = run_id or uuid.uuid4().hex
        log = RunLog(run_id, self.store, hooks=self.hooks)
        return await self._launch(run_id, graph, log, input=dict(input or {}))

    async def resume(self, run_id: str, *, input: Mapping[str, Any] | None = None) -> RunHandle:
        """Resume a paused, cancelled or crashed run from its log, in this process.

        A completed node never runs again; a node that started and did not complete runs
        again. ``input`` is injected (recorded) first. Raises RunNotFoundError, or
        RunStateError for a finished run or one already running here.
        """
        if run_id in self._live:
            raise RunStateError(run_id, "running", "it is already running in this runtime")
        events = await self.read_events(run_id)
        if not events:
            raise RunNotFoundError(run_id)
        state = fold(events)
        if state.status in _FINAL:
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
            run_id, self.store, last_seq=state.last_seq, hooks=self.hooks
        )
        return await self._launch(
            run_id,
            graph,
            log,
            resume_from=state,
            resume_events=events,
            resume_input=dict(input or {}) or None,
        )

    async def fork(
        self, run_id: str, at_seq: int, *, input: Mapping[str, Any] | None = None
    ) -> RunHandle:
        """Start a new run from ``run_id``'s first ``at_seq`` events; return its handle.

        The new run's log is a copy of seqs 1..``at_seq`` (re-chained under the new id)
        followed by a ``run.forked`` event naming the source, its seq and its chain hash;
        the copy is written in one atomic batch. The new run is then resumed here like a
        paused run, with ``input`` injected (recorded) first: a node that had started and
        not completed at ``at_seq`` runs again; a pause at ``at_seq`` is passed. The source
        run is not touched. Raises RunNotFoundError, or RunStateError when ``at_seq`` is
        outside the log or at or after the run's ``run.finished`` event.
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
        resume_events: Sequence[Event] = (),
        resume_input: dict[str, Any] | None = None,
    ) -> RunHandle:
        def forget() -> None:
            # A stopped run is read back from the log; keep no reference to it here.
            live = self._live.get(run_id)
            if live is not None and live[1] is outcome:
                del self._live[run_id]

        outcome = RunOutcome(on_done=forget)
        executor = ExecutorActor(
            run_id=run_id,
            graph=graph,
            log=log,
            node_factory=self._make_node,
            provider=self.provider,
            outcome=outcome,
            input=input,
            resume_from=resume_from,
            resume_events=resume_events,
            resume_input=resume_input,
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
        return _result_from_state(state)

    async def pause(self, run_id: str) -> None:
        """Ask a running run to pause at its next node boundary (does not wait for it)."""
        ref = self._live_ref(run_id, "pause")
        await ref.tell(PauseRun())

    async def cancel(self, run_id: str, *, reason: str = "") -> None:
        """Cancel a run: a live one stops at once (partial outputs are flushed into memory);
        a paused one is marked cancelled. Does not wait; ``result()`` tells when it stopped.
        """
        live = self._live.get(run_id)
        if live is not None and not live[1].done:
            await live[0].tell(CancelRun(reason=reason))
            return
        state = await self.get_state(run_id)
        if state.status in _FINAL or state.status == "cancelled":
            raise RunStateError(run_id, state.status, "nothing to cancel")
        await self._append_offline(
            run_id, state, RunCancelled(node_id=_first(state.pending), reason=reason)
        )

    async def inject_input(self, run_id: str, data: Mapping[str, Any]) -> None:
        """Merge ``data`` into the run's memory, recorded as an InputInjected event."""
        live = self._live.get(run_id)
        if live is not None and not live[1].done:
            await live[0].tell(InjectInput(data=dict(data)))
            return
        state = await self.get_state(run_id)
        if state.status in _FINAL:
            raise RunStateError(run_id, state.status, "cannot inject input into a finished run")
        await self._append_offline(run_id, state, InputInjected(data=dict(data)))

    async def get_state(self, run_id: str, *, at_seq: int | None = None) -> RunState:
        """The run's state as the fold of its log, up to ``at_seq`` (time travel) if given."""
        events = await self.read_events(run_id, to_seq=at_seq)
        if not events:
            raise RunNotFoundError(run_id)
        return fold(events)

    async def read_events(self, run_id: str, *, to_seq: int | None = None) -> list[Event]:
        """The run's events in order (from the store, or the in-memory log)."""
        if self.store is not None:
            return await self.store.read_all(run_id, to_seq=to_seq)
        log = self._memory_logs.get(run_id)
        if log is None:
            return []
        return log.events(to_seq=to_seq)

    # ------------------------------------------------------------------ helpers

    def _live_ref(self, run_id: str, action: str) -> ActorRef:
        live = self._live.get(run_id)
        if live is None or live[1].done:
            raise RunStateError(run_id, "not running", f"cannot {action} a run that is not live")
        return live[0]

    async def _append_offline(self, run_id: str, state: RunState, body: Any) -> None:
        self._live.pop(run_id, None)
        log = self._memory_logs.get(run_id) or RunLog(
            run_id, self.store, last_seq=state.last_seq, hooks=self.hooks
        )
        await log.append([body])

    def _check_graph(self, graph: GraphSpec) -> None:
        """What a run would otherwise trip on only when it reaches a node: functions and
        judges that are neither registered nor allowed imports, unknown tools, LLM nodes
        without a provider."""
        errors: list[SpecError] = []
        for index, node in enumerate(graph.nodes):
            where = f"nodes[{index}]"
            try:
                if node.kind in ("function", "router") and node.function is not None:
                    resolve_callable(
                        node.function,
                        self.functions,
                        path=f"{where}.function",
                        allow_imports=self.allow_imports,
                    )
                if node.kind == "llm" and node.judge is not None:
                    self._judge_map.setdefault(
                        node.judge,
                        resolve_judge(
                            node.judge,
                            self._judge_map,
                            path=f"{where}.judge",
                            allow_imports=self.allow_imports,
                        ),
                    )
            except SpecError as exc:
                errors.append(exc)
            if node.kind == "llm":
                for j, name in enumerate(node.tools):
                    if name != SET_OUTPUT and name not in self.tools:
                        known = ", ".join(self.tools.names) or "none"
                        errors.append(
                            SpecError(
                                f"{where}.tools[{j}]",
                                f"no tool {name!r} is registered with the runtime (known: {known})",
                            )
                        )
                if self.provider is None:
                    errors.append(
                        SpecError(f"{where}.kind", "an llm node needs Runtime(provider=...)")
                    )
        if errors:
            raise SpecErrors(errors)

    def _resolve_plain(self, spec: NodeSpec) -> PlainFunction | None:
        if spec.function is None:
            return None
        plain = self._plain_cache.get(spec.function)
        if plain is None:
            function = resolve_callable(
                spec.function, self.functions, path=spec.id, allow_imports=self.allow_imports
            )
            plain = self._plain_cache[spec.function] = PlainFunction(function)
        return plain

    def _make_node(
        self, graph: GraphSpec, spec: NodeSpec, executor: ActorRef, log: RunLog
    ) -> Actor:
        if spec.kind in ("function", "router"):
            return FunctionNodeActor(graph, self._resolve_plain, executor, log)
        if spec.kind == "llm":
            return LlmNodeActor(
                spec,
                executor,
                log,
                provider=self.provider,
                tools=self.tools,
                judges=self._judge_map,
                context_budget_tokens=self.context_budget_tokens,
                judge_timeout=self.judge_timeout,
            )
        raise SpecError(f"node {spec.id}", f"node kind {spec.kind!r} is not supported yet")


def _first(items: Sequence[str]) -> str | None:
    return items[0] if items else None


def _result_from_state(state: RunState) -> RunResult:
    if state.status not in (*_FINAL, "paused", "cancelled"):
        raise RunStateError(state.run_id, state.status, "the run has no result yet")
    return RunResult(
        run_id=state.run_id,
        status=state.status,  # type: ignore[arg-type]  # checked just above
        quality=state.quality,  # type: ignore[arg-type]
        memory=dict(state.memory),
        path=list(state.path),
        steps=sum(state.visit_counts.values()),
        total_retries=state.total_retries,
        error=state.error,
        resume_at=list(state.pending),
        paused_reason=state.paused.reason if state.paused else None,
    )
