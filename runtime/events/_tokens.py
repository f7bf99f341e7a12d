"""The tokens of the model calls a run's log records, read from its events.

Every model call a run pays for is recorded with its token counts, each in the event of
what it was for: ``llm.turn`` (a node's turn), ``branch.turn`` (a parallel branch's
turn), ``branches.judged`` (the branch judge), ``judge.verdict`` (the Level 2 quality
check, or a custom judge's own calls), ``edge.taken`` (an ``llm_decide`` choice),
``verifier.result`` (an ``llm_judge`` verifier's evaluator) and ``run.finished`` (the
goal's evaluator, as ``goal_*`` fields). A call that gave no answer the log records
elsewhere but was paid for is in the event of what it ended: ``node.failed``'s ``usage``
(a node's turn, its Level 2 judge's calls cut off by its timeout, a verifier's
evaluator: its ``purpose`` says which) and ``branch.finished``'s ``usage`` (a branch's
last call). :func:`paid` reads them; nothing else in an event counts tokens a run paid
for (``branch.finished``'s token counts sum its branch's turns, and the winning branch's
turns recorded again as the node's own carry none). The report and the metrics both
count through it, so they agree.

Nothing here is on the fold's path: the sums are made when read.
"""

from __future__ import annotations

from typing import Final, TypedDict

from ..providers._base import Usage
from ._branch_events import BranchesJudged, BranchFinished, BranchTurn
from ._catalogue import (
    EdgeTaken,
    LlmTurn,
    NodeFailed,
    PaidUsage,
    RunFinished,
    Verdict,
    VerificationRecorded,
)

__all__ = [
    "NO_USAGE",
    "PURPOSES",
    "GoalUsageFields",
    "Purpose",
    "UsageFields",
    "add_usage",
    "goal_usage_fields",
    "paid",
    "paid_usage",
    "spent",
    "usage_fields",
]

#: What a paid call was for: the ``purpose`` of the request that made it.
Purpose = str
#: The purposes in the order a report lists them.
PURPOSES: Final = ("turn", "branch", "branch_judge", "judge", "route", "verify", "outcome")
NO_USAGE: Final = Usage()


class UsageFields(TypedDict, total=False):
    """The token fields of an event, as keyword arguments."""

    input_tokens: int
    output_tokens: int
    input_cached: int
    input_cache_write: int


def usage_fields(usage: Usage | None) -> UsageFields:
    """The four token fields of an event recording calls that used ``usage`` (none for
    None: the fields keep their defaults, 0)."""
    if usage is None:
        return {}
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "input_cached": usage.input_cached,
        "input_cache_write": usage.input_cache_write,
    }


class GoalUsageFields(TypedDict, total=False):
    """The goal evaluator's token fields of ``run.finished``, as keyword arguments."""

    goal_input_tokens: int
    goal_output_tokens: int
    goal_input_cached: int
    goal_input_cache_write: int


def goal_usage_fields(usage: Usage | None) -> GoalUsageFields:
    """``run.finished``'s token fields for goal evaluator calls that used ``usage``."""
    if usage is None:
        return {}
    return {
        "goal_input_tokens": usage.input_tokens,
        "goal_output_tokens": usage.output_tokens,
        "goal_input_cached": usage.input_cached,
        "goal_input_cache_write": usage.input_cache_write,
    }


def add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    """``total`` and ``more`` summed (None: neither had any tokens)."""
    if more is None or more == NO_USAGE:
        return total
    if total is None:
        return more
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        input_cached=total.input_cached + more.input_cached,
        input_cache_write=total.input_cache_write + more.input_cache_write,
    )


def paid_usage(exc: BaseException) -> Usage | None:
    """The usage of a call that raised ``exc`` and was paid for anyway: a TruncatedError
    from ``complete_uncut`` carries the cut answer, whose usage counts both calls; a
    MalformedResponseError, the usage of the unreadable answer when that could be read."""
    usage = getattr(getattr(exc, "response", None), "usage", None)
    if not isinstance(usage, Usage):
        usage = getattr(exc, "usage", None)
    return usage if isinstance(usage, Usage) else None


def spent(usage: Usage | None, purpose: Purpose) -> PaidUsage | None:
    """``usage``, paid for ``purpose``, as ``node.failed`` records it (None: nothing)."""
    if usage is None or usage == NO_USAGE:
        return None
    return PaidUsage(purpose=purpose, **usage_fields(usage))


def paid(body: object) -> tuple[Purpose, Usage] | None:
    """What ``body`` records of paid model calls: their purpose and tokens, or None when
    it records none."""
    match body:
        case LlmTurn() | BranchTurn() | BranchesJudged() | Verdict() | VerificationRecorded():
            usage = Usage(
                input_tokens=body.input_tokens,
                output_tokens=body.output_tokens,
                input_cached=body.input_cached,
                input_cache_write=body.input_cache_write,
            )
        case EdgeTaken() | BranchFinished():
            usage = body.usage or NO_USAGE
        case NodeFailed(usage=PaidUsage() as failed):
            # A plain Usage: a sum's terms (and the metric's directions) are its four counts.
            counts = Usage(**usage_fields(failed))
            return None if counts == NO_USAGE else (failed.purpose, counts)
        case RunFinished():
            usage = Usage(
                input_tokens=body.goal_input_tokens,
                output_tokens=body.goal_output_tokens,
                input_cached=body.goal_input_cached,
                input_cache_write=body.goal_input_cache_write,
            )
        case _:
            return None
    return None if usage == NO_USAGE else (_PURPOSE[type(body)], usage)


#: Each paid call's event, and the purpose of the requests it records.
_PURPOSE: Final[dict[type, Purpose]] = {
    LlmTurn: "turn",
    BranchTurn: "branch",
    BranchesJudged: "branch_judge",
    BranchFinished: "branch",
    Verdict: "judge",
    EdgeTaken: "route",
    VerificationRecorded: "verify",
    RunFinished: "outcome",
}
