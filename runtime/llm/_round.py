"""A round of parallel branches as the runner tracks it: each branch's turns, tool results
and end, the round's judge call and selection.

:func:`restore_round` rebuilds a round from the run's live state (the node's visit keeps
its round in progress, see ``runtime.events._branch_round``), and the runner extends it as
the branches run; :func:`winner_bodies` turns the winning branch into the node's own
events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eventstore import EventBody

from ..engine._runlog import RunLog
from ..events._catalogue import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchToolResult,
    BranchTurn,
    LlmTurn,
    OutputSet,
    ToolCallRecord,
    ToolResult,
)
from ..providers._base import ChatMessage
from ..spec._model import NodeSpec
from ..spec._parallel import BranchSpec, ParallelSpec, branch_label

__all__ = ["Branch", "Round", "restore_round", "winner_bodies"]


@dataclass
class Branch:
    """One branch's progress in a round, rebuilt from the run state and extended live."""

    index: int
    spec: BranchSpec
    label: str
    turns: list[BranchTurn] = field(default_factory=list)
    results: dict[str, BranchToolResult] = field(default_factory=dict)
    finished: BranchFinished | None = None
    finished_rank: int = -1

    def messages(self) -> list[ChatMessage]:
        out: list[ChatMessage] = []
        for turn in self.turns:
            out.append(
                ChatMessage(role="assistant", content=turn.text, tool_calls=list(turn.tool_calls))
            )
            for call in turn.tool_calls:
                result = self.results.get(call.id)
                if result is not None:
                    out.append(
                        ChatMessage(
                            role="tool",
                            content=result.content,
                            tool_call_id=call.id,
                            name=call.name,
                            is_error=result.is_error,
                        )
                    )
        return out

    def missing_calls(self) -> list[ToolCallRecord]:
        if not self.turns:
            return []
        return [c for c in self.turns[-1].tool_calls if c.id not in self.results]


@dataclass
class Round:
    node_id: str
    visit: int
    round: int
    branches: list[Branch]
    judged: BranchesJudged | None = None
    selected: BranchesSelected | None = None
    finished: int = 0  # branches finished so far: the next one's rank

    def tag(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "visit": self.visit, "round": self.round}


def restore_round(spec: ParallelSpec, log: RunLog, node_id: str, visit: int, round_: int) -> Round:
    """The round as the run's live state records it (empty when it has not begun).

    Reads the node's visit in ``log.state`` (its ``branch_round``, kept by the fold),
    never the log itself, so a round's start does not grow with the run.
    """
    branches = [
        Branch(index=i, spec=b, label=branch_label(b, i)) for i, b in enumerate(spec.branches)
    ]
    state = Round(node_id=node_id, visit=visit, round=round_, branches=branches)
    record = log.state.visits.get(node_id)
    held = record.branch_round if record is not None and record.visit == visit else None
    if held is None or held.round != round_:
        return state
    # The branches' own lists: they grow as the branches run, apart from the state's.
    for turn in held.turns:
        if turn.branch < len(branches):
            branches[turn.branch].turns.append(turn)
    for result in held.results:
        if result.branch < len(branches):
            branches[result.branch].results[result.call_id] = result
    for finished in held.finished:
        if finished.branch < len(branches):
            branches[finished.branch].finished = finished
            branches[finished.branch].finished_rank = state.finished
            state.finished += 1
    state.judged = held.judged
    state.selected = held.selected
    return state


def winner_bodies(branch: Branch, node: NodeSpec, iteration: int) -> list[EventBody]:
    """The winner's messages and outputs as the node's own events (uncompacted)."""
    bodies: list[EventBody] = []
    outputs: dict[str, Any] = {}
    for number, turn in enumerate(branch.turns, start=iteration + 1):
        bodies.append(
            LlmTurn(
                node_id=node.id,
                iteration=number,
                text=turn.text,
                tool_calls=list(turn.tool_calls),
                model=turn.model,
                stop=turn.stop,
            )
        )
        for call in turn.tool_calls:
            result = branch.results.get(call.id)
            if result is None:
                continue
            bodies.append(
                ToolResult(
                    node_id=node.id,
                    call_id=call.id,
                    name=call.name,
                    content=result.content,
                    is_error=result.is_error,
                )
            )
            if result.output_key is not None:
                outputs[result.output_key] = result.output_value
    bodies.extend(OutputSet(node_id=node.id, key=k, value=v) for k, v in outputs.items())
    return bodies
