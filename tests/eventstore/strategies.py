"""Hypothesis strategies for event bodies and logs (shared by the eventstore tests)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from eventstore import EVENT_TYPES, Event, EventBody
from runtime.events import (
    ApprovalGranted,
    ApprovalRejected,
    BranchesForked,
    BranchesJoined,
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchJudgeWarning,
    BranchToolResult,
    BranchTurn,
    ConversationCompacted,
    EdgeTaken,
    GraphReplaced,
    InputInjected,
    LlmTurn,
    MemoryWritten,
    MessageAdded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    OutputSet,
    PauseRequested,
    RunCancelled,
    RunFinished,
    RunForked,
    RunPaused,
    RunResumed,
    RunStarted,
    RunUnrunnable,
    StallDetected,
    ToolCallRecord,
    ToolResult,
    Verdict,
    VerificationRecorded,
)

nodes = st.sampled_from(["a", "b", "c", "d"])
keys = st.sampled_from(["k1", "k2", "k3"])
texts = st.text(max_size=12)
small = st.integers(min_value=0, max_value=5)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
json_dicts = st.dictionaries(texts, json_values, max_size=3)
maybe_text = st.none() | texts

BODY_STRATEGIES: dict[type[EventBody], st.SearchStrategy[Any]] = {
    RunStarted: st.builds(
        RunStarted,
        graph=json_dicts,
        # A graph hash is the hex sha256 the runtime computes; it also lands in the run
        # listing's text column, where PostgreSQL refuses NUL characters.
        graph_hash=st.text("0123456789abcdef", min_size=64, max_size=64),
        entry=nodes,
        goal=st.none() | json_dicts,
        input=st.dictionaries(keys, json_values, max_size=3),
    ),
    NodeStarted: st.builds(
        NodeStarted,
        node_id=nodes,
        visit=st.integers(1, 4),
        attempt=st.integers(1, 3),
        branch=maybe_text,
    ),
    LlmTurn: st.builds(
        LlmTurn,
        node_id=nodes,
        iteration=small,
        text=texts,
        tool_calls=st.lists(
            st.builds(ToolCallRecord, id=texts, name=texts, arguments=json_dicts), max_size=2
        ),
        input_tokens=small,
        output_tokens=small,
        latency_ms=st.floats(0, 1e4, allow_nan=False),
        model=texts,
    ),
    ToolResult: st.builds(
        ToolResult, node_id=nodes, call_id=texts, name=texts, content=texts, is_error=st.booleans()
    ),
    MessageAdded: st.builds(
        MessageAdded,
        node_id=nodes,
        role=st.sampled_from(["user", "system", "assistant"]),
        content=texts,
        kind=st.sampled_from(["user", "feedback", "transition", "input"]),
    ),
    ConversationCompacted: st.builds(
        ConversationCompacted, node_id=nodes, upto=small, summary=texts
    ),
    OutputSet: st.builds(OutputSet, node_id=nodes, key=keys, value=json_values),
    Verdict: st.builds(
        Verdict,
        node_id=nodes,
        iteration=small,
        action=st.sampled_from(["accept", "retry", "escalate"]),
        level=st.sampled_from(["bail_out", "structural", "quality", "stall"]),
        feedback=texts,
        confidence=st.none() | st.floats(0, 1),
        error=maybe_text,
    ),
    StallDetected: st.builds(StallDetected, node_id=nodes, iteration=small, signature=texts),
    MemoryWritten: st.builds(
        MemoryWritten,
        key=keys,
        value=json_values,
        op=st.sampled_from(["replace", "append", "merge"]),
        node_id=st.none() | nodes,
        branch=maybe_text,
    ),
    NodeCompleted: st.builds(NodeCompleted, node_id=nodes, branch=maybe_text),
    NodeFailed: st.builds(
        NodeFailed,
        node_id=nodes,
        error=texts,
        error_type=texts,
        attempt=st.integers(1, 3),
        will_retry=st.booleans(),
        branch=maybe_text,
    ),
    EdgeTaken: st.builds(
        EdgeTaken, source=nodes, target=nodes, edge_index=small, condition=texts, reason=texts
    ),
    BranchesForked: st.builds(
        BranchesForked,
        source=nodes,
        targets=st.lists(nodes, max_size=3),
        join=st.none() | nodes,
        policy=st.sampled_from(["fail_all", "continue_others", "wait_all"]),
    ),
    BranchesJoined: st.builds(
        BranchesJoined,
        join=st.none() | nodes,
        completed=st.lists(nodes, max_size=3),
        failed=st.lists(nodes, max_size=3),
    ),
    RunPaused: st.builds(
        RunPaused, reason=st.sampled_from(["hitl", "user", "input"]), node_id=st.none() | nodes
    ),
    PauseRequested: st.builds(PauseRequested, by=texts),
    InputInjected: st.builds(InputInjected, data=st.dictionaries(keys, json_values, max_size=2)),
    ApprovalGranted: st.builds(
        ApprovalGranted,
        node_id=nodes,
        by=texts,
        input=st.dictionaries(keys, json_values, max_size=2),
    ),
    ApprovalRejected: st.builds(ApprovalRejected, node_id=nodes, by=texts, reason=texts),
    RunResumed: st.builds(RunResumed, note=texts),
    RunCancelled: st.builds(RunCancelled, node_id=st.none() | nodes, reason=texts),
    RunFinished: st.builds(
        RunFinished,
        status=st.sampled_from(["completed", "failed"]),
        quality=st.sampled_from(["clean", "degraded", "failed"]),
        total_retries=small,
        error=maybe_text,
        goal_outcome=st.none() | json_dicts,
    ),
    GraphReplaced: st.builds(
        GraphReplaced,
        graph=json_dicts,
        graph_hash=st.text("0123456789abcdef", min_size=64, max_size=64),
        previous_hash=st.none() | st.text("0123456789abcdef", min_size=64, max_size=64),
        forced=st.booleans(),
        divergences=st.integers(0, 50),
    ),
    RunForked: st.builds(
        RunForked, source_run_id=texts, source_seq=st.integers(1, 500), source_hash=texts
    ),
    RunUnrunnable: st.builds(RunUnrunnable, reason=texts, worker=texts),
    VerificationRecorded: st.builds(
        VerificationRecorded,
        node_id=nodes,
        visit=st.integers(1, 4),
        attempt=st.integers(1, 3),
        passed=st.booleans(),
        result=json_dicts,
        branch=maybe_text,
        reply=texts,
        input_tokens=small,
        output_tokens=small,
        model=texts,
    ),
    BranchTurn: st.builds(
        BranchTurn,
        node_id=nodes,
        visit=st.integers(1, 4),
        round=small,
        branch=small,
        label=texts,
        iteration=st.integers(1, 5),
        text=texts,
        tool_calls=st.lists(
            st.builds(ToolCallRecord, id=texts, name=texts, arguments=json_dicts), max_size=2
        ),
        input_tokens=small,
        output_tokens=small,
        latency_ms=st.floats(0, 1e4, allow_nan=False),
        model=texts,
    ),
    BranchToolResult: st.builds(
        BranchToolResult,
        node_id=nodes,
        visit=st.integers(1, 4),
        round=small,
        branch=small,
        call_id=texts,
        name=texts,
        content=texts,
        is_error=st.booleans(),
        output_key=st.none() | keys,
        output_value=json_values,
    ),
    BranchFinished: st.builds(
        BranchFinished,
        node_id=nodes,
        visit=st.integers(1, 4),
        round=small,
        branch=small,
        label=texts,
        ok=st.booleans(),
        text=texts,
        error=maybe_text,
        turns=small,
        input_tokens=small,
        output_tokens=small,
    ),
    BranchesJudged: st.builds(
        BranchesJudged,
        node_id=nodes,
        visit=st.integers(1, 4),
        round=small,
        text=texts,
        error=maybe_text,
        prompt_tokens=small,
        compacted=st.booleans(),
        input_tokens=small,
        output_tokens=small,
        latency_ms=st.floats(0, 1e4, allow_nan=False),
        model=texts,
    ),
    BranchJudgeWarning: st.builds(
        BranchJudgeWarning,
        node_id=nodes,
        visit=st.integers(1, 4),
        round=small,
        budget_tokens=small,
        prompt_tokens=small,
        message=texts,
    ),
    BranchesSelected: st.builds(
        BranchesSelected,
        node_id=nodes,
        visit=st.integers(1, 4),
        round=small,
        strategy=texts,
        winner=small,
        label=texts,
        reason=texts,
        candidates=st.lists(small, max_size=3),
    ),
}

bodies: st.SearchStrategy[EventBody] = st.one_of(*BODY_STRATEGIES.values())


def catalogue_covered() -> bool:
    """True when every catalogue type has a strategy (checked by a test)."""
    catalogue = {
        cls
        for cls in EVENT_TYPES.values()
        if cls.__module__ in ("runtime.events._catalogue", "runtime.events._branch_events")
    }
    return catalogue == set(BODY_STRATEGIES)


def as_log(run_id: str, items: list[EventBody]) -> list[Event]:
    """Wrap bodies into a run's envelopes (seq 1.., made-up hashes and positions)."""
    return [
        Event(
            run_id=run_id,
            seq=seq,
            position=seq * 10,
            ts=1.0 * seq,
            version=type(body).schema_version,
            prev_hash=f"h{seq - 1}" if seq > 1 else "",
            hash=f"h{seq}",
            body=body,
        )
        for seq, body in enumerate(items, 1)
    ]


logs = st.lists(bodies, max_size=40).map(lambda items: as_log("run-1", items))
