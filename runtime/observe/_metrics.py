"""Prometheus metrics derived from the event stream and the store's statistics.

A :class:`RuntimeMetrics` observes every batch a run log commits (one observer call per
batch, on the event loop) and counts what the events say: runs started and finished,
node durations, LLM turns and tokens, verdicts, retries, stalls, pauses. The event store's
own counters (group-commit batches and their sizes, commit time, conflicts) are read from
``store.statistics()`` at scrape time (``_store_metrics``). Reads of a run's state count
how its snapshot served them (:meth:`RuntimeMetrics.snapshot_read`). Nothing here opens a
port: ``_metrics_server.serve_metrics`` does, when asked.

Label values are closed vocabularies; run, node and graph ids are never labels, except a
``graph`` label on the run and node metrics when ``per_graph=True`` (graph ids are chosen
by whoever writes graphs: a bounded set in most applications, not in all).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final, get_args

from msgspec.structs import astuple
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from eventstore import EventBody, EventStore

from ..events._catalogue import (
    ApprovalGranted,
    ApprovalRejected,
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchTurn,
    EdgeTaken,
    GraphReplaced,
    InputInjected,
    LlmTurn,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    StallDetected,
    Verdict,
    VerificationRecorded,
)
from ..events._run_state import RunState
from ..events._snapshots import SnapshotOutcome
from ..events._tokens import paid
from ..events._verdicts import JUDGE_FAILURE_KINDS, check_failure, goal_failures, overrules
from ..llm._verdict import Action, Level
from ..spec._model import GraphSpec, NodeKind
from ._labels import RunGraphs, RunInfo, provider_error_kind, resume_kind
from ._loop_lag import LoopLag
from ._store_metrics import StoreCollector

_log = logging.getLogger("magistrate.metrics")

__all__ = ["RuntimeMetrics", "default_metrics"]

# Label values come from the closed vocabularies they count.
_KINDS: Final = frozenset(get_args(NodeKind))
_LEVELS: Final = frozenset(get_args(Level))
_ACTIONS: Final = frozenset(get_args(Action))
_STATUSES: Final = frozenset({"completed", "failed"})
_QUALITIES: Final = frozenset({"clean", "degraded", "failed"})
_PAUSE_REASONS: Final = frozenset({"hitl", "user", "input"})
_SNAPSHOT_OUTCOMES: Final = frozenset(get_args(SnapshotOutcome))
#: The token counter's directions, in the order of Usage's fields.
_DIRECTIONS: Final = ("input", "output", "input_cached", "input_cache_write")

# Buckets in seconds: nodes and turns span milliseconds (code) to minutes (a slow model).
_NODE_BUCKETS: Final = (0.001, 0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TURN_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
_APPEND_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1,
)


def _child(metric: Any, *labels: str) -> Any:
    # prometheus_client refuses .labels() on a metric without labels.
    return metric.labels(*labels) if labels else metric


def _closed(value: str | None, allowed: frozenset[str], other: str = "other") -> str:
    return value if value in allowed else other


class RuntimeMetrics:
    """The runtime's Prometheus metrics, registered in ``registry`` (default: the global one).

    Pass it as ``Runtime(metrics=...)``; one object may serve several runtimes. Creating two
    on one registry raises ValueError (Prometheus names are unique per registry): use
    :func:`default_metrics` for the global registry. ``per_graph=True`` adds a ``graph``
    label to the run and node metrics.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, per_graph: bool = False
    ) -> None:
        self.registry = registry if registry is not None else REGISTRY
        self.per_graph = per_graph
        r = self.registry
        g: tuple[str, ...] = ("graph",) if per_graph else ()
        self.runs_started = Counter(
            "magistrate_runs_started", "Runs started (forks included)", g, registry=r
        )
        self.runs_forked = Counter(
            "magistrate_runs_forked", "Runs started as forks of another run", g, registry=r
        )
        self.runs_reopened = Counter(
            "magistrate_runs_reopened",
            "Runs that had ended (cancelled) and were resumed: each ends again, counted in "
            "magistrate_runs_finished again; runs not ended = started + reopened - finished",
            g,
            registry=r,
        )
        self.runs_finished = Counter(
            "magistrate_runs_finished",
            "Runs that ended: status completed, failed or cancelled; quality clean, degraded, "
            "failed or none",
            (*g, "status", "quality"),
            registry=r,
        )
        self.runs_active = Gauge(
            "magistrate_runs_active", "Runs executing in this process now", registry=r
        )
        self._lag = LoopLag(r)
        self.loop_lag = self._lag.gauge
        self.node_duration = Histogram(
            "magistrate_node_duration_seconds",
            "Time from a node's start to its completion or failure, by node kind",
            (*g, "kind"),
            buckets=_NODE_BUCKETS,
            registry=r,
        )
        self.llm_turn = Histogram(
            "magistrate_llm_turn_seconds",
            "Latency of one model call of an LLM node (its retries included)",
            buckets=_TURN_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "magistrate_llm_tokens",
            "Tokens of every model call a run's log records (node and branch turns, judges, "
            "routing, verifiers, the goal's evaluator)",
            ("direction",),
            registry=r,
        )
        self.verdicts = Counter(
            "magistrate_judge_verdicts",
            "Judge verdicts by verdict (accept, retry, escalate) and cascade level; a turn "
            "that called tools is counted in magistrate_llm_tool_turns instead",
            (*g, "verdict", "level"),
            registry=r,
        )
        self.tool_turns = Counter(
            "magistrate_llm_tool_turns",
            "LLM turns that called tools: not judged (their bail-out verdict is not counted "
            "in magistrate_judge_verdicts)",
            g,
            registry=r,
        )
        self.retries = Counter(
            "magistrate_node_retries",
            "Node attempts that failed and are retried by the executor",
            registry=r,
        )
        self.stalls = Counter(
            "magistrate_stalls", "Stalls detected (repeated identical tool calls)", registry=r
        )
        self.escalations = Counter(
            "magistrate_escalations", "ESCALATE verdicts (the node fails)", registry=r
        )
        self.pauses = Counter(
            "magistrate_run_pauses",
            "Runs paused, by reason (hitl, user, input)",
            ("reason",),
            registry=r,
        )
        self.resumes = Counter(
            "magistrate_run_resumes",
            "Runs resumed (approvals of paused runs, restarts of interrupted ones, resumes of "
            "cancelled ones); not a fork's first step, nor a worker's first of a submitted run",
            registry=r,
        )
        self.injections = Counter(
            "magistrate_input_injections", "Inputs injected into runs", registry=r
        )
        self.approvals = Counter(
            "magistrate_approvals",
            "Gates decided, by decision (granted, rejected)",
            ["decision"],
            registry=r,
        )
        self.provider_errors = Counter(
            "magistrate_provider_errors",
            "Model calls that failed a node, by kind (http, timeout, malformed, other); "
            "judge calls that failed, as kind judge",
            ("kind",),
            registry=r,
        )
        self.judge_failures = Counter(
            "magistrate_judge_failures",
            "Checks that did not run, by reason: judge (a verdict with an error), route "
            "(an llm_decide fallback after a failed call), branch_judge, verify (an "
            "evaluator's reply with no score), goal (a criterion the goal's evaluator failed "
            "to score); and checks not passed: overruled (a RETRY max_iterations overruled)",
            ("reason",),
            registry=r,
        )
        self.append_latency = Histogram(
            "magistrate_eventstore_append_seconds",
            "Time from a run's append to its commit (the group commit's wait included)",
            buckets=_APPEND_BUCKETS,
            registry=r,
        )
        self.snapshot_reads = Counter(
            "magistrate_snapshot_reads",
            "Reads of a run's state (get_state, resume) by how its snapshot served them: hit "
            "(used), miss (none to use), stale (ignored: another fold version or a log that "
            "no longer matches it)",
            ("outcome",),
            registry=r,
        )
        for outcome in sorted(_SNAPSHOT_OUTCOMES):
            self.snapshot_reads.labels(outcome)  # present from the first scrape, at 0
        for reason in JUDGE_FAILURE_KINDS:
            self.judge_failures.labels(reason)  # present from the first scrape, at 0
        self._stores = StoreCollector()
        self._runs: dict[str, RunInfo] = {}
        self._graphs = RunGraphs()  # per_graph: each run's graph id, from its events
        self._active: set[str] = set()
        self._lock = threading.Lock()
        r.register(self._stores)

    # -- what the runtime tells it -----------------------------------------------------------

    async def watch_event_loop(self) -> None:
        """Keep ``magistrate_event_loop_lag_seconds`` current until cancelled (a runtime
        with these metrics runs it while it is open; 0 once none does)."""
        await self._lag.watch()

    def watch_store(self, store: EventStore) -> None:
        """Include ``store``'s statistics in the scrape (held weakly) until as many
        :meth:`unwatch_store` calls; what it counted meanwhile stays in the totals."""
        self._stores.watch(store)

    def unwatch_store(self, store: EventStore) -> None:
        """A runtime is done with ``store`` (it closes): see :meth:`watch_store`."""
        self._stores.unwatch(store)

    def snapshot_read(self, outcome: SnapshotOutcome) -> None:
        """Count one read of a run's state: ``outcome`` is hit, miss or stale."""
        self.snapshot_reads.labels(_closed(outcome, _SNAPSHOT_OUTCOMES, "miss")).inc()

    def run_launched(self, run_id: str, graph: GraphSpec, resumed: RunState | None = None) -> None:
        """Remember the run's graph id and node kinds (labels for its events); the run
        executes here from now on (a worker's claimed run included, whose start another
        process recorded). ``resumed``: the state a resume launches it from (what its
        ``run.resumed`` counts as: :func:`resume_kind`), None for a new run."""
        kind = "resume" if resumed is None else resume_kind(resumed)
        self._runs[run_id] = RunInfo({node.id: node.kind for node in graph.nodes}, kind)
        self._learn(run_id, graph.id)
        self._activate(run_id, True)

    def run_graph(self, run_id: str, graph_id: object) -> None:
        """``run_id`` runs graph ``graph_id``: told before this process ends a run that
        nothing executes here (a cancel or a gate's rejection of a run at rest, read from
        its state), so its end counts under its graph."""
        self._learn(run_id, graph_id)

    def run_stopped(self, run_id: str) -> None:
        """The run no longer executes here: it ended, paused, was handed over or its
        claim was lost. Idempotent."""
        self._activate(run_id, False)
        self._runs.pop(run_id, None)

    def observe(self, run_id: str, bodies: Sequence[EventBody], seconds: float | None) -> None:
        """Count one committed batch of ``run_id`` (``seconds``: its append latency, None
        for an in-memory log). Never raises: a counting error is logged, and the run goes
        on (metrics must not stop the work they measure)."""
        try:
            self._observe(run_id, bodies, seconds)
        except Exception:
            _log.exception("metrics: could not count a batch of run %s", run_id)

    def _observe(self, run_id: str, bodies: Sequence[EventBody], seconds: float | None) -> None:
        if seconds is not None:
            self.append_latency.observe(seconds)
        events: Iterable[EventBody] = bodies
        for index in range(len(bodies) - 1, -1, -1):
            if type(body := bodies[index]) is RunForked:
                # A fork's first batch: the events before its marker (the last: a fork of a
                # fork copies one) are a copy of another run's, counted when they happened;
                # only the new run itself counts, under the graph its copy runs.
                for copied in bodies[:index]:
                    if type(copied) is RunStarted or type(copied) is GraphReplaced:
                        self._learn(run_id, copied.graph.get("id"))
                self._started(run_id)
                _child(self.runs_forked, *self._labels(run_id)).inc()
                events = bodies[index + 1 :]
                break
        now = time.monotonic()
        run = self._runs.get(run_id)
        before: EventBody | None = None
        selected: set[str] = set()  # parallel nodes whose winner's turns follow in the batch
        for body in events:
            if type(body) is BranchesSelected:
                selected.add(body.node_id)
            elif type(body) is LlmTurn and body.node_id in selected:
                # The winner's turns copied as the node's own: counted already, as branch turns.
                continue
            self._count(run_id, run, body, now)
            if (failed := check_failure(body)) is not None:  # the fold counts the same
                self.judge_failures.labels(failed[0]).inc()
            if type(body) is Verdict and type(before) is Verdict:
                if before.node_id == body.node_id and overrules(body, before):
                    self.judge_failures.labels("overruled").inc()
            before = body

    # -- counting ----------------------------------------------------------------------------

    def _count_tokens(self, body: EventBody) -> None:
        # The tokens of the paid calls ``body`` records, read as the run's report reads them.
        if (call := paid(body)) is not None:
            for direction, count in zip(_DIRECTIONS, astuple(call[1]), strict=True):
                if count > 0:  # (a custom provider's negative count: no counter goes back)
                    self.tokens.labels(direction).inc(count)

    def _learn(self, run_id: str, graph: object) -> None:
        if self.per_graph:
            self._graphs.set(run_id, graph)

    def _labels(self, run_id: str) -> tuple[str, ...]:
        return (self._graphs.get(run_id),) if self.per_graph else ()

    def _started(self, run_id: str) -> None:
        _child(self.runs_started, *self._labels(run_id)).inc()

    def _activate(self, run_id: str, active: bool) -> None:
        with self._lock:
            if active:
                self._active.add(run_id)
            else:
                self._active.discard(run_id)
            self.runs_active.set(len(self._active))

    def _count(self, run_id: str, run: RunInfo | None, event: EventBody, now: float) -> None:
        match event:
            case NodeStarted():
                if run is not None:
                    run.started[event.node_id] = now
            case NodeCompleted() | NodeFailed():
                node_id = event.node_id
                if isinstance(event, NodeFailed):
                    self._count_tokens(event)  # a paid call no other event records
                    if event.will_retry:
                        self.retries.inc()
                    error = provider_error_kind(event.error_type)
                    if error is not None:
                        self.provider_errors.labels(error).inc()
                if run is not None and node_id in run.started:
                    node_kind = _closed(run.kinds.get(node_id), _KINDS, "unknown")
                    _child(self.node_duration, *self._labels(run_id), node_kind).observe(
                        now - run.started.pop(node_id)
                    )
            case LlmTurn() | BranchTurn():  # a node's model call, or a parallel branch's
                # 0.0 first: a negative or NaN latency (a custom provider's) counts as 0.
                self.llm_turn.observe(max(0.0, event.latency_ms / 1000.0))
                self._count_tokens(event)
            case VerificationRecorded() | BranchFinished() | BranchesJudged():
                self._count_tokens(event)  # (BranchFinished: a paid call that gave no turn)
            case Verdict():
                self._count_tokens(event)  # the quality check's calls (or a custom judge's)
                if event.error:  # a judge that failed, on a tool turn too (its bail-out)
                    self.provider_errors.labels("judge").inc()
                    self.judge_failures.labels("judge").inc()
                if event.level == "bail_out":
                    _child(self.tool_turns, *self._labels(run_id)).inc()
                    return
                action, level = _closed(event.action, _ACTIONS), _closed(event.level, _LEVELS)
                _child(self.verdicts, *self._labels(run_id), action, level).inc()
                if action == "escalate":
                    self.escalations.inc()
            case EdgeTaken() if event.condition == "llm_decide":  # the router's call
                self._count_tokens(event)
                if event.judge_error is not None:
                    self.judge_failures.labels("route").inc()
            case StallDetected():
                self.stalls.inc()
            case RunStarted():
                self._learn(run_id, event.graph.get("id"))
                self._started(run_id)
            case GraphReplaced():
                self._learn(run_id, event.graph.get("id"))
            case RunResumed():
                kind = "resume" if run is None else run.resumes_as
                if run is not None:
                    run.resumes_as = "resume"  # its next one, if any, resumes it here
                if kind == "reopen":
                    _child(self.runs_reopened, *self._labels(run_id)).inc()
                if kind in ("resume", "reopen"):
                    self.resumes.inc()
            case InputInjected():
                self.injections.inc()
            case ApprovalGranted():
                self.approvals.labels("granted").inc()
            case ApprovalRejected():
                self.approvals.labels("rejected").inc()
            case RunPaused():
                self.pauses.labels(_closed(event.reason, _PAUSE_REASONS)).inc()
                self._activate(run_id, False)
            case RunCancelled():
                _child(self.runs_finished, *self._labels(run_id), "cancelled", "none").inc()
                self._stop(run_id)
            case RunFinished():
                status = _closed(event.status, _STATUSES)
                quality = _closed(event.quality, _QUALITIES)
                _child(self.runs_finished, *self._labels(run_id), status, quality).inc()
                self._count_tokens(event)  # the goal evaluator's calls
                if failed_goal := len(goal_failures(event.goal_outcome)):
                    self.judge_failures.labels("goal").inc(failed_goal)
                self._stop(run_id)

    def _stop(self, run_id: str) -> None:
        self._activate(run_id, False)
        self._runs.pop(run_id, None)
        self._graphs.forget(run_id)


_default: RuntimeMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> RuntimeMetrics:
    """The one :class:`RuntimeMetrics` on prometheus_client's global registry."""
    global _default
    with _default_lock:
        if _default is None:
            _default = RuntimeMetrics()
        return _default
