"""What a recorded run can serve again: its model answers by where they were asked, its
tool results, its function nodes' outcomes, its custom judges' verdicts, the outside
actions (approvals, resumes, cancels) that moved it, the input injected into it while it
ran, and the order its parallel branches finished in.

Built in one pass over the recorded events, following each node's visit as the fold
does (``node.started`` carries it), so an answer is found by its place (node, visit,
iteration), never by the global order of calls.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any, Final, Literal, TypeAlias

import msgspec

from eventstore import Event, SnapshotTaken

from .._errors import (
    MalformedResponseError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeoutError,
)
from ..events._catalogue import (
    ApprovalGranted,
    ApprovalRejected,
    BranchesJudged,
    BranchFinished,
    BranchToolResult,
    BranchTurn,
    EdgeTaken,
    InputInjected,
    LlmTurn,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    ToolResult,
    Verdict,
    VerificationRecorded,
)
from ..providers._base import LlmResponse, ToolCall, Usage

__all__ = [
    "PROVIDER_FAILURES",
    "TIMED_OUT",
    "Control",
    "FunctionOutcome",
    "RecordedRun",
    "Served",
    "ToolAnswer",
]

#: The errors a node fails with when its model call failed after the provider's retries
#: (no turn recorded), by name: a replay raises the same again at that call.
PROVIDER_FAILURES: Final = {
    cls.__name__: cls
    for cls in (ProviderError, ProviderHTTPError, ProviderTimeoutError, MalformedResponseError)
}

#: A recorded answer: the model's response, or the error its call ended with.
Served = LlmResponse | str
#: How a recorded tool call that ran past its time limit is served (it has no result).
TIMED_OUT: Final = "timed out"
#: A recorded tool call's answer: its result text and whether it is an error, or TIMED_OUT.
ToolAnswer: TypeAlias = tuple[str, bool] | Literal["timed out"]


class FunctionOutcome(msgspec.Struct, frozen=True):
    """One recorded attempt of a function node: its partial outputs (``ctx.set_output``),
    then its outputs (memory writes) or its failure."""

    partial: list[tuple[str, Any]]
    outputs: dict[str, Any] | None
    error: str = ""
    error_type: str = ""
    #: The seq of its ``node.completed`` or ``node.failed``: the order attempts finished in.
    at: int = 0


class Control(msgspec.Struct, frozen=True):
    """An action from outside the run at a pause: approve, reject, resume (with the
    input injected before it, or right after it, as ``Runtime.resume(input=...)``
    records it) or cancel; ``seq`` is the recorded event's. ``injected``: the input
    injected at a gate before it was approved or rejected (an approval's own input is
    ``input``)."""

    kind: str
    seq: int
    by: str = ""
    reason: str = ""
    input: dict[str, Any] = {}
    injected: dict[str, Any] = {}


def _bookkeeping(body: Any) -> bool:
    """An event that records nothing of the run's course (a snapshot's binding)."""
    return isinstance(body, SnapshotTaken)


def _key(value: Any) -> str:
    return msgspec.json.encode(value, order="sorted").decode()


class RecordedRun:
    """The index of one recorded run (see module docs)."""

    def __init__(self, events: Sequence[Event]) -> None:
        first = events[0].body if events else None
        if not isinstance(first, RunStarted):
            raise ValueError("the log does not start with run.started")
        self.events = list(events)
        self.started: RunStarted = first
        self.turns: dict[tuple[str, int, int], Served] = {}
        #: A node's model call that failed with a provider error (recorded as the node's
        #: failure, with no turn): (node, visit, turn) -> (error type, error).
        self.turn_failures: dict[tuple[str, int, int], tuple[str, str]] = {}
        #: The same of a verifier's evaluator call (node, visit, attempt) and of a parallel
        #: branch's (node, visit, round/branch, turn), recorded as the verifier's failure
        #: and the branch's end.
        self.verify_failures: dict[tuple[str, int, int], tuple[str, str]] = {}
        self.branch_failures: dict[tuple[str, int, str, int], tuple[str, str]] = {}
        self.judged: dict[tuple[str, int, int], Served] = {}
        self.custom: dict[tuple[str, int, int], Verdict] = {}
        self.routes: dict[tuple[str, int], Served] = {}
        self.verified: dict[tuple[str, int, int], Served] = {}
        self.goal: dict[str, Served] = {}
        self.tools: dict[str, deque[ToolAnswer]] = defaultdict(deque)
        self.functions: dict[tuple[str, int, int], FunctionOutcome] = {}
        self.controls: list[Control] = []
        self.first_turn: dict[str, int] = {}
        self.first_judged: dict[str, int] = {}
        self.branch_turns: dict[tuple[str, int, str, int], Served] = {}
        self.branch_judged: dict[tuple[str, int, str], Served] = {}
        #: Each round's branches (node, visit, round) in the order they finished, with
        #: the turns each had then.
        self.finishes: dict[tuple[str, int, int], list[tuple[int, int]]] = defaultdict(list)
        #: Input injected while the run ran (not at a pause for input or a gate): its
        #: seq and data, to be injected again at the same point of the log.
        self.injected: list[tuple[int, dict[str, Any]]] = []
        self.forked = False
        #: The seq its log ends at when the run did not finish or stop at a pause there
        #: (cancelled, paused by a user, crashed, still running): the record is cut.
        self.cut_at: int | None = None
        #: The seq of the user's pause the run rests at, if it does: what the run did is
        #: compared up to there (its next node starting is where it would go on).
        self.rests_at: int | None = None
        self._index()

    def _index(self) -> None:
        visit: dict[str, int] = {}
        attempt: dict[str, int] = {}
        calls: dict[str, ToolCall] = {}
        # The calls of each node's (and branch's) last turn that have no result yet.
        unanswered: dict[tuple[Any, ...], dict[str, ToolCall]] = {}
        partial: dict[tuple[str, int, int], list[tuple[str, Any]]] = defaultdict(list)
        writes: dict[tuple[str, int], dict[str, Any]] = defaultdict(dict)
        routes: dict[str, int] = defaultdict(int)
        failed: dict[tuple[str, int, int], NodeFailed] = {}
        started: list[tuple[str, int, int]] = []
        in_branch: set[tuple[str, int]] = set()  # visits run inside a fan-out's branch
        completed: dict[tuple[str, int], int] = {}
        failed_at: dict[tuple[str, int, int], int] = {}
        injected: dict[str, Any] = {}
        paused: str | None = None  # why the run waits: hitl (a gate) or input
        # The resume control that input recorded right after its ``run.resumed`` belongs
        # to (``Runtime.resume(input=...)`` records the input after the resumption).
        resumed: int | None = None
        for event in self.events:
            body = event.body
            if resumed is not None and not isinstance(body, InputInjected | SnapshotTaken):
                resumed = None
            match body:
                case NodeStarted(node_id=node):
                    visit[node], attempt[node] = body.visit, body.attempt
                    started.append((node, body.visit, body.attempt))
                    # A cut attempt started again sets its outputs anew, and its visit's
                    # writes come when it completes (not a cancel's flush): one execution.
                    partial.pop((node, body.visit, body.attempt), None)
                    writes.pop((node, body.visit), None)
                    if body.branch is not None:
                        in_branch.add((node, body.visit))
                case LlmTurn(node_id=node):
                    self.first_turn.setdefault(node, event.seq)
                    for call in body.tool_calls:
                        calls[call.id] = call
                    unanswered[(node,)] = {c.id: c for c in body.tool_calls}
                    self.turns[(node, visit.get(node, 1), body.iteration)] = LlmResponse(
                        text=body.text,
                        tool_calls=list(body.tool_calls),
                        usage=Usage(
                            input_tokens=body.input_tokens, output_tokens=body.output_tokens
                        ),
                        model=body.model,
                        stop="end" if body.stop is None else body.stop,  # type: ignore[arg-type]
                    )
                case ToolResult(node_id=node):
                    unanswered.get((node,), {}).pop(body.call_id, None)
                    self._tool_result(calls.get(body.call_id), body.name, body)
                case Verdict(node_id=node) if body.level == "quality":
                    self.first_judged.setdefault(node, event.seq)
                    place = (node, visit.get(node, 1), body.iteration)
                    if body.error:
                        self.judged[place] = body.error
                    else:
                        answer = {
                            "verdict": body.action.upper(),
                            "confidence": body.confidence,
                            "feedback": body.feedback,
                        }
                        self.judged[place] = LlmResponse(text=_key(answer))
                case Verdict(node_id=node) if body.level == "custom":
                    self.custom[(node, visit.get(node, 1), body.iteration)] = body
                case EdgeTaken(source=source) if body.condition == "llm_decide":
                    routes[source] += 1
                    if body.judge_error:
                        served: Served = body.judge_error
                    else:
                        answer = {"target": body.target, "reasoning": body.reason}
                        served = LlmResponse(text=_key(answer))
                    self.routes[(source, routes[source])] = served
                case VerificationRecorded(node_id=node) if body.result.get("type") == "llm_judge":
                    if body.reply or body.stop is not None:  # a cut one fails again
                        self.verified[(node, body.visit, body.attempt)] = LlmResponse(
                            text=body.reply,
                            usage=Usage(
                                input_tokens=body.input_tokens, output_tokens=body.output_tokens
                            ),
                            model=body.model,
                            stop="end" if body.stop is None else body.stop,  # type: ignore[arg-type]
                        )
                case OutputSet(node_id=node):
                    partial[(node, visit.get(node, 1), attempt.get(node, 1))].append(
                        (body.key, body.value)
                    )
                case MemoryWritten(node_id=str() as node):
                    writes[(node, visit.get(node, 1))][body.key] = body.value
                case NodeCompleted(node_id=node):
                    completed[(node, visit.get(node, 1))] = event.seq
                case NodeFailed(node_id=node):
                    if body.error_type == "ToolTimeoutError":
                        self._timed_out(unanswered.pop((node,), {}))
                    if body.error_type in PROVIDER_FAILURES:  # its next model call failed
                        at = (node, visit.get(node, 1))
                        turn = 1 + max((k[2] for k in self.turns if k[:2] == at), default=0)
                        self.turn_failures[(*at, turn)] = (body.error_type, body.error)
                        said = body.error.removeprefix("the evaluator failed: ")  # a verifier's
                        self.verify_failures[(*at, body.attempt)] = (body.error_type, said)
                    failed[(node, visit.get(node, 1), body.attempt)] = body
                    failed_at[(node, visit.get(node, 1), body.attempt)] = event.seq
                case RunPaused() if body.reason != "user":
                    paused = body.reason
                case InputInjected() if resumed is not None:
                    control = self.controls[resumed]
                    data = {**control.input, **body.data}
                    self.controls[resumed] = msgspec.structs.replace(control, input=data)
                case InputInjected() if paused is None:
                    self.injected.append((event.seq, dict(body.data)))
                case InputInjected():
                    injected.update(body.data)
                case ApprovalGranted():
                    self._uncancel()
                    self._control(
                        "approve", event.seq, by=body.by, input=body.input, injected=injected
                    )
                    paused, injected = None, {}
                case ApprovalRejected():
                    self._control(
                        "reject", event.seq, by=body.by, reason=body.reason, injected=injected
                    )
                    paused, injected = None, {}
                case RunCancelled():
                    if paused is not None:
                        self._control("cancel", event.seq, reason=body.reason)
                case RunResumed():
                    # Only an approval passes a gate: a resume there waits at it again.
                    self._uncancel()
                    if paused == "input":
                        self._control("resume", event.seq, input=injected)
                        resumed = len(self.controls) - 1
                        paused, injected = None, {}
                case RunFinished() if body.goal_outcome:
                    self._goal(body.goal_outcome)
                case RunForked():
                    self.forked = True
                case BranchTurn(node_id=node):
                    for call in body.tool_calls:
                        calls[call.id] = call
                    lane = (node, body.visit, body.round, body.branch)
                    unanswered[lane] = {c.id: c for c in body.tool_calls}
                    place_b = (node, body.visit, f"{body.round}/{body.branch}", body.iteration)
                    # Served with its recorded stop (a refusal, a turn cut twice: the
                    # branch fails again); an older log's has none, its calls tell.
                    stop = body.stop or ("tool_use" if body.tool_calls else "end")
                    self.branch_turns[place_b] = LlmResponse(
                        text=body.text,
                        tool_calls=list(body.tool_calls),
                        usage=Usage(
                            input_tokens=body.input_tokens,
                            output_tokens=body.output_tokens,
                            input_cached=body.input_cached,
                            input_cache_write=body.input_cache_write,
                        ),
                        model=body.model,
                        stop=stop,  # type: ignore[arg-type]
                    )
                case BranchToolResult(node_id=node):
                    lane = (node, body.visit, body.round, body.branch)
                    unanswered.get(lane, {}).pop(body.call_id, None)
                    if body.name != "set_output":
                        self._tool_result(calls.get(body.call_id), body.name, body)
                case BranchFinished(node_id=node):
                    lane = (node, body.visit, body.round, body.branch)
                    if (body.error or "").startswith("ToolTimeoutError"):
                        self._timed_out(unanswered.pop(lane, {}))
                    kind, _, said = (body.error or "").partition(": ")
                    if kind in PROVIDER_FAILURES:  # its next call failed, with no turn
                        at_b = (node, body.visit, f"{body.round}/{body.branch}", body.turns + 1)
                        self.branch_failures[at_b] = (kind, said)
                    self.finishes[lane[:3]].append((body.branch, body.turns))
                case BranchesJudged(node_id=node):
                    judged: Served = body.error or LlmResponse(
                        text=body.text,
                        usage=Usage(
                            input_tokens=body.input_tokens, output_tokens=body.output_tokens
                        ),
                        model=body.model,
                    )
                    self.branch_judged[(node, body.visit, str(body.round))] = judged
                case _:
                    pass
        last = next((e for e in reversed(self.events) if not _bookkeeping(e.body)), None)
        ended = isinstance(last.body, RunFinished) if last is not None else False
        waits = last is not None and isinstance(last.body, RunPaused) and last.body.reason != "user"
        if not (ended or waits) and last is not None:
            self.cut_at = last.seq
        if last is not None and isinstance(last.body, RunPaused) and last.body.reason == "user":
            self.rests_at = last.seq
        for node, node_visit, node_attempt in started:
            place = (node, node_visit, node_attempt)
            failure = failed.get(place)
            outputs = None
            if failure is None and (node, node_visit) in completed:
                outputs = writes.get((node, node_visit), {})
                if (node, node_visit) in in_branch:
                    outputs = self._with_dropped(node, outputs)
            if failure is None and outputs is None:
                continue
            self.functions[place] = FunctionOutcome(
                partial=partial.get(place, []),
                outputs=outputs,
                error="" if failure is None else failure.error,
                error_type="" if failure is None else failure.error_type,
                at=failed_at[place] if failure is not None else completed[(node, node_visit)],
            )

    def _with_dropped(self, node: str, outputs: dict[str, Any]) -> dict[str, Any]:
        """A branch's node's outputs with the keys ``first_wins`` dropped (a branch that
        finished first claimed them: no write of them is in the log) as None: it returned
        every key it declares (else it failed), and those are dropped again the same way."""
        graph = self.started.graph
        if graph.get("conflict_strategy") != "first_wins":
            return outputs
        spec: dict[str, Any] = next((n for n in graph.get("nodes", ()) if n.get("id") == node), {})
        dropped = [key for key in spec.get("output_keys", ()) if key not in outputs]
        return {**outputs, **dict.fromkeys(dropped)} if dropped else outputs

    def _tool_result(
        self, asked: ToolCall | None, name: str, body: ToolResult | BranchToolResult
    ) -> None:
        """Keep a tool's result to serve the same call again. A call whose arguments were
        no JSON object never ran (its error is the node's own, answered again from the
        recorded text), so its result is no tool's answer to serve."""
        if asked is not None and asked.raw_arguments is not None:
            return
        arguments = asked.arguments if asked is not None else {}
        self.tools[_key([name, arguments])].append((body.content, body.is_error))

    def _timed_out(self, calls: dict[str, ToolCall]) -> None:
        """The calls of a turn whose tools ran past their time limit: none has a result
        (the node, or its branch, failed with ToolTimeoutError), and each is served as
        TIMED_OUT, so the replay fails as the run did."""
        for call in calls.values():
            if call.name != "set_output" and call.raw_arguments is None:
                self.tools[_key([call.name, call.arguments])].append(TIMED_OUT)

    def _uncancel(self) -> None:
        """The run went on after a cancel: that cancel did not end it."""
        if self.controls and self.controls[-1].kind == "cancel":
            self.controls.pop()

    def _control(self, kind: str, seq: int, **fields: Any) -> None:
        self.controls.append(Control(kind=kind, seq=seq, **fields))

    def _goal(self, outcome: dict[str, Any]) -> None:
        for criterion in outcome.get("criteria", []):
            ident = criterion.get("id")
            if not isinstance(ident, str):
                continue
            reasoning = criterion.get("reasoning", "")
            if criterion.get("method") == "model":
                answer = {"score": criterion.get("score"), "reasoning": reasoning}
                self.goal[ident] = LlmResponse(text=_key(answer))
            elif criterion.get("method") == "unscored" and "evaluator failed" in reasoning:
                self.goal[ident] = reasoning

    def tool_result(self, name: str, arguments: dict[str, Any]) -> ToolAnswer | None:
        """The next recorded answer of ``name`` called with ``arguments``, if any is left."""
        queue = self.tools.get(_key([name, arguments]))
        return queue.popleft() if queue else None
