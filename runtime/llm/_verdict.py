"""What a judge sees and says: the context of one turn, the verdict, and the loop's own
verdicts.

After each turn of an LLM node a judge (the implicit cascade of ``_judge``, or a custom
:class:`JudgeProtocol`) reads a :class:`JudgeContext` and answers a :class:`JudgeVerdict`:
ACCEPT (stop, write outputs), RETRY (inject :func:`feedback_message` and loop) or
ESCALATE (the node fails; on_failure edges apply), with the ``level`` of the check that
decided it. The node's loop gives some verdicts itself: :func:`should_judge` picks the
turns a judge sees, :func:`max_iterations_verdict` ends the loop at its bound,
:func:`stall_verdict` words the stall warning, and :func:`waits_for_user` says when a
client-facing node asks its user instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import msgspec

from ..events._catalogue import Action, Level, LlmTurn, Verdict
from ..providers._base import ChatMessage, Usage

__all__ = [
    "DEFAULT_RETRY_FEEDBACK",
    "FEEDBACK_PREFIX",
    "RECENT_MESSAGES",
    "Action",
    "CustomJudgeResult",
    "JudgeContext",
    "JudgeProtocol",
    "JudgeVerdict",
    "Level",
    "feedback_message",
    "judge_context",
    "max_iterations_verdict",
    "missing_required_keys",
    "should_judge",
    "stall_verdict",
    "waits_for_user",
]


#: The prefix of the user message that carries a RETRY's feedback (the seed's wording).
FEEDBACK_PREFIX: Final = "[Judge feedback]: "
#: The feedback a RETRY injects when its judge gave none: the model must not be asked
#: again with an unchanged conversation.
DEFAULT_RETRY_FEEDBACK: Final = (
    "The judge did not accept this yet. Review your work against the task and the "
    "required outputs, improve it, and set the outputs again."
)
#: How many trailing messages the quality check sees.
RECENT_MESSAGES: Final = 10


class JudgeContext(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a judge sees after one turn of one node.

    ``iteration`` is the 1-based number of the turn just finished. ``missing_keys`` lists
    the required (non-nullable) ``expected_keys`` whose value is unset or ``None`` (use
    :func:`judge_context` to compute it). ``recent_messages`` holds at most the last 10
    messages of the node's conversation.
    """

    node_id: str
    node_description: str = ""
    iteration: int
    accumulator: dict[str, Any]
    expected_keys: list[str]
    nullable_keys: list[str] = []
    missing_keys: list[str]
    success_criteria: list[str] = []
    turn_had_tool_calls: bool
    client_facing: bool = False
    conversation_summary: str = ""
    recent_messages: list[ChatMessage] = []


class JudgeVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """A verdict: what to do, which check decided it, and why.

    ``feedback`` is what a RETRY injects (empty: inject nothing). ``confidence`` comes
    from the quality check. ``error`` records a judge failure that did not block the run.
    ``usage``: the tokens of the model calls the verdict cost (the quality check's; a
    custom judge that calls a model may set its own), recorded with it; None for none.
    """

    action: Action
    level: Level
    feedback: str = ""
    confidence: float | None = None
    error: str | None = None
    usage: Usage | None = None


#: What a custom judge may return: a verdict, or a bare action ("accept", "RETRY"...).
CustomJudgeResult = JudgeVerdict | str


class JudgeProtocol(Protocol):
    """A custom judge: replaces the implicit cascade for one node.

    It is called on the turns :func:`should_judge` selects, including turns with tool
    calls (``context.turn_had_tool_calls`` says so). Its verdict is recorded with level
    ``"custom"``; an ACCEPT while required keys are missing is overridden to RETRY.
    """

    async def evaluate(self, context: JudgeContext) -> CustomJudgeResult: ...


def missing_required_keys(
    accumulator: Mapping[str, Any], expected_keys: Sequence[str], nullable_keys: Sequence[str]
) -> list[str]:
    """The non-nullable expected keys whose value is absent or ``None``, in declared order."""
    return [
        key for key in expected_keys if accumulator.get(key) is None and key not in nullable_keys
    ]


def judge_context(
    *,
    node_id: str,
    iteration: int,
    accumulator: Mapping[str, Any],
    expected_keys: Sequence[str],
    nullable_keys: Sequence[str] = (),
    turn_had_tool_calls: bool,
    node_description: str = "",
    success_criteria: Sequence[str] = (),
    client_facing: bool = False,
    conversation_summary: str = "",
    messages: Sequence[ChatMessage] = (),
) -> JudgeContext:
    """Build a :class:`JudgeContext`, computing ``missing_keys`` and keeping the last 10
    of ``messages``."""
    return JudgeContext(
        node_id=node_id,
        node_description=node_description,
        iteration=iteration,
        accumulator=dict(accumulator),
        expected_keys=list(expected_keys),
        nullable_keys=list(nullable_keys),
        missing_keys=missing_required_keys(accumulator, expected_keys, nullable_keys),
        success_criteria=list(success_criteria),
        turn_had_tool_calls=turn_had_tool_calls,
        client_facing=client_facing,
        conversation_summary=conversation_summary,
        recent_messages=list(messages[-RECENT_MESSAGES:]),
    )


def should_judge(iteration: int, every_n: int, had_tool_calls: bool) -> bool:
    """Whether the node asks the judge after turn ``iteration`` (1-based).

    Every turn without tool calls is judged: the model has stopped and waits for a
    verdict, and skipping it would re-prompt the model with nothing new. Turns with tool
    calls are judged on every ``every_n``-th iteration (``every_n <= 1``: every turn);
    for the implicit judge those are bail-out RETRYs anyway, so ``judge_every_n_turns``
    matters for custom judges that watch work in progress. A turn that is not judged
    counts as a RETRY with nothing injected: the node records it as the bail-out.
    """
    if not had_tool_calls or every_n <= 1:
        return True
    return iteration % every_n == 0


def max_iterations_verdict(
    iteration: int, max_iterations: int, *, missing_keys: Sequence[str] = ()
) -> JudgeVerdict | None:
    """The verdict that ends a node at its last allowed turn, else None.

    Called after a turn whose verdict was not final (RETRY or not judged). When
    ``iteration >= max_iterations`` the node terminates regardless: ACCEPT if every
    required key is set (the work is structurally complete: the loop ran out of
    patience, not of output), ESCALATE if keys are missing (the node failed: on_failure
    edges apply). Level ``"max_iterations"`` either way.
    """
    if iteration < max_iterations:
        return None
    if missing_keys:
        return JudgeVerdict(
            action="escalate",
            level="max_iterations",
            feedback=(
                f"Reached max_iterations ({max_iterations}) with required output keys "
                f"missing: {', '.join(missing_keys)}."
            ),
        )
    return JudgeVerdict(
        action="accept",
        level="max_iterations",
        feedback=f"Reached max_iterations ({max_iterations}); accepting the outputs set.",
    )


def stall_verdict(threshold: int = 3, client_facing: bool = False) -> JudgeVerdict:
    """The RETRY a node applies when :class:`StallDetector` fires.

    Its feedback is the warning injected into the conversation. For a client-facing
    node the node asks the user for input instead of injecting it.
    """
    if client_facing:
        feedback = (
            f"You repeated the same tool calls with identical arguments {threshold} turns "
            "in a row. Ask the user how to proceed."
        )
    else:
        feedback = (
            f"You repeated the same tool calls with identical arguments {threshold} turns "
            "in a row and they will keep giving the same results. Change your approach: "
            "use different arguments or tools, or set your outputs with what you have."
        )
    return JudgeVerdict(action="retry", level="stall", feedback=feedback)


def feedback_message(verdict: JudgeVerdict) -> str:
    """The user message a RETRY injects: ``"[Judge feedback]: <feedback>"``.

    Callers inject nothing when ``verdict.feedback`` is empty (a bail-out, or a
    conversation node waiting for its user).
    """
    return FEEDBACK_PREFIX + verdict.feedback


def waits_for_user(client_facing: bool, verdict: JudgeVerdict | Verdict, turn: LlmTurn) -> bool:
    """Whether a client-facing node stops for user input after this RETRY on ``turn``.

    It does when it stalled (the seed: ask the user instead of warning), and when
    the model answered in text and the judge had nothing to tell it (a conversation
    node: its next input can only come from the user).
    """
    if not client_facing or verdict.action != "retry":
        return False
    if verdict.level == "stall":
        return True
    return not turn.tool_calls and not verdict.feedback
