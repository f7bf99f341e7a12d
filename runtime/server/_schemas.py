"""The JSON shapes of the HTTP API: request bodies (validated with msgspec) and responses.

Every shape here is a msgspec Struct, so the same classes decode requests, encode responses
and produce the OpenAPI description's schemas (``msgspec.json.schema_components``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from .._ownership import Ownership

__all__ = [
    "ApiError",
    "ApproveRequest",
    "CancelRequest",
    "EventPage",
    "EventView",
    "ForkRequest",
    "GraphInfo",
    "GraphList",
    "NodeVerdicts",
    "PauseView",
    "ResumeRequest",
    "RunDetail",
    "RunList",
    "RunRef",
    "RunSummary",
    "StallView",
    "StartRequest",
    "VerdictView",
    "VerifyView",
]

_RunId = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")]


class _Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of request bodies: unknown fields are refused, so a typo is a 422, not a no-op."""


class StartRequest(_Body, frozen=True):
    """Start a run of the registered graph ``graph`` with ``input`` as its initial memory."""

    graph: Annotated[str, msgspec.Meta(min_length=1)]
    input: dict[str, Any] = {}
    run_id: _RunId | None = None


class ResumeRequest(_Body, frozen=True):
    """Resume a paused, cancelled or crashed run; ``input`` is injected first."""

    input: dict[str, Any] = {}


class ApproveRequest(_Body, frozen=True):
    """Approve a paused run: inject ``input`` into its memory and resume it."""

    input: dict[str, Any] = {}


class CancelRequest(_Body, frozen=True):
    reason: Annotated[str, msgspec.Meta(max_length=2000)] = ""


class ForkRequest(_Body, frozen=True):
    """Start a new run whose log is a copy of the first ``at_seq`` events of this one."""

    at_seq: Annotated[int, msgspec.Meta(ge=1, le=2**53)]
    input: dict[str, Any] = {}


class ApiError(msgspec.Struct, frozen=True, kw_only=True):
    """Every 4xx answer: ``error`` is a stable code, ``detail`` a sentence for people."""

    error: str
    detail: str
    run_id: str | None = None
    status: str | None = None


class RunRef(msgspec.Struct, frozen=True, kw_only=True):
    """A run a request started or acted on, and what happened to it."""

    run_id: str
    action: str


class PauseView(msgspec.Struct, frozen=True, kw_only=True):
    """Why a paused run waits: ``reason`` (hitl, user, input), the node, the keys it reads."""

    reason: str
    node_id: str | None
    waiting_for: list[str] = []


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A row of the runs list. ``created`` and ``updated`` are Unix times in seconds.

    ``status`` is the log's. ``owner`` and ``ownership`` come from the store's claims, read
    with the row, not from the log: ``owner`` is the worker id whose claim on the run is
    unexpired, or None. ``ownership`` is ``claimed`` (``owner`` holds it), ``waiting`` (a
    running run that no live claim holds: nothing executes it until a worker claims it),
    ``unclaimed`` (not running, not claimed), or ``unrecorded`` (the store records no
    ownership: a running run may be executing in the process that started it).
    """

    run_id: str
    status: str
    owner: str | None
    ownership: Ownership
    quality: str | None
    graph_id: str | None
    graph_hash: str | None
    created: float
    updated: float
    last_seq: int
    paused: PauseView | None = None
    error: str | None = None


class RunList(msgspec.Struct, frozen=True, kw_only=True):
    """One page of runs, newest first; ``next_cursor`` (the ``cursor`` of the next page) is
    None on the last page."""

    runs: list[RunSummary]
    next_cursor: str | None


class EventView(msgspec.Struct, frozen=True, kw_only=True):
    """A stored event; ``body`` holds its ``type`` tag and the fields of that type."""

    run_id: str
    seq: int
    position: int
    ts: float
    version: int
    prev_hash: str
    hash: str
    body: dict[str, Any]


class EventPage(msgspec.Struct, frozen=True, kw_only=True):
    """Events with ``seq > after`` that match the filters, in seq order; ``next_after`` (the
    ``after`` of the next page) is None at the end. A page reads at most 10,000 events of
    the log, so with filters that match few of them it may be short, or empty, and still
    have a ``next_after``."""

    events: list[EventView]
    next_after: int | None
    last_seq: int


class VerdictView(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    iteration: int
    action: str
    level: str
    feedback: str
    confidence: float | None
    error: str | None


class StallView(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    iteration: int
    signature: str


class NodeVerdicts(msgspec.Struct, frozen=True, kw_only=True):
    """An LLM node's judged history in log order: its verdicts and stall warnings (the
    newest 500 of each) and how many verdicts it got in all."""

    node_id: str
    verdicts: list[VerdictView]
    stalls: list[StallView]
    total_verdicts: int


class VerifyView(msgspec.Struct, frozen=True, kw_only=True):
    """The hash chain check: ``ok`` with ``checked`` events, or where it first breaks."""

    run_id: str
    ok: bool
    checked: int
    broken_at: int | None
    reason: str | None


class RunDetail(msgspec.Struct, frozen=True, kw_only=True):
    """A run as its log folds: summary, graph, where it is, memory, verdicts and goal outcome.

    ``current`` lists the nodes running or due next; ``visit_counts`` counts each node's
    starts; ``edges_taken`` lists each edge taken at least once as ``"source>target"``;
    ``event_counts`` counts events by type.
    """

    summary: RunSummary
    graph: dict[str, Any] | None
    goal: dict[str, Any] | None
    goal_outcome: dict[str, Any] | None
    input: dict[str, Any]
    memory: dict[str, Any]
    path: list[str]
    current: list[str]
    pending: list[str]
    visit_counts: dict[str, int]
    failed_nodes: list[str]
    total_retries: int
    llm_nodes: list[NodeVerdicts]
    edges_taken: list[str]
    event_counts: dict[str, int]


class GraphInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A graph the server can start: its name and its spec as builtins."""

    name: str
    graph_hash: str
    spec: dict[str, Any]


class GraphList(msgspec.Struct, frozen=True, kw_only=True):
    graphs: list[GraphInfo]


RunStatusFilter = Literal["new", "running", "paused", "cancelled", "completed", "failed"]
QualityFilter = Literal["clean", "degraded", "failed"]
