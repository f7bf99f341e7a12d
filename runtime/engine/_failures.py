"""A node's failure as the run records it: retried after its policy's delay, or for good,
and the error a run that ends with it reports; the end of a run no edge leads on from; a
rejected gate's node."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..events._catalogue import FinishedStatus, NodeFailed
from ..spec._model import GraphSpec, NodeSpec, retry_delay
from ._edges import Route, failure_routes
from ._messages import NodeDone

__all__ = ["dead_end", "failure", "node_failed", "out_of_steps", "rejection"]

#: The error of a pause node whose approval was rejected.
REJECTED = "its approval was rejected"


def node_failed(
    graph: GraphSpec, spec: NodeSpec, done: NodeDone
) -> tuple[NodeFailed, float | None]:
    """The event recording the failed attempt ``done`` of ``spec``'s node (with the tokens
    it paid for that no other event records), and the delay before its next attempt (None:
    no retry). LLM nodes' retries belong to their judge."""
    policy = spec.retry or graph.retry
    will_retry = done.retryable and spec.kind != "llm" and done.attempt < policy.max_attempts
    failed = NodeFailed(
        node_id=done.node_id,
        error=done.error or "",
        attempt=done.attempt,
        error_type=done.error_type or "Error",
        will_retry=will_retry,
        branch=done.branch,
        usage=done.usage,
    )
    return failed, retry_delay(policy, done.attempt) if will_retry else None


def out_of_steps(graph: GraphSpec, node_id: str, failed_nodes: Sequence[str]) -> str:
    """The error of a run that would start ``node_id`` past its ``max_steps``, naming the
    nodes that failed for good on the way (an ``on_failure`` loop that kept failing)."""
    error = f"max_steps ({graph.max_steps}) reached before {node_id!r}"
    if failed_nodes:
        counts = Counter(failed_nodes)
        failed = ", ".join(f"{node!r} {n} time{'s' if n > 1 else ''}" for node, n in counts.items())
        error += f" (nodes failed on the way: {failed})"
    return error


def failure(done: NodeDone) -> str:
    """A failed node's error as the run reports it: ``KeyError: 'name'``, not ``'name'``."""
    error, kind = done.error or "", done.error_type
    if not kind or kind == "Error" or error == kind or error.startswith(f"{kind}:"):
        return error or kind or "failed"
    return f"{kind}: {error}"


def dead_end(graph: GraphSpec, done: NodeDone) -> tuple[FinishedStatus, str | None]:
    """How the run ends when no edge fires out of ``done``'s node, not a terminal node
    that succeeded, on the main path: failed with the node, or, when the graph names its
    terminal nodes, failed for stopping short of them; else completed."""
    if not done.success:
        return "failed", f"node {done.node_id!r} failed: {failure(done)}"
    if graph.terminal_nodes:
        return "failed", f"no edge out of {done.node_id!r} fired and it is not a terminal node"
    return "completed", None


def rejection(
    graph: GraphSpec, node_id: str, branch: str | None
) -> tuple[NodeFailed, NodeDone, list[Route]]:
    """A pause node whose approval was rejected, due: its failure (for good), as recorded
    and as the executor follows it, and the edges that fire: its ``on_failure`` edges
    only, since an ``always`` edge would pass the refusal by (none: the run is cancelled).
    """
    done = NodeDone(
        node_id=node_id,
        attempt=1,
        branch=branch,
        success=False,
        error=REJECTED,
        error_type="ApprovalRejected",
        retryable=False,
    )
    failed, _ = node_failed(graph, NodeSpec(id=node_id), done)
    routes = [r for r in failure_routes(graph, node_id) if r.condition == "on_failure"]
    return failed, done, routes
