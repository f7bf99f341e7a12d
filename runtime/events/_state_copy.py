"""Copying a run's state so that folding more events into the copy leaves the original
as it was (``fold(events, state)``)."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

__all__ = ["copy_state"]

#: The state's type (RunState; named by a type variable, not imported: _state imports this).
S = TypeVar("S", bound=msgspec.Struct)


def copy_state(run_state: S) -> S:
    """A copy of a RunState that applying events to cannot change ``state`` (see fold)."""
    state: Any = run_state
    # Every field is carried over (a new field needs no line here); containers apply grows
    # in place are copied, their values shared, which is safe because apply never mutates
    # a memory value its state does not own (see _memory.owned).
    copy: S = msgspec.structs.replace(
        state,
        memory=dict(state.memory),
        path=list(state.path),
        visit_counts=dict(state.visit_counts),
        pending=list(state.pending),
        running=dict(state.running),
        failed_nodes=list(state.failed_nodes),
        judge_failures=dict(state.judge_failures),
        judge_failure_reasons=list(state.judge_failure_reasons),
        unrunnable=list(state.unrunnable),
        approved=list(state.approved),
        rejected=list(state.rejected),
        outputs={node: dict(values) for node, values in state.outputs.items()},
        conversation=state.conversation.copy(),
        iterations=dict(state.iterations),
        visits={node: visit.copy() for node, visit in state.visits.items()},
        turns=dict(state.turns),
        verdict_counts={node: dict(counts) for node, counts in state.verdict_counts.items()},
        tool_turns=dict(state.tool_turns),
        verdicts=dict(state.verdicts),
        verdict_history={node: list(kept) for node, kept in state.verdict_history.items()},
        stalls={node: list(kept) for node, kept in state.stalls.items()},
        edges_taken=dict(state.edges_taken),
        event_counts=dict(state.event_counts),
        fanout=None if state.fanout is None else state.fanout.copy(),
    )
    return copy
