"""Prometheus metrics derived from the event stream and the store's statistics.

A :class:`RuntimeMetrics` observes every batch a run log commits (one observer call per
batch, on the event loop) and counts what the events say: runs started and finished,
node durations, LLM turns and tokens, verdicts, retries, stalls, pauses. The event store's
own counters (group-commit batches and their sizes, commit time, conflicts) are read from
``store.statistics()`` at scrape time. Reads of a run's state count how its snapshot
served them (:meth:`RuntimeMetrics.snapshot_read`). Nothing here opens a port:
:func:`serve_metrics` does, when asked.

Label values are closed vocabularies; run, node and graph ids are never labels, except a
``graph`` label on the run and node metrics when ``per_graph=True`` (graph ids are chosen
by whoever writes graphs: a bounded set in most applications, not in all).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from eventstore import EventBody, EventStore, StoreStatistics

from ..events._catalogue import (
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
)
from ..spec._model import GraphSpec

_log = logging.getLogger("magistrate.metrics")

__all__ = ["MetricsServer", "RuntimeMetrics", "default_metrics", "serve_metrics"]

_KINDS: Final = frozenset({"function", "router", "llm", "verifier"})
_LEVELS: Final = frozenset(
    {"bail_out", "structural", "quality", "custom", "override", "max_iterations", "stall"}
)
_ACTIONS: Final = frozenset({"accept", "retry", "escalate"})
_STATUSES: Final = frozenset({"completed", "failed"})
_QUALITIES: Final = frozenset({"clean", "degraded", "failed"})
_PAUSE_REASONS: Final = frozenset({"hitl", "user", "input"})
_SNAPSHOT_OUTCOMES: Final = ("hit", "miss", "stale")
_PROVIDER_ERRORS: Final = {
    "ProviderHTTPError": "http",
    "ProviderTimeoutError": "timeout",
    "MalformedResponseError": "malformed",
    "ProviderError": "other",
}

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


class _RunInfo:
    __slots__ = ("graph", "kinds", "started")

    def __init__(self, graph: str, kinds: Mapping[str, str]) -> None:
        self.graph = graph
        self.kinds = kinds
        self.started: dict[str, float] = {}  # node id -> monotonic time of its start


class _StoreCollector(Collector):
    """The stores' writer counters, summed over the stores this metrics object watches."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        stats = [store.statistics() for store in list(self._metrics._stores)]
        counters = [
            ("magistrate_eventstore_appends", "Append requests committed", "appends"),
            ("magistrate_eventstore_events", "Events committed", "events"),
            (
                "magistrate_eventstore_batches",
                "Group commits (transactions); appends_total / batches_total is the mean "
                "batch size",
                "batches",
            ),
            (
                "magistrate_eventstore_conflicts",
                "Appends refused by the (run, seq) fence",
                "conflicts",
            ),
        ]
        for name, doc, field in counters:
            yield CounterMetricFamily(name, doc, value=sum(getattr(s, field) for s in stats))
        yield CounterMetricFamily(
            "magistrate_eventstore_commit_seconds",
            "Time spent committing group commits",
            value=sum(s.commit_seconds_total for s in stats),
        )
        yield _batch_sizes(stats)
        yield GaugeMetricFamily(
            "magistrate_eventstore_batch_size_max",
            "The largest group commit so far (appends in one transaction)",
            value=max((s.max_batch_size for s in stats), default=0),
        )
        yield GaugeMetricFamily(
            "magistrate_eventstore_queued_appends",
            "Appends waiting for the writer",
            value=sum(s.queued for s in stats),
        )

    def describe(self) -> Iterator[Any]:
        # Registering must not call collect() (no store is watched yet).
        return iter(())


def _batch_sizes(stats: Sequence[StoreStatistics]) -> HistogramMetricFamily:
    """The group commits' sizes as a histogram, summed over the stores' bucket counts."""
    bounds = StoreStatistics.BATCH_SIZE_BOUNDS
    counts = [0] * (len(bounds) + 1)
    for stat in stats:
        for index, count in enumerate(stat.batch_size_counts):
            counts[index] += count
    buckets: list[tuple[str, float]] = []
    total = 0
    for bound, count in zip((*map(str, bounds), "+Inf"), counts, strict=True):
        total += count
        buckets.append((bound, total))
    return HistogramMetricFamily(
        "magistrate_eventstore_batch_size",
        "Group commits by size (appends in one transaction)",
        buckets=buckets,
        sum_value=sum(stat.appends for stat in stats if stat.batch_size_counts),
    )


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
            "magistrate_llm_tokens", "Tokens of LLM node turns", ("direction",), registry=r
        )
        self.verdicts = Counter(
            "magistrate_judge_verdicts",
            "Judge verdicts by verdict (accept, retry, escalate) and cascade level",
            (*g, "verdict", "level"),
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
            "Runs resumed (approvals of paused runs, restarts of interrupted ones)",
            registry=r,
        )
        self.injections = Counter(
            "magistrate_input_injections", "Inputs injected into runs (approvals)", registry=r
        )
        self.provider_errors = Counter(
            "magistrate_provider_errors",
            "Model calls that failed a node, by kind (http, timeout, malformed, other); "
            "judge calls that failed, as kind judge",
            ("kind",),
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
        for outcome in _SNAPSHOT_OUTCOMES:
            self.snapshot_reads.labels(outcome)  # present from the first scrape, at 0
        self._stores: weakref.WeakSet[EventStore] = weakref.WeakSet()
        self._runs: dict[str, _RunInfo] = {}
        self._active: set[str] = set()
        self._lock = threading.Lock()
        r.register(_StoreCollector(self))

    # -- what the runtime tells it -----------------------------------------------------------

    def watch_store(self, store: EventStore) -> None:
        """Include ``store``'s statistics in the scrape (held weakly)."""
        self._stores.add(store)

    def snapshot_read(self, outcome: str) -> None:
        """Count one read of a run's state: ``outcome`` is hit, miss or stale."""
        self.snapshot_reads.labels(_closed(outcome, frozenset(_SNAPSHOT_OUTCOMES), "miss")).inc()

    def run_launched(self, run_id: str, graph: GraphSpec) -> None:
        """Remember the run's graph id and node kinds (labels for its events)."""
        kinds = {node.id: node.kind for node in graph.nodes}
        self._runs[run_id] = _RunInfo(graph.id, kinds)

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
        for index, body in enumerate(bodies):
            if type(body) is RunForked:
                # A fork's first batch: the events before the marker are a copy of another
                # run's, counted when they happened; only the new run itself counts.
                self._started(run_id)
                events = bodies[index + 1 :]
                break
        now = time.monotonic()
        run = self._runs.get(run_id)
        for body in events:
            self._count(run_id, run, body, now)

    # -- counting ----------------------------------------------------------------------------

    def _labels(self, run: _RunInfo | None) -> tuple[str, ...]:
        if not self.per_graph:
            return ()
        return (run.graph if run is not None else "unknown",)

    def _started(self, run_id: str) -> None:
        _child(self.runs_started, *self._labels(self._runs.get(run_id))).inc()
        self._activate(run_id, True)

    def _activate(self, run_id: str, active: bool) -> None:
        with self._lock:
            if active:
                self._active.add(run_id)
            else:
                self._active.discard(run_id)
            self.runs_active.set(len(self._active))

    def _count(self, run_id: str, run: _RunInfo | None, event: EventBody, now: float) -> None:
        kind = type(event)
        body: Any = event
        if kind is NodeStarted:
            if run is not None:
                run.started[body.node_id] = now
        elif kind is NodeCompleted or kind is NodeFailed:
            node_id: str = body.node_id
            if kind is NodeFailed:
                if body.will_retry:
                    self.retries.inc()
                error = _PROVIDER_ERRORS.get(body.error_type)
                if error is not None:
                    self.provider_errors.labels(error).inc()
            if run is not None and node_id in run.started:
                node_kind = _closed(run.kinds.get(node_id), _KINDS, "unknown")
                _child(self.node_duration, *self._labels(run), node_kind).observe(
                    now - run.started.pop(node_id)
                )
        elif kind is LlmTurn:
            self.llm_turn.observe(body.latency_ms / 1000.0)
            if body.input_tokens:
                self.tokens.labels("input").inc(body.input_tokens)
            if body.output_tokens:
                self.tokens.labels("output").inc(body.output_tokens)
        elif kind is Verdict:
            action = _closed(body.action, _ACTIONS)
            level = _closed(body.level, _LEVELS)
            _child(self.verdicts, *self._labels(run), action, level).inc()
            if action == "escalate":
                self.escalations.inc()
            if body.error:
                self.provider_errors.labels("judge").inc()
        elif kind is StallDetected:
            self.stalls.inc()
        elif kind is RunStarted:
            self._started(run_id)
        elif kind is RunResumed:
            self.resumes.inc()
            self._activate(run_id, True)
        elif kind is InputInjected:
            self.injections.inc()
        elif kind is RunPaused:
            self.pauses.labels(_closed(body.reason, _PAUSE_REASONS)).inc()
            self._activate(run_id, False)
        elif kind is RunCancelled:
            _child(self.runs_finished, *self._labels(run), "cancelled", "none").inc()
            self._stop(run_id)
        elif kind is RunFinished:
            status = _closed(body.status, _STATUSES)
            quality = _closed(body.quality, _QUALITIES)
            _child(self.runs_finished, *self._labels(run), status, quality).inc()
            self._stop(run_id)

    def _stop(self, run_id: str) -> None:
        self._activate(run_id, False)
        self._runs.pop(run_id, None)


_default: RuntimeMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> RuntimeMetrics:
    """The one :class:`RuntimeMetrics` on prometheus_client's global registry."""
    global _default
    with _default_lock:
        if _default is None:
            _default = RuntimeMetrics()
        return _default


class MetricsServer:
    """A running ``/metrics`` endpoint (see :func:`serve_metrics`); ``close()`` stops it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and wait for the server thread to end."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def serve_metrics(
    port: int = 9464, *, host: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``registry`` (default: the global one) on ``http://host:port/metrics`` from a
    daemon thread, for an application that has no HTTP server of its own.

    Binds to loopback unless ``host`` says otherwise; ``port=0`` picks a free port (read
    it from :attr:`MetricsServer.port`). Returns at once; raises OSError if the port is
    taken.
    """
    server, thread = start_http_server(
        port, addr=host, registry=registry if registry is not None else REGISTRY
    )
    return MetricsServer(server, thread)
