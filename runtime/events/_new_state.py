"""A new run's live state, with no container it may never need."""

from __future__ import annotations

from typing import Any

from ._conversation import Conversation
from ._shared_empty import NO_ENTRIES, NO_ITEMS
from ._state import RunState

__all__ = ["new_state"]

#: The one empty list a new state's rarely filled lists start as (never changed in place).
_NONE: list[Any] = []


def new_state(run_id: str = "", last_seq: int = 0) -> RunState:
    """A new run's state whose rarely filled lists are one shared empty list: ``apply``
    replaces ``failed_nodes``, ``judge_failure_reasons``, ``unrunnable``, ``approved`` and
    ``rejected`` when it changes them, never changes them in place, so most runs make none
    of them (five tracked containers fewer per live run for the cyclic collector). Its
    maps that only judges, LLM turns and parallel branches fill (and its conversation's
    entries, branches and lanes) are likewise one shared empty value (:mod:`._shared_empty`)
    that ``apply`` replaces by one of their own when it first fills them. The encoded state,
    and so a snapshot of it, is the same as a fresh ``RunState``'s.

    ``visit_counts`` and ``conversation.visits`` are one map: both hold each started node's
    last visit number, written by ``node.started`` only (the conversation first, see
    apply), so they are equal in every state apply makes; a copy or a decoded snapshot
    holds two."""
    visits: dict[str, int] = {}
    return RunState(
        run_id=run_id,
        last_seq=last_seq,
        failed_nodes=_NONE,
        judge_failures=NO_ITEMS,
        judge_failure_reasons=_NONE,
        turns=NO_ITEMS,
        verdict_counts=NO_ITEMS,
        tool_turns=NO_ITEMS,
        visit_counts=visits,
        conversation=Conversation(
            entries=NO_ENTRIES, branches=NO_ITEMS, lanes=NO_ITEMS, visits=visits
        ),
        verdicts=NO_ITEMS,
        verdict_history=NO_ITEMS,
        stalls=NO_ITEMS,
        unrunnable=_NONE,
        approved=_NONE,
        rejected=_NONE,
    )
