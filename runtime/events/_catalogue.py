"""The runtime's event catalogue: the bodies of a run's log, a tagged union with stable tags.

Each class is registered with the store's codec (:func:`eventstore.register_event_type`)
when the package is imported (``_run_index``), together with how it changes the run
listing's status: the store itself knows nothing of runs' meaning. A body's identity on
disk is its tag
(``"node.started"``) and its schema version; when a body's shape changes, bump its
``schema_version`` and register an upcaster (:func:`eventstore.register_upcaster`).

The bodies every step makes (``node.started``, ``memory.written``, ``node.completed``,
``edge.taken``) are ``gc=False`` structs: a body holds names, numbers and a written value
made before it, never itself or anything holding it, so it takes part in no reference
cycle, and the cyclic collector need not count or track the four a step makes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

from eventstore import EventBody, register_upcaster

from ..providers._base import ToolCall, Usage
from ._branch_events import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchJudgeWarning,
    BranchToolResult,
    BranchTurn,
)

#: How a run ended (``run.finished``), and how well: "clean" (no node failed for good),
#: "degraded" (a node failed, a fallback edge reached the end) or "failed".
FinishedStatus = Literal["completed", "failed"]
Quality = Literal["clean", "degraded", "failed"]
#: Why a run paused: a pause node's gate (hitl), a pause request (user), a node's ask.
PauseReason = Literal["hitl", "user", "input"]
#: What a failed branch does to its fan-out (GraphSpec.fan_out_policy).
FanOutPolicy = Literal["fail_all", "continue_others", "wait_all"]
#: A judge's verdict (``judge.verdict``): what the node does next, and which check gave it
#: ("bail_out": a tool turn, not judged; "custom": a custom judge; "override": ACCEPT
#: turned into RETRY for missing outputs; the rest the implicit cascade's levels and the
#: loop's own verdicts).
Action = Literal["accept", "retry", "escalate"]
Level = Literal[
    "bail_out", "structural", "quality", "custom", "override", "max_iterations", "stall"
]

__all__ = [
    "Action",
    "AnyEvent",
    "ApprovalGranted",
    "ApprovalRejected",
    "BranchFinished",
    "BranchJudgeWarning",
    "BranchToolResult",
    "BranchTurn",
    "BranchesForked",
    "BranchesJoined",
    "BranchesJudged",
    "BranchesSelected",
    "ConversationCompacted",
    "EdgeTaken",
    "GraphReplaced",
    "InputInjected",
    "Level",
    "LlmTurn",
    "MemoryWritten",
    "MessageAdded",
    "NodeCompleted",
    "NodeFailed",
    "NodeStarted",
    "OutputSet",
    "PaidUsage",
    "PauseRequested",
    "RunCancelled",
    "RunFinished",
    "RunForked",
    "RunPaused",
    "RunResumed",
    "RunStarted",
    "RunUnrunnable",
    "StallDetected",
    "ToolCallRecord",
    "ToolResult",
    "Verdict",
    "VerificationRecorded",
]


#: One tool call the model asked for in a turn: the providers' own :class:`ToolCall`, so a
#: call goes from the model's answer to the log and back into a request unconverted. Its
#: ``raw_arguments`` (the text of arguments that were no JSON object; None otherwise, and
#: in logs written before it existed) is an added field with a default, which old bodies
#: read as is: ``llm.turn`` and ``branch.turn`` keep their schema version.
ToolCallRecord = ToolCall


class RunStarted(EventBody, frozen=True, tag="run.started"):
    """A run began. ``graph`` is its spec as builtins; the runtime records the compact form
    (fields at their default left out) and ``graph_hash`` hashes the full canonical form."""

    graph: dict[str, Any]
    graph_hash: str
    entry: str
    goal: dict[str, Any] | None = None
    input: dict[str, Any] = {}


class GraphReplaced(EventBody, frozen=True, tag="graph.replaced"):
    """A run at rest moved to another graph (``Runtime.resume(run, graph=NEW)``): from here
    on it runs under ``graph`` (compact, as in ``run.started``; ``graph_hash`` its hash),
    replacing the graph hashed ``previous_hash``. ``divergences`` is how many the replay
    of the run against the new graph found (0, unless the move was ``forced``)."""

    graph: dict[str, Any]
    graph_hash: str
    previous_hash: str | None = None
    forced: bool = False
    divergences: int = 0


class NodeStarted(EventBody, frozen=True, gc=False, tag="node.started"):
    """The node_start checkpoint. ``visit`` is 1 for the node's first visit in the run."""

    node_id: str
    visit: int
    attempt: int = 1
    branch: str | None = None


class LlmTurn(EventBody, frozen=True, tag="llm.turn"):
    """One model turn. ``stop``: why the model stopped (``runtime.providers._base.Stop``;
    None in logs written before it was recorded)."""

    node_id: str
    iteration: int
    text: str
    tool_calls: list[ToolCallRecord]
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    model: str = ""
    stop: str | None = None
    input_cached: int = 0
    input_cache_write: int = 0


class ToolResult(EventBody, frozen=True, tag="tool.result"):
    node_id: str
    call_id: str
    name: str
    content: str
    is_error: bool = False


class MessageAdded(EventBody, frozen=True, tag="conversation.message"):
    """A message put into the conversation (``role``: user, system or assistant)."""

    node_id: str
    role: str
    content: str
    kind: str = "user"


class ConversationCompacted(EventBody, frozen=True, tag="conversation.compacted"):
    """The first ``upto`` conversation entries were replaced by ``summary``."""

    node_id: str
    upto: int
    summary: str


class OutputSet(EventBody, frozen=True, tag="output.set"):
    node_id: str
    key: str
    value: Any


class Verdict(EventBody, frozen=True, tag="judge.verdict"):
    """A judge's verdict on a node's turn. Version 2 types ``action`` and ``level``; a
    version 1 body (plain strings) is read through :func:`_verdict_v1` (see there). The
    token counts are those of the model calls the verdict cost (the quality check's, each
    attempt's, a failed or cut one's too; a custom judge's own, when it reports them); 0
    in older logs, which recorded none (added fields with defaults: the version stays)."""

    schema_version: ClassVar[int] = 2

    node_id: str
    iteration: int
    action: Action
    level: Level
    feedback: str = ""
    confidence: float | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    input_cached: int = 0
    input_cache_write: int = 0


class StallDetected(EventBody, frozen=True, tag="node.stalled"):
    node_id: str
    iteration: int
    signature: str


class MemoryWritten(EventBody, frozen=True, gc=False, tag="memory.written"):
    """A write to shared memory; ``op`` is replace, append or merge."""

    key: str
    value: Any
    op: str = "replace"
    node_id: str | None = None
    branch: str | None = None


class NodeCompleted(EventBody, frozen=True, gc=False, tag="node.completed"):
    """The node_complete checkpoint."""

    node_id: str
    branch: str | None = None


class PaidUsage(Usage, frozen=True, kw_only=True):
    """The tokens of model calls a failed node attempt paid for and no other event records
    (``node.failed``'s ``usage``), and what they were for: ``purpose`` is their requests'
    (``"turn"``, ``"judge"`` or ``"verify"``), under which a report counts them."""

    purpose: str


class NodeFailed(EventBody, frozen=True, tag="node.failed"):
    """A node attempt failed. ``usage``: the tokens of the model calls it paid for that no
    other event records (a :class:`PaidUsage`): an LLM node's turn whose answer could not
    be read but said what it cost, the Level 2 judge's calls of a turn its attempt's
    ``timeout`` cut before the verdict was recorded, an ``llm_judge`` verifier's evaluator
    answer that could not be read; None otherwise, and in older logs (an added field
    with a default: the version stays 1)."""

    node_id: str
    error: str
    error_type: str
    attempt: int
    will_retry: bool
    branch: str | None = None
    usage: PaidUsage | None = None


class EdgeTaken(EventBody, frozen=True, gc=False, tag="edge.taken"):
    """An edge fired. ``judge_error``: an ``llm_decide`` choice whose model call failed
    or answered no candidate, so the fallback edge fired (the run is then at best
    degraded). ``usage``: the tokens of the ``llm_decide`` call that chose it (a cut
    one's too); None for every other edge, and in older logs. One field, not four: an
    edge is taken at every step, and a plain one's ``"usage":null`` is all it adds."""

    source: str
    target: str
    edge_index: int
    condition: str
    reason: str = ""
    judge_error: str | None = None
    usage: Usage | None = None


class BranchesForked(EventBody, frozen=True, tag="branches.forked"):
    source: str
    targets: list[str]
    join: str | None
    policy: FanOutPolicy


class BranchesJoined(EventBody, frozen=True, tag="branches.joined"):
    join: str | None
    completed: list[str]
    failed: list[str]


class RunPaused(EventBody, frozen=True, tag="run.paused"):
    """``reason``: hitl, user or input."""

    reason: PauseReason
    node_id: str | None


class PauseRequested(EventBody, frozen=True, tag="run.pause_requested"):
    """A pause of a running run was asked for from outside its owner's process (another
    process, another runtime on the store). The owner obeys it as it obeys an in-process
    pause: at its next node boundary, once the node running now has finished (its outputs
    kept), it records the one ``run.paused`` (reason ``user``). Changes no status."""

    by: str = ""


class InputInjected(EventBody, frozen=True, tag="input.injected"):
    data: dict[str, Any]


class ApprovalGranted(EventBody, frozen=True, tag="approval.granted"):
    """A person let the run through the gate of pause node ``node_id``: ``by`` names who,
    ``input`` is what the approval merged into memory. The only event that opens a gate;
    the run is then running (its owner, or any worker, continues it)."""

    node_id: str
    by: str
    input: dict[str, Any] = {}


class ApprovalRejected(EventBody, frozen=True, tag="approval.rejected"):
    """A person refused the gate of pause node ``node_id``: ``by`` names who, ``reason``
    says why. Final: the gate never opens. The node's ``on_failure`` edge fires when it
    has one (the run is then running); otherwise a ``run.cancelled`` follows."""

    node_id: str
    by: str
    reason: str = ""


class RunResumed(EventBody, frozen=True, tag="run.resumed"):
    note: str = ""
    #: The node whose ask for input the resume's input answers, its pause unrecorded.
    input_for: str | None = None


class RunCancelled(EventBody, frozen=True, tag="run.cancelled"):
    node_id: str | None
    reason: str = ""


class RunFinished(EventBody, frozen=True, tag="run.finished"):
    """``status``: completed or failed; ``quality``: clean, degraded or failed. The
    ``goal_*`` token counts are those of the goal evaluator's calls that scored
    ``goal_outcome`` (not the run's: see ``runtime.events._tokens``; 0 in older logs)."""

    status: FinishedStatus
    quality: Quality
    total_retries: int = 0
    error: str | None = None
    goal_outcome: dict[str, Any] | None = None
    goal_input_tokens: int = 0
    goal_output_tokens: int = 0
    goal_input_cached: int = 0
    goal_input_cache_write: int = 0


class RunForked(EventBody, frozen=True, tag="run.forked"):
    """This run's events before this one are a copy of ``source_run_id``'s seqs 1 to
    ``source_seq``; ``source_hash`` is the source's chain hash at that seq ("" for a
    source kept in memory only). The fold of the copy is the state; a copy that ends in
    the middle of the run (running) leaves its due nodes before their pause gates."""

    source_run_id: str
    source_seq: int
    source_hash: str


class RunUnrunnable(EventBody, frozen=True, tag="run.unrunnable"):
    """A worker claimed this run and cannot execute it: ``reason`` says what the run's
    graph names that the worker lacks (a function, tool, judge or provider, an import it is
    not allowed) and how to allow it; ``worker`` names the worker. A worker records each
    distinct reason once and gives the run up; it stays running and waits for a worker
    that can execute it. The fold keeps the reasons (``RunState.unrunnable``) to show
    them and changes nothing else."""

    reason: str
    worker: str


class VerificationRecorded(EventBody, frozen=True, tag="verifier.result"):
    """A verifier node's result for one attempt of one visit.

    ``result`` is the VerificationResult as a mapping; for ``llm_judge``, ``reply`` is the
    evaluator's raw answer with its token usage (the cached counts as ``llm.turn``'s, 0 in
    older logs) and model. ``stop`` is ``"max_tokens"`` when that answer was cut at the
    token cap twice: no result (``passed`` False, the reason in ``result``), recorded for
    its tokens, and the attempt failed with a TruncatedError (None otherwise, and in older
    logs). ``error``: why the evaluator's reply is no score in 0..1 (not passed: a check
    that did not run), None otherwise and in older logs. The verifier's outputs are
    MemoryWritten events like any node's; the fold keeps this result in the node's visit
    (by attempt), where a rerun of an ``llm_judge`` verifier's attempt after a crash or a
    cancel finds it and reuses it instead of asking the evaluator again.
    """

    node_id: str
    visit: int
    attempt: int
    passed: bool
    result: dict[str, Any]
    branch: str | None = None
    reply: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    stop: str | None = None
    input_cached: int = 0
    input_cache_write: int = 0
    error: str | None = None


AnyEvent = (
    RunStarted
    | NodeStarted
    | LlmTurn
    | ToolResult
    | MessageAdded
    | ConversationCompacted
    | OutputSet
    | Verdict
    | StallDetected
    | MemoryWritten
    | NodeCompleted
    | NodeFailed
    | EdgeTaken
    | BranchesForked
    | BranchesJoined
    | RunPaused
    | PauseRequested
    | InputInjected
    | ApprovalGranted
    | ApprovalRejected
    | RunResumed
    | RunCancelled
    | RunFinished
    | RunForked
    | GraphReplaced
    | RunUnrunnable
    | VerificationRecorded
    | BranchTurn
    | BranchToolResult
    | BranchFinished
    | BranchesJudged
    | BranchJudgeWarning
    | BranchesSelected
)


_ACTIONS = frozenset(get_args(Action))
_LEVELS = frozenset(get_args(Level))


def _verdict_v1(raw: dict[str, Any]) -> dict[str, Any]:
    """A version 1 ``judge.verdict`` (``action`` and ``level`` plain strings) as version 2.

    The runtime wrote only the values of :data:`Action` and :data:`Level`, but a custom
    judge's verdict was not checked: its action may differ in case (``"ACCEPT"``), or be
    another word, which the node then took as an escalation. Such a body reads as what
    the node did with it: the word lowercased when it is an action, else ``"escalate"``;
    a level that is none of :data:`Level` reads as ``"custom"``.
    """
    action = str(raw.get("action", "")).strip().lower()
    level = str(raw.get("level", "")).strip().lower()
    return {
        **raw,
        "action": action if action in _ACTIONS else "escalate",
        "level": level if level in _LEVELS else "custom",
    }


register_upcaster("judge.verdict", 1, _verdict_v1)
