"""The conversation as the event log makes it: one entry type and one projection.

Both the run-state fold and the LLM node build the conversation with
:meth:`Conversation.apply`, one event body at a time, so what a node sends the model and
what ``get_state`` shows are the same entries by construction:

- ``LlmTurn`` adds an ``assistant`` entry (kind ``"turn"``) with its tool calls,
  ``ToolResult`` a ``tool`` entry (kind ``"tool_result"``, or ``"tool_error"``), and
  ``MessageAdded`` an entry of its role and kind;
- ``ConversationCompacted`` replaces the first ``upto`` entries of the compacting node's
  scope by one ``system`` entry of kind ``"summary"``;
- parallel branches: between ``BranchesForked`` and ``BranchesJoined``, each branch's
  entries go to a segment of their own, and the join appends the segments to the
  conversation one branch after the other, in fork order. A tool call is therefore always
  followed by its results, never by a sibling branch's turn (the chat APIs reject that),
  and a node inside a branch sees the conversation before the fork plus its own
  branch's entries.

A node's *scope* (:meth:`Conversation.scope`) is what it sends the model: in continuous
mode the whole conversation (plus its branch's segment), in isolated mode only its own
entries since its current visit began. A ``ConversationCompacted`` counts ``upto`` in
that scope.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..providers._base import ToolCall
from ._catalogue import (
    BranchesForked,
    BranchesJoined,
    ConversationCompacted,
    LlmTurn,
    MessageAdded,
    NodeStarted,
    RunStarted,
    ToolResult,
)
from ._shared_empty import NO_ENTRIES, NO_ITEMS

__all__ = ["Conversation", "ConversationEntry", "entry_of", "summary_entry"]


class ConversationEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a run's conversation, as the model will see it.

    ``kind`` says where it came from: ``"turn"`` (a model turn), ``"tool_result"`` /
    ``"tool_error"``, ``"summary"`` (compacted history), or the kind of a
    ``MessageAdded`` (``"inputs"``, ``"transition"``, ``"feedback"``, ``"input"``...).
    """

    role: str
    content: str
    node_id: str | None = None
    kind: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None


def entry_of(body: LlmTurn | ToolResult | MessageAdded) -> ConversationEntry:
    """The conversation entry an event body adds (the only events-to-entries mapping)."""
    if isinstance(body, LlmTurn):
        return ConversationEntry(
            role="assistant",
            content=body.text,
            node_id=body.node_id,
            kind="turn",
            tool_calls=body.tool_calls,
        )
    if isinstance(body, ToolResult):
        return ConversationEntry(
            role="tool",
            content=body.content,
            node_id=body.node_id,
            kind="tool_error" if body.is_error else "tool_result",
            tool_call_id=body.call_id,
            name=body.name,
        )
    return ConversationEntry(
        role=body.role, content=body.content, node_id=body.node_id, kind=body.kind
    )


def summary_entry(node_id: str, summary: str) -> ConversationEntry:
    """The entry that stands in for compacted history."""
    return ConversationEntry(role="system", content=summary, node_id=node_id, kind="summary")


class Conversation(msgspec.Struct, kw_only=True, gc=False):
    """A run's conversation, built by :meth:`apply` from its events (see module docs).

    ``entries`` is the conversation in order, joined branches included. ``branches``
    holds the segments of branches not joined yet (in fork order); ``lanes`` maps a node
    started inside a branch to that branch; ``visits`` / ``starts`` record, per node, the
    visit whose start is known and where that visit's entries begin in its lane (the
    isolated-mode scope). It is a sequence of its ``entries``.

    ``entries``, ``branches`` and ``lanes`` may be the shared empty values of
    :mod:`._shared_empty` (a new live state's): they are replaced, never changed in place,
    when first filled.

    ``gc=False``: it holds lists and maps of strings, numbers and frozen entries, never
    itself or what holds it, so it takes part in no reference cycle and the collector need
    not track one per live run.
    """

    isolated: bool = False
    entries: list[ConversationEntry] = []
    branches: dict[str, list[ConversationEntry]] = {}
    lanes: dict[str, str] = {}
    visits: dict[str, int] = {}
    starts: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> ConversationEntry:
        return self.entries[index]

    def __iter__(self) -> Any:
        return iter(self.entries)

    def copy(self) -> Conversation:
        """An independent copy (entries are immutable and shared)."""
        return Conversation(
            isolated=self.isolated,
            entries=list(self.entries),
            branches={b: list(seg) for b, seg in self.branches.items()},
            lanes=dict(self.lanes),
            visits=dict(self.visits),
            starts=dict(self.starts),
        )

    def _lane(self, node_id: str | None) -> list[ConversationEntry]:
        """The lane ``node_id``'s entries go to (may be a shared empty list: read only)."""
        branch = self.lanes.get(node_id) if node_id is not None else None
        if branch is None:
            return self.entries
        segment = self.branches.get(branch)
        if segment is None:
            segment = self._branches()[branch] = []
        return segment

    def _own_lane(self, node_id: str | None) -> list[ConversationEntry]:
        """The lane ``node_id``'s entries go to, ours to change in place."""
        lane = self._lane(node_id)
        if lane is NO_ENTRIES:
            lane = self.entries = []
        return lane

    def _branches(self) -> dict[str, list[ConversationEntry]]:
        branches = self.branches
        if branches is NO_ITEMS:
            branches = self.branches = {}
        return branches

    def apply(self, body: object) -> bool:
        """Apply one event body; return whether it concerned the conversation."""
        if isinstance(body, LlmTurn | ToolResult | MessageAdded):
            self._own_lane(body.node_id).append(entry_of(body))
        elif isinstance(body, NodeStarted):
            self.started(body)
        elif isinstance(body, ConversationCompacted):
            self._compact(body.node_id, body.upto, body.summary)
        elif isinstance(body, BranchesForked):
            for target in body.targets:
                if target != body.join:
                    self._branches().setdefault(target, [])
        elif isinstance(body, BranchesJoined):
            self._join()
        elif isinstance(body, RunStarted):
            self.run_started(body)
        else:
            return False
        return True

    def run_started(self, body: RunStarted) -> None:
        """Apply a ``run.started`` (what :meth:`apply` does with one, called directly by
        the state's apply: no isinstance chain to miss through once a run)."""
        self.isolated = body.graph.get("conversation_mode") == "isolated"

    def started(self, body: NodeStarted) -> None:
        """Apply a ``node.started`` (what :meth:`apply` does with one, called directly on
        every step's path)."""
        node = body.node_id
        if body.branch is not None:
            lanes = self.lanes
            if lanes is NO_ITEMS:
                lanes = self.lanes = {}
            lanes[node] = body.branch
        elif self.lanes:
            self.lanes.pop(node, None)
        visits = self.visits
        if visits.get(node) != body.visit:
            # A rerun of the same visit (a resume, a retry) keeps the visit's start.
            visits[node] = body.visit
            lane = self.entries if body.branch is None else self._lane(node)  # as _lane
            self.starts[node] = len(lane)

    def _join(self) -> None:
        if not self.branches:
            self.branches = {}
            return
        entries = self._own_lane(None)
        for branch, segment in self.branches.items():
            offset = len(entries)
            for node, lane in list(self.lanes.items()):
                if lane == branch:
                    del self.lanes[node]
                    if node in self.starts:
                        self.starts[node] += offset
            entries.extend(segment)
        self.branches = {}

    def _scope_indices(self, node_id: str, lane: list[ConversationEntry]) -> range | list[int]:
        if not self.isolated:
            return range(len(lane))
        start = self.starts.get(node_id, len(lane))
        return [i for i in range(start, len(lane)) if lane[i].node_id == node_id]

    def _compact(self, node_id: str, upto: int, summary: str) -> None:
        lane = self._own_lane(node_id)
        scope = self._scope_indices(node_id, lane)
        removed = list(scope[: max(0, upto)])
        at = removed[0] if removed else (scope[0] if scope else len(lane))
        if removed and removed == list(range(removed[0], removed[0] + len(removed))):
            lane[at : at + len(removed)] = [summary_entry(node_id, summary)]
        else:
            gone = set(removed)
            kept = [entry for i, entry in enumerate(lane) if i not in gone]
            kept.insert(at, summary_entry(node_id, summary))
            lane[:] = kept
        # Starts after the summary's place move by what was removed before them.
        for node, start in self.starts.items():
            if start > at and self._lane(node) is lane:
                self.starts[node] = start - sum(1 for i in removed if i < start) + 1

    def scope(self, node_id: str, *, visit: int | None = None) -> list[ConversationEntry]:
        """The entries ``node_id`` sends the model (a new list; see the module docs).

        ``visit`` is the visit the node runs; in isolated mode a visit whose start is not
        applied yet has no entries.
        """
        lane = self._lane(node_id)
        if not self.isolated:
            if lane is self.entries:
                return list(lane)
            return [*self.entries, *lane]
        if visit is not None and self.visits.get(node_id) != visit:
            return []
        return [lane[i] for i in self._scope_indices(node_id, lane)]
