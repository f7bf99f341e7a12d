"""Moving a run at rest to a new graph: ``Runtime.resume(run, graph=NEW)``.

A deploy changes a graph while runs of it wait (paused at a gate, paused by a user,
cancelled, or left by a crashed process). A resume goes on with the graph the run
recorded; ``resume(graph=NEW)`` first replays the run against NEW (``Runtime.replay``:
recorded answers served, every decision made again, nothing written) and moves it only
if nothing diverged up to where it rests, or if the caller forces it. The move is one
``graph.replaced`` event appended at the run's last seq (a control that moved the run
meanwhile wins, and the move is refused); the fold then holds NEW as the run's graph, so
the resume, and every later one, runs NEW.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from eventstore import ConcurrencyError

from .._errors import RunStateError
from .._node_factory import NodeFactory
from .._run_logs import RunLogs
from ..events._catalogue import GraphReplaced
from ..replay._report import ReplayReport
from ..spec._model import GraphSpec, graph_hash, shared_graph_dict
from ..spec._validate import validate_graph
from ._gates import check_resumable

__all__ = ["GraphChangeRefused", "replace_graph"]

#: ``Runtime.replay``: (run id, graph, allow_imports=...) -> its report.
Replay = Callable[..., Awaitable[ReplayReport]]


class GraphChangeRefused(RunStateError):
    """The replay of a run against the new graph diverged: the run was not moved (nothing
    recorded). ``report`` is the replay's report (its first divergence is in the message)."""

    def __init__(self, run_id: str, status: str, graph_id: str, report: ReplayReport) -> None:
        first = report.first
        if first is not None:
            why = f"seq {first.seq} ({first.kind}): {first.reason}"
        else:
            why = report.stopped or "the replay did not reach where the run rests"
        super().__init__(
            run_id,
            status,
            f"its replay against graph {graph_id!r} diverged at {why}; it stays on its "
            "recorded graph (force=True, or --force, moves it anyway)",
        )
        self.report = report


async def replace_graph(
    logs: RunLogs,
    nodes: NodeFactory,
    replay: Replay,
    run_id: str,
    graph: GraphSpec,
    *,
    force: bool,
) -> ReplayReport:
    """Move run ``run_id`` at rest to ``graph`` if its replay against it is clean (or
    ``force``); return the replay's report. Raises SpecErrors for a graph this runtime
    cannot run, RunNotFoundError, RunStateError for a run that cannot be resumed (finished,
    waiting at a gate) or that moved while it was replayed, GraphChangeRefused when the
    replay diverged and ``force`` is false. Moving a run to the graph it has records
    nothing."""
    validate_graph(graph)
    nodes.check(graph)
    # A finished run: RunStateError.
    state, _recorded, _snapshot = await logs.read_resumable(run_id)
    check_resumable(run_id, state)
    new_hash = graph_hash(graph)
    report = await replay(run_id, graph, allow_imports=nodes.allow_imports)
    if new_hash == state.graph_hash:
        return report
    clean = report.equal and report.stopped is None
    if not clean and not force:
        raise GraphChangeRefused(run_id, state.status, graph.id, report)
    moved = GraphReplaced(
        graph=shared_graph_dict(graph),
        graph_hash=new_hash,
        previous_hash=state.graph_hash,
        forced=not clean,
        divergences=len(report.divergences),
    )
    log = logs.reopen(run_id, state.last_seq)
    try:
        await log.append([moved])  # committed, it reaches the hooks (RunLog.append)
    except ConcurrencyError:
        now = await logs.get_state(run_id)
        raise RunStateError(
            run_id, now.status, f"it changed while it was replayed (now {now.status})"
        ) from None
    return report
