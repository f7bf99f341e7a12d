"""The events of a parallel node's branches (``NodeSpec.parallel``): each branch's turns,
tool results and end, the ``llm_judge`` strategy's call and its budget warning, and the
round's winner. Part of the event catalogue (:mod:`runtime.events._catalogue` registers
them with the rest)."""

from __future__ import annotations

from typing import Any

from eventstore import EventBody

from ..providers._base import ToolCall, Usage

__all__ = [
    "BranchFinished",
    "BranchJudgeWarning",
    "BranchToolResult",
    "BranchTurn",
    "BranchesJudged",
    "BranchesSelected",
]


class BranchTurn(EventBody, frozen=True, tag="branch.turn"):
    """One model turn of one parallel branch (``branch``: its 0-based index) in the round
    that began after the node's turn ``round`` of visit ``visit``; ``stop`` and the token
    counts as ``llm.turn``'s. A turn refused, or cut at the token cap twice (``stop``
    ``"max_tokens"``, the tokens of both calls, no tool calls), is its branch's last."""

    node_id: str
    visit: int
    round: int
    branch: int
    label: str
    iteration: int
    text: str
    tool_calls: list[ToolCall]
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    model: str = ""
    stop: str | None = None
    input_cached: int = 0
    input_cache_write: int = 0


class BranchToolResult(EventBody, frozen=True, tag="branch.tool_result"):
    """A tool result inside one parallel branch; a ``set_output`` call that set an output
    carries it (``output_key``, ``output_value``) for the branch's own accumulator."""

    node_id: str
    visit: int
    round: int
    branch: int
    call_id: str
    name: str
    content: str
    is_error: bool = False
    output_key: str | None = None
    output_value: Any = None


class BranchFinished(EventBody, frozen=True, tag="branch.finished"):
    """A parallel branch's end: ``ok`` with its final ``text``, or not with ``error``.
    ``input_tokens`` and ``output_tokens`` sum its ``branch.turn``s'. ``usage``: the
    tokens of the model call that ended it with no turn, when it was paid for all the same
    (an answer that could not be read but said what it cost), counted apart from the
    turns' (None otherwise, and in older logs: an added field with a default)."""

    node_id: str
    visit: int
    round: int
    branch: int
    label: str
    ok: bool
    text: str = ""
    error: str | None = None
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usage: Usage | None = None


class BranchesJudged(EventBody, frozen=True, tag="branches.judged"):
    """The ``llm_judge`` strategy's call: the judge's reply (or why it is no choice: the
    provider's error, a refusal, a reply cut at the token cap twice), with the tokens of
    the calls it cost (the cached counts as ``branch.turn``'s, 0 in older logs)."""

    node_id: str
    visit: int
    round: int
    text: str
    error: str | None = None
    prompt_tokens: int = 0
    compacted: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    model: str = ""
    input_cached: int = 0
    input_cache_write: int = 0


class BranchJudgeWarning(EventBody, frozen=True, tag="branches.judge_warning"):
    """The judge's prompt still exceeds its budget after both compaction iterations."""

    node_id: str
    visit: int
    round: int
    budget_tokens: int
    prompt_tokens: int
    message: str = ""


class BranchesSelected(EventBody, frozen=True, tag="branches.selected"):
    """The winner of a round (``winner``: its 0-based index) and why; ``candidates`` are
    the branches that answered. ``error``: why the strategy's answer named no candidate,
    so the first one won by fallback (the branch judge's reply had no number in 1..N, a
    custom strategy returned no candidate's index): a check that did not run. None when
    it chose, when the judge's call failed (``branches.judged``'s ``error`` says so), and
    in older logs (an added field with a default)."""

    node_id: str
    visit: int
    round: int
    strategy: str
    winner: int
    label: str
    reason: str = ""
    candidates: list[int] = []
    error: str | None = None
