"""A model turn's tool calls as the log records them: distinct ids.

An LLM node (and each parallel branch) records a turn before it runs the turn's calls,
and a resume runs the calls that have no recorded result. Two calls of one turn with the
same id (a result answers a call by id, so one result would mark both answered, and the
API would refuse the next request) are settled here, before the turn is recorded: the
later call gets a new id (see :func:`distinct_ids`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ._llm import ToolCall

__all__ = ["distinct_ids"]


def distinct_ids(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """``calls`` with every id distinct: a repeated id becomes ``"<id>~2"`` (``~3``, ...,
    the first suffix no call of the turn uses).

    Results are matched to calls by id, in the run's state (a resume runs the calls of
    the last turn that have no result) and on the wire (each tool message answers one
    call id). With two calls sharing an id, one result would mark both answered, so a
    resume would skip the second call, and both APIs refuse a conversation with one id
    twice. Renaming the later call, rather than matching results by position, keeps the
    event format and the rule that an id names one call: the new id is recorded with
    the turn, so the live run, the log and a resume all use it, and the model reads it
    back with its call's result.
    """
    taken = {call.id for call in calls}
    seen: set[str] = set()
    out: list[ToolCall] = []
    for call in calls:
        if call.id in seen:
            number = 2
            while f"{call.id}~{number}" in taken:
                number += 1
            new_id = f"{call.id}~{number}"
            taken.add(new_id)
            call = ToolCall(id=new_id, name=call.name, arguments=call.arguments)
        seen.add(call.id)
        out.append(call)
    return out
