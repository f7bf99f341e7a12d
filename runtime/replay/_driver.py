"""Run a recorded run again against a graph, in memory, and report what changed.

The replay is a real run of today's code on an in-memory log (a runtime with no store:
nothing is written anywhere) whose outside world is the recorded one (``_served``): the
model, the tools, the function nodes (unless ``rerun_functions``) and custom judges
that may not be imported answer from the log; the approvals, rejections, resumes and
cancels that moved the recorded run at its pauses are made again, and the input injected
while it ran is injected again where the log had it (``_timing``), as parallel branches
finish in their recorded order. Everything the runtime decides itself is decided again.
Then ``_compare`` sets the two logs side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeGuard

import anyio
import msgspec

from eventstore import Event, EventBody

from .._errors import RunNotFoundError, RunStateError, SpecError
from .._node_factory import NodeFactory
from .._result import RunResult
from .._run_logs import RunLogs
from ..events._catalogue import NodeStarted
from ..llm._names import check_named_providers, check_parallel_names
from ..llm._support import SET_OUTPUT, resolve_judge
from ..llm._tools import Tool
from ..llm._verdict import JudgeProtocol
from ..observe._logging import not_logged
from ..providers._base import LlmProvider
from ..spec._load import graph_from_dict
from ..spec._model import GraphSpec, RetryPolicy, graph_hash
from ._compare import compare
from ._recorded import RecordedRun
from ._report import ReplayReport
from ._served import (
    RecordedJudge,
    ReplayProvider,
    ServedTools,
    Stop,
    recorded_function,
    served_tool,
)
from ._timing import BranchFinishes, Injection, Injections

__all__ = ["ReplayRuntime", "recorded_events", "replay_run"]


class _Handle(Protocol):
    run_id: str

    async def result(self) -> RunResult: ...


class ReplayRuntime(Protocol):
    """What the replay needs of the in-memory runtime it runs in (a ``Runtime``)."""

    async def __aenter__(self) -> ReplayRuntime: ...

    async def __aexit__(self, *exc_info: Any) -> None: ...

    async def start(
        self, graph: GraphSpec, *, input: dict[str, Any] | None = ..., run_id: str | None = ...
    ) -> _Handle: ...

    async def approve(
        self, run_id: str, *, by: str, input: dict[str, Any] | None = ...
    ) -> _Handle | None: ...

    async def reject(self, run_id: str, *, by: str, reason: str = ...) -> _Handle | None: ...

    async def resume(self, run_id: str, *, input: dict[str, Any] | None = ...) -> _Handle: ...

    async def cancel(self, run_id: str, *, reason: str = ...) -> None: ...

    async def inject_input(self, run_id: str, data: dict[str, Any]) -> None: ...

    async def read_events(self, run_id: str, *, to_seq: int | None = ...) -> list[Event]: ...


#: ``Runtime`` itself: called with no store (an in-memory log) and the replay's options.
MakeRuntime = Callable[..., ReplayRuntime]


async def recorded_events(logs: RunLogs, run_id: str) -> list[Event]:
    """The run's events, their hash chain checked as they are read from a store (and the
    log's end against the run's record, and against the heads its heads file recorded):
    RunNotFoundError, or CorruptLogError naming the first bad seq and why."""
    if logs.store is None:
        events = await logs.read_events(run_id)
    else:
        events = await logs.read_verified(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    return events


async def replay_run(
    events: Sequence[Event],
    graph: GraphSpec | None,
    nodes: NodeFactory,
    make_runtime: MakeRuntime,
    rerun_functions: bool = False,
    allow_imports: Sequence[str] = (),
    rejudge: bool = False,
) -> ReplayReport:
    """Replay the recorded ``events`` of one run against ``graph`` (None: the recorded
    graph) with what ``nodes`` registers; see :meth:`runtime.Runtime.replay`."""
    recorded = RecordedRun(events)
    run_id = events[0].run_id
    recorded_graph = graph_from_dict(recorded.started.graph, validate=False)
    graph = graph or recorded_graph
    collected: list[EventBody] = []
    stop = Stop(lambda: len(collected))
    finishes = BranchFinishes(recorded.finishes, lambda node: _branches(graph, node))
    provider = ReplayProvider(
        recorded, stop, live=_judges_live(graph, nodes) if rejudge else None, finishes=finishes
    )
    not_redecided: list[str] = []
    injections = Injections(events, recorded.injected)
    options = _options(
        graph, recorded, stop, provider, nodes, rerun_functions, allow_imports, injections
    )
    options["judges"] = _judges(graph, recorded, stop, nodes, allow_imports, not_redecided)

    async def tell(injection: Injection) -> None:
        try:  # told to the executor at once: before anything the run does next
            await rt.inject_input(run_id, injection.data)
        except RunStateError:  # the run no longer runs here (it ended, it paused)
            injections.missed.append(injection)

    async def inject(due: list[Injection]) -> None:
        for injection in due:
            await tell(injection)

    def keep(_run_id: str, _last: int, bodies: Sequence[EventBody]) -> Any:
        collected.extend(bodies)
        finishes.seen(bodies)
        due = injections.due(bodies)
        return inject(due) if due else None

    injections.tell = tell

    with not_logged():  # the run's events again, not the run's: no "run X started"
        async with make_runtime(None, hooks=[keep], **options) as rt:
            sync = bool(injections.pending)  # each step committed (and hooked) as taken
            await _drive(rt, _without_waits(graph, sync), recorded, stop, run_id)
            replayed = await rt.read_events(run_id)
    warnings = _request_warnings(recorded, recorded_graph, graph)
    stopped = stop.reason
    if stopped is None:
        warnings.extend(injections.warnings())
    if provider.live_calls:
        warnings.append(
            f"rejudge asked the judges' models {provider.live_calls} times, live: those calls "
            "cost tokens"
        )
    if recorded.forked:
        warnings.append("the run is a fork: its copied events are replayed as its own start")
    if stopped is not None and recorded.cut_at is not None:
        warnings.append(
            f"the recorded run ends at seq {recorded.cut_at} without finishing (cancelled, "
            f"paused by a user, interrupted or still running); compared up to there: {stopped}"
        )
        stopped = None
    limit = stop.at if stop.at is not None else len(replayed)
    complete = stop.at is None
    if recorded.rests_at is not None:  # a user paused it there: the rest is to come
        limit, complete = min(limit, _rest_cut(events, recorded.rests_at, replayed)), False
    divergences = compare(
        [(e.seq, e.body) for e in events],
        [(e.seq, e.body) for e in replayed if e.seq <= limit],
        graph,
        recorded_graph,
        complete=complete,
    )
    return ReplayReport(
        run_id=run_id,
        graph_id=graph.id,
        graph_hash=graph_hash(graph),
        equal=not divergences and stopped is None,
        divergences=divergences,
        warnings=warnings,
        not_redecided=not_redecided,
        stopped=stopped,
        recorded_events=len(events),
        replayed_events=min(limit, len(replayed)),
        model_calls=provider.calls,
        live_calls=provider.live_calls,
    )


def _rest_cut(events: Sequence[Event], rests_at: int, replayed: Sequence[Event]) -> int:
    """The last replayed seq to compare with a run that rests at a user's pause (seq
    ``rests_at``): everything before the replay starts the node the pause was before as
    a new visit, which is where the recorded run would go on."""
    rest = events[rests_at - 1].body
    node = getattr(rest, "node_id", None)
    if node is None:
        return rests_at - 1
    visits = max(
        (e.body.visit for e in events[:rests_at] if _starts(e.body, node)),
        default=0,
    )
    for event in replayed:
        body = event.body
        if _starts(body, node) and body.visit > visits:
            return event.seq - 1
    return len(replayed)


def _starts(body: EventBody, node: str) -> TypeGuard[NodeStarted]:
    return isinstance(body, NodeStarted) and body.node_id == node


def _judges_live(graph: GraphSpec, nodes: NodeFactory) -> Callable[[str, str], LlmProvider | None]:
    """For ``rejudge``: the provider that answers a Level 2 judge (the runtime's) or an
    ``llm_judge`` verifier (its evaluator) live, by purpose and asking node."""

    def live(purpose: str, node_id: str) -> LlmProvider | None:
        if purpose == "judge":
            return nodes.provider
        verifier = graph.node(node_id).verifier if graph.has_node(node_id) else None
        return nodes.provider_named(getattr(verifier, "evaluator", None))

    return live


def _branches(graph: GraphSpec, node: str) -> int:
    """How many parallel branches ``node`` of ``graph`` runs (0: none, or no such node)."""
    spec = graph.node(node) if graph.has_node(node) else None
    return len(spec.parallel.branches) if spec is not None and spec.parallel else 0


def _without_waits(graph: GraphSpec, sync: bool = False) -> GraphSpec:
    """``graph`` with no wait between retries: how long a retry waited decides nothing.
    ``sync``: with durability "sync" too (it decides nothing either), so each step is
    committed, and seen by the replay's commit hook, as it is taken."""

    def instant(policy: RetryPolicy) -> RetryPolicy:
        return msgspec.structs.replace(policy, initial_delay=0.0, max_delay=0.0, jitter=0.0)

    nodes = [
        n if n.retry is None else msgspec.structs.replace(n, retry=instant(n.retry))
        for n in graph.nodes
    ]
    durability = "sync" if sync else graph.durability
    return msgspec.structs.replace(
        graph, retry=instant(graph.retry), nodes=nodes, durability=durability
    )


async def _drive(
    rt: ReplayRuntime, graph: GraphSpec, recorded: RecordedRun, stop: Stop, run_id: str
) -> None:
    """Start the run, then make the recorded outside actions at each pause it reaches
    (an approval or a rejection after the input injected at its gate)."""
    handle: _Handle | None = await rt.start(
        graph, input=dict(recorded.started.input), run_id=run_id
    )
    controls = iter(recorded.controls)
    while handle is not None:
        result = await _until(rt, handle, stop)
        if stop.reason is not None or result.status != "paused":
            return
        control = next(controls, None)
        if control is None:
            return
        try:
            if control.injected:  # input given at the gate before its decision
                await rt.inject_input(run_id, control.injected)
            if control.kind == "approve":
                handle = await rt.approve(run_id, by=control.by, input=control.input)
            elif control.kind == "reject":
                handle = await rt.reject(run_id, by=control.by, reason=control.reason)
            elif control.kind == "resume":
                handle = await rt.resume(run_id, input=control.input or None)
            else:
                await rt.cancel(run_id, reason=control.reason)
                return
        except RunStateError as exc:  # today's graph refuses what the recorded run took
            stop.stop(
                f"the {control.kind} recorded at seq {control.seq} is refused now: {exc.reason}"
            )
            return


async def _until(rt: ReplayRuntime, handle: _Handle, stop: Stop) -> RunResult:
    """The run's result; a stop cancels it first."""

    async def cancel_on_stop() -> None:
        await stop.event.wait()
        await rt.cancel(handle.run_id, reason=f"replay stopped: {stop.reason}")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(cancel_on_stop)
        result = await handle.result()
        tasks.cancel_scope.cancel()
    return result


def _options(
    graph: GraphSpec,
    recorded: RecordedRun,
    stop: Stop,
    provider: ReplayProvider,
    nodes: NodeFactory,
    rerun_functions: bool,
    allow_imports: Sequence[str],
    injections: Injections,
) -> dict[str, Any]:
    names: set[str] = set()

    def named(name: str | None) -> LlmProvider:
        if name is not None:
            names.add(name)
        return provider

    check_named_providers(graph, named)
    check_parallel_names(graph, named, nodes.branch_strategies)
    if rerun_functions:
        functions = dict(nodes.functions)
    else:
        served = recorded_function(recorded, stop, injections)
        functions = {
            node.function: served
            for node in graph.nodes
            if node.kind in ("function", "router") and node.function is not None
        }
    tools: dict[str, Tool] = {}
    for node in graph.nodes:
        for reference in node.tools if node.kind == "llm" else ():
            if reference != SET_OUTPUT and reference not in tools:
                tools[reference] = served_tool(_tool_name(reference, nodes), recorded, stop)
    return {
        "provider": provider,
        "providers": {name: provider for name in names},
        "functions": functions,
        "tools": ServedTools(tools),
        "branch_strategies": nodes.branch_strategies,
        "allow_imports": tuple(allow_imports),
        "timeouts": nodes.timeouts,
        "context_budget_tokens": nodes.context_budget_tokens,
    }


def _tool_name(reference: str, nodes: NodeFactory) -> str:
    """The name the model calls a tool by: a registered tool's own, else the attribute
    an import path ends with (``"pkg.mod:lookup"`` -> ``lookup``), never imported."""
    if ":" not in reference and reference in nodes.tools:
        return nodes.tools.get(reference).name
    return reference.rpartition(":")[2].rpartition(".")[2]


def _judges(
    graph: GraphSpec,
    recorded: RecordedRun,
    stop: Stop,
    nodes: NodeFactory,
    allow_imports: Sequence[str],
    not_redecided: list[str],
) -> dict[str, JudgeProtocol]:
    """The custom judges: registered ones and allowed imports decide again; the others
    give their recorded verdicts (and are named in ``not_redecided``)."""
    judges: dict[str, JudgeProtocol] = {}
    served: RecordedJudge | None = None
    for node in graph.nodes:
        reference = node.judge
        if node.kind != "llm" or reference is None or reference in judges:
            continue
        if reference in nodes.judges:
            judges[reference] = nodes.judges[reference]
            continue
        try:
            judges[reference] = resolve_judge(
                reference, {}, path=f"node {node.id}.judge", allow_imports=allow_imports
            )
        except SpecError as exc:
            served = served or RecordedJudge(recorded, stop)
            judges[reference] = served
            not_redecided.append(f"the verdicts of node `{node.id}`'s judge: {exc}")
    return judges


_REQUEST_FIELDS = ("system_prompt", "description", "output_keys", "nullable_keys", "tools", "model")
_GRAPH_FIELDS = ("identity", "narrative", "goal")


def _request_warnings(
    recorded: RecordedRun, recorded_graph: GraphSpec, graph: GraphSpec
) -> list[str]:
    """A model request that differs from the recorded one (its answer is still served)."""
    warnings: list[str] = []
    before = {node.id: node for node in recorded_graph.nodes}
    after = {node.id: node for node in graph.nodes}
    around = [f for f in _GRAPH_FIELDS if getattr(graph, f) != getattr(recorded_graph, f)]
    for node_id, seq in sorted(recorded.first_turn.items(), key=lambda item: item[1]):
        old, new = before.get(node_id), after.get(node_id)
        if old is None or new is None:
            continue
        changed = around + [f for f in _REQUEST_FIELDS if getattr(old, f) != getattr(new, f)]
        if changed:
            warnings.append(
                f"seq {seq}: the request node `{node_id}` sends to the model differs "
                f"({', '.join(_words(f) for f in changed)} changed); the recorded answer "
                "is still served"
            )
    for node_id, seq in sorted(recorded.first_judged.items(), key=lambda item: item[1]):
        old, new = before.get(node_id), after.get(node_id)
        if old is None or new is None or not new.success_criteria:
            continue
        if old.success_criteria != new.success_criteria:
            warnings.append(
                f"seq {seq}: the request node `{node_id}`'s Level 2 judge sends differs "
                "(success criteria changed); the recorded answer is still served"
            )
    return warnings


def _words(field: str) -> str:
    return field.replace("_", " ")
