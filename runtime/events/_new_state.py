"""A new run's live state, with no container it may never need."""

from __future__ import annotations

from typing import Any

from ._state import RunState

__all__ = ["new_state"]

#: The one empty list a new state's rarely filled lists start as (never changed in place).
_NONE: list[Any] = []


def new_state(run_id: str = "", last_seq: int = 0) -> RunState:
    """A new run's state whose rarely filled lists are one shared empty list: ``apply``
    replaces ``failed_nodes``, ``judge_failure_reasons``, ``unrunnable``, ``approved`` and
    ``rejected`` when it changes them, never changes them in place, so most runs make none
    of them (five tracked containers fewer per live run for the cyclic collector). The
    encoded state, and so a snapshot of it, is the same as a fresh ``RunState``'s."""
    return RunState(
        run_id=run_id,
        last_seq=last_seq,
        failed_nodes=_NONE,
        judge_failure_reasons=_NONE,
        unrunnable=_NONE,
        approved=_NONE,
        rejected=_NONE,
    )
