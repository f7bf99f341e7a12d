"""What the fronts show of a run: the records of the read model, as msgspec Structs.

The CLI prints them, the HTTP API encodes them (and describes them in its OpenAPI
document), the dashboard renders them. Every record that comes from a run's log carries
the :class:`ChainStatus` of the read that made it: what the read checked of the hash
chain, and where it broke.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from eventstore import Event, event_tag

from ..control._ownership import Ownership
from ..events._state import ForkOrigin, RunState

__all__ = [
    "ChainStatus",
    "DecisionView",
    "EventPage",
    "EventRecord",
    "JudgeFailureView",
    "JudgeFailures",
    "NodeFailureView",
    "NodeVerdicts",
    "PauseView",
    "RunDetail",
    "RunList",
    "RunReport",
    "RunSummary",
    "StallView",
    "StateView",
    "Tokens",
    "VerdictView",
]

#: What a read checked of a run's hash chain: ``tail`` from the snapshot it started at (or
#: the first event it read) to the run's last seq and hash, ``full`` every event of the run.
ChainScope = Literal["tail", "full"]


class ChainStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The hash-chain check of one read. ``ok`` is False when what the read went through
    does not chain (an edited, removed or reordered event) or does not end where the run's
    record says (a cut log); ``broken_at`` is the first bad seq and ``reason`` the one-line
    reason ``verify`` gives. ``from_seq`` is the first seq the read checked: events before
    it (covered by a snapshot) are checked by ``verify`` only."""

    ok: bool
    scope: ChainScope
    from_seq: int
    to_seq: int
    broken_at: int | None = None
    reason: str | None = None


class EventRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One event in its one JSON form (``magistrate export`` lines, the HTTP API's event
    pages and streams): the envelope, the body's stable tag as ``type``, and ``body``, the
    body's fields without ``type``. ``docs/verify_export.py`` recomputes ``hash`` from it."""

    run_id: str
    seq: int
    position: int
    ts: float
    type: str
    version: int
    prev_hash: str
    hash: str
    body: dict[str, Any]

    @classmethod
    def of(cls, event: Event) -> EventRecord:
        """The record of a stored event."""
        body: dict[str, Any] = msgspec.to_builtins(event.body)
        body.pop("type", None)
        return cls(
            run_id=event.run_id,
            seq=event.seq,
            position=event.position,
            ts=event.ts,
            type=event_tag(event.body),
            version=event.version,
            prev_hash=event.prev_hash,
            hash=event.hash,
            body=body,
        )


class EventPage(msgspec.Struct, frozen=True, kw_only=True):
    """Events with ``seq > after`` that match the filters, in seq order; ``next_after`` (the
    ``after`` of the next page) is None at the end. A page reads at most 10,000 events of
    the log, so with filters that match few of them it may be short, or empty, and still
    have a ``next_after``. ``chain`` checks the events the page read."""

    events: list[EventRecord]
    next_after: int | None
    last_seq: int
    chain: ChainStatus


class PauseView(msgspec.Struct, frozen=True, kw_only=True):
    """Why a paused run waits: ``reason`` (hitl, user, input), the node, the keys it reads
    (``reads``) and those of them memory still lacks (``waiting_for``: what an approval
    must give). What an approver sees: ``values``, memory's current value of each key
    read that memory holds, and the node's ``description`` and ``success_criteria``.

    A listing's row holds the values that fit in 2,048 bytes of JSON together (taken in
    ``reads`` order); ``values_omitted`` names the keys memory holds whose values
    it leaves out, which the run's detail gives whole (its ``values_omitted`` is empty),
    so one run's large value does not weigh on every page of runs. It holds the first 500
    characters of a longer ``description``, followed by "…", and of the
    ``success_criteria`` the criteria that fit in 500 characters together (the first that
    does not is cut there, followed by "…", and those after it are left out);
    ``shortened`` names what it cut (``description``, ``success_criteria``), which the
    run's detail gives whole (its ``shortened`` is empty)."""

    reason: str
    node_id: str | None
    waiting_for: list[str] = []
    reads: list[str] = []
    values: dict[str, Any] = {}
    description: str = ""
    success_criteria: list[Any] = []
    values_omitted: list[str] = []
    shortened: list[str] = []


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A row of the runs list. ``created`` and ``updated`` are Unix times in seconds.

    ``status`` is the log's. ``owner`` and ``ownership`` come from the store's claims, read
    with the row, not from the log: ``owner`` is the worker id whose claim on the run is
    unexpired, or None. ``ownership`` is ``claimed`` (``owner`` holds it), ``waiting`` (a
    running run that no live claim holds: nothing executes it until a worker claims it),
    ``unclaimed`` (not running, not claimed), or ``unrecorded`` (the store records no
    ownership: a running run may be executing in the process that started it).
    ``origin`` is the run a fork was copied from (the listing's); a run's detail also
    gives ``forked_from``, the source's seq and chain hash there. ``unrunnable`` (read from
    the log, in a run's detail; empty in a listing's row) lists why workers that claimed
    the run could not execute it, each reason once. ``draining`` (the store's claims too):
    the nodes whose abandoned attempts still run in the owner's process, which keeps the
    claim until they end (a resume elsewhere is refused meanwhile), and since when
    (``draining_since``); None otherwise. A listing's row holds the first 500 characters
    of a longer ``error``, followed by "…", and ``shortened`` is ``["error"]``; the run's
    detail gives it whole (its ``shortened`` is empty).
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
    origin: str | None = None
    forked_from: ForkOrigin | None = None
    unrunnable: list[str] = []
    draining: str | None = None
    draining_since: float | None = None
    shortened: list[str] = []


class RunList(msgspec.Struct, frozen=True, kw_only=True):
    """One page of runs, newest first; ``next_cursor`` (the ``cursor`` of the next page) is
    None on the last page."""

    runs: list[RunSummary]
    next_cursor: str | None


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


class JudgeFailureView(msgspec.Struct, frozen=True, kw_only=True):
    """One check that did not run (or, ``overruled``, was not passed), at event ``seq``: its
    kind (judge, route, branch_judge, verify, goal, overruled), the node it was to check
    (None for the goal) and why."""

    seq: int
    kind: str
    node_id: str | None
    reason: str


class JudgeFailures(msgspec.Struct, frozen=True, kw_only=True):
    """The run's checks that did not run (judge failures, which keep a completed run from
    "clean"): how many, by kind, and the newest 100 with their reasons, oldest first."""

    total: int
    by_kind: dict[str, int]
    reasons: list[JudgeFailureView]


class DecisionView(msgspec.Struct, frozen=True, kw_only=True):
    """A decision at a gate, event ``seq`` appended at ``ts`` (Unix seconds): ``approved``
    (``approval.granted``, with the ``input`` the approval gave) or ``rejected``
    (``approval.rejected``, with its ``reason``), of the gate before ``node_id``, by whom
    (``by``: ``approve --by``, the API's ``by``)."""

    seq: int
    ts: float
    decision: Literal["approved", "rejected"]
    node_id: str
    by: str
    input: dict[str, Any] = {}
    reason: str = ""


class NodeFailureView(msgspec.Struct, frozen=True, kw_only=True):
    """A node that failed for good at event ``seq`` (its ``node.failed`` with no retry
    left: an attempt retried is not one): the attempt, the error's type (``Escalated`` for
    an LLM node its judge or its bound escalated) and message."""

    seq: int
    node_id: str
    attempt: int
    error_type: str
    error: str


class NodeVerdicts(msgspec.Struct, frozen=True, kw_only=True):
    """An LLM node's judged history in log order: its verdicts and stall warnings (the
    newest 500 of each; ``verdicts`` includes its tool turns, level ``bail_out``), how many
    judged verdicts it got in all (``total_verdicts``) and how many tool turns (turns that
    called tools, which nobody judges: ``tool_turns``)."""

    node_id: str
    verdicts: list[VerdictView]
    stalls: list[StallView]
    total_verdicts: int
    tool_turns: int = 0


class RunDetail(msgspec.Struct, frozen=True, kw_only=True):
    """A run as its log folds: summary, graph, where it is, memory, verdicts and goal outcome.

    ``current`` lists the nodes running or due next; ``running`` those of them started and
    not finished (a cancelled, paused or waiting run's were interrupted: a resume runs them
    again); ``visit_counts`` counts each node's starts; ``edges_taken`` lists each edge
    taken at least once as ``"source>target"``;
    ``event_counts`` counts events by type; ``turns`` and ``tokens`` count LLM turns and
    their tokens over the run. ``judge_failures``: the checks that did not run, None when
    every check ran. ``chain`` is the check of the read that folded it.
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
    running: list[str]
    visit_counts: dict[str, int]
    failed_nodes: list[str]
    total_retries: int
    llm_nodes: list[NodeVerdicts]
    edges_taken: list[str]
    event_counts: dict[str, int]
    chain: ChainStatus
    judge_failures: JudgeFailures | None = None


class StateView(msgspec.Struct, frozen=True, kw_only=True):
    """A run's folded state (as :meth:`runtime.Runtime.get_state` gives it) and the check
    of the read that folded it."""

    state: RunState
    chain: ChainStatus


class Tokens(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens of model calls: ``input`` and ``output``, and the input tokens read from
    (``input_cached``) and written to (``input_cache_write``) the provider's prompt cache
    (Anthropic counts these apart from ``input``; OpenAI's ``input`` includes the cached
    ones), as the providers report them."""

    input: int
    output: int
    input_cached: int = 0
    input_cache_write: int = 0


class RunReport(msgspec.Struct, frozen=True, kw_only=True):
    """A run for an auditor (``magistrate show``): where it went, what the judge said, and
    the check of its whole hash chain (``chain.scope`` is ``full``). ``verdicts`` counts
    judged verdicts by action (tool-call turns' bail-outs left out); ``status`` is the
    fold's, ``listed_status`` the listing's; ``draining`` as in :class:`RunSummary`.

    ``turns`` counts the ``llm.turn`` events (a parallel node's winning branch's turns,
    recorded again as the node's own, included). A fork's ``turns``, ``tokens`` and
    ``verdicts`` count its own only, not those copied from its source (counted in the
    source's report).
    ``tokens`` sums the tokens of every model
    call the log records as paid: LLM node turns, parallel branches' turns, branch judges,
    Level 2 judges, ``llm_decide`` routing, ``llm_judge`` verifiers and the goal's
    evaluator (cut and failed calls that were paid for included; the winning branch's
    turns recorded again carry none, so nothing counts twice). ``tokens_by_purpose``
    splits it by what the calls were for, the requests' ``purpose``: ``turn``,
    ``branch``, ``branch_judge``, ``judge``, ``route``, ``verify``, ``outcome`` (the
    goal); a purpose with no tokens is left out. ``tokens_by_node`` splits it by the node
    the calls were made for (a route's under the node it leaves; the goal's evaluator
    belongs to no node and is left out), in the order the nodes first paid.

    ``decisions``: every approval and rejection in the log, in order (a fork's copied
    ones included: its seq is at most ``forked_from.seq``); ``node_failures``: the nodes
    that failed for good, in order (with ``judge_failures``, why a completed run is
    ``degraded``).
    """

    run_id: str
    graph: str | None
    graph_hash: str | None
    status: str
    quality: str | None
    owner: str | None
    ownership: Ownership | None
    created: float
    updated: float
    events: int
    path: list[str]
    pending: list[str]
    paused: PauseView | None
    error: str | None
    total_retries: int
    turns: int
    tokens: Tokens
    verdicts: dict[str, int]
    goal_outcome: dict[str, Any] | None
    forked_from: ForkOrigin | None
    #: Why workers that claimed the run could not execute it (``run.unrunnable``).
    unrunnable: list[str]
    listed_status: str | None
    chain: ChainStatus
    #: The checks that did not run (None: every check ran), as RunDetail's.
    judge_failures: JudgeFailures | None = None
    draining: str | None = None
    draining_since: float | None = None
    tokens_by_purpose: dict[str, Tokens] = {}
    tokens_by_node: dict[str, Tokens] = {}
    decisions: list[DecisionView] = []
    node_failures: list[NodeFailureView] = []
