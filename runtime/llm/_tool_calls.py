"""A model turn's tool calls as the log records them: distinct ids, and arguments the log
stores unchanged.

An LLM node (and each parallel branch) records a turn before it runs the turn's calls,
and a resume runs the calls that have no recorded result. Two things in a model's answer
would make the live run and the fold of its log disagree, so they are settled here,
before the turn is recorded:

- two calls of one turn with the same id (a result answers a call by id, so one result
  would mark both answered, and the API would refuse the next request): the later call
  gets a new id (see :func:`distinct_ids`);
- arguments the log cannot store unchanged (NaN or infinity, which JSON tool arguments
  may carry and the log writes as null; a string with a lone surrogate, which it cannot
  write at all): the call is refused with an error result naming the argument, recorded
  with the turn, and the tool is not called (see :func:`refusal`).

A call whose arguments were no JSON object at all (``ToolCall.raw_arguments``: text that
is not JSON or was cut short, another JSON value) is refused the same way, its error
result saying why and quoting the text: the model can call again, and the turn, its
tokens and the text are in the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .._errors import MemoryValueError, ToolArgumentsError
from ..events._values import check_memory_value, not_utf8
from ..providers._base import ToolCall, arguments_problem, mend

__all__ = ["QUOTED_CHARS", "distinct_ids", "recorded_calls", "refusal", "unreadable"]


def distinct_ids(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """``calls`` with every id distinct: a repeated id becomes ``"<id>_2"`` (``_3``, ...,
    the first suffix no call of the turn uses; letters, digits, ``_`` and ``-`` are what
    every provider's ids may hold, Anthropic's pattern included).

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
            while f"{call.id}_{number}" in taken:
                number += 1
            new_id = f"{call.id}_{number}"
            taken.add(new_id)
            call = msgspec.structs.replace(call, id=new_id)
        seen.add(call.id)
        out.append(call)
    return out


#: How much of a call's unreadable arguments its error result quotes back to the model.
QUOTED_CHARS = 1000


def refusal(call: ToolCall) -> str | None:
    """The error result for a call whose arguments the log cannot store unchanged, naming
    each such argument (``ToolArgumentsError: invalid arguments for tool 'f': argument
    'x' is nan (JSON has no NaN or infinity)``), or for a call whose arguments were no
    JSON object (:func:`unreadable`); None when the call may run."""
    if call.raw_arguments is not None:
        return unreadable(call.name, mend(call.raw_arguments))
    problems = [
        problem for name, value in call.arguments.items() if (problem := _check(name, value))
    ]
    if not problems:
        return None
    return f"ToolArgumentsError: {ToolArgumentsError(call.name, '; '.join(problems))}"


def unreadable(tool: str, raw: str) -> str:
    """The error result for a call of ``tool`` whose arguments text ``raw`` is no JSON
    object: why (:func:`~runtime.providers._base.arguments_problem`), what to send
    instead, and the text itself (its first :data:`QUOTED_CHARS` characters; the model
    is shown the call with ``{}`` as its arguments, which every API reads back)."""
    quoted = raw if len(raw) <= QUOTED_CHARS else f"{raw[:QUOTED_CHARS]}... ({len(raw)} chars)"
    reason = (
        f"the arguments are {arguments_problem(raw)}, and the tool was not called; "
        f"call it again with its arguments as one JSON object. The arguments were: {quoted}"
    )
    return f"ToolArgumentsError: {ToolArgumentsError(tool, reason)}"


def recorded_calls(calls: Sequence[ToolCall]) -> tuple[list[ToolCall], dict[str, str]]:
    """A turn's calls as they are recorded, and the error result of each refused call by id.

    Ids are made distinct (:func:`distinct_ids`). A refused call (:func:`refusal`) is
    recorded with each argument the log cannot store as null and a lone surrogate in an
    argument's name as U+FFFD, so the turn reads back as it was recorded (a call with
    unreadable arguments keeps their text, and ``{}``); the caller records its error
    result with the turn, and never runs it.
    """
    out: list[ToolCall] = []
    refused: dict[str, str] = {}
    for call in distinct_ids(calls):
        error = refusal(call)
        if error is not None:
            refused[call.id] = error
            arguments = {
                mend(name): None if _check(name, value) else value
                for name, value in call.arguments.items()
            }
            raw = None if call.raw_arguments is None else mend(call.raw_arguments)
            call = msgspec.structs.replace(call, arguments=arguments, raw_arguments=raw)
        out.append(call)
    return out, refused


def _check(name: str, value: Any) -> str | None:
    if not_utf8(name):
        return f"argument {mend(name)!r} has a name with a lone surrogate (not UTF-8)"
    try:
        check_memory_value(name, value)
    except MemoryValueError as exc:
        where = exc.where.removeprefix("value")
        return f"argument {name!r}{f' at {where}' if where else ''} is {exc.reason}"
    return None
