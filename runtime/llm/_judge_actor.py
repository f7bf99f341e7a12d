"""The judge of one LLM node as an actor, so that the node can ask it with a timeout."""

from __future__ import annotations

from typing import Any

from actors import Actor, Message

from ._judge import ImplicitJudge, consult, safety_net
from ._verdict import JudgeContext, JudgeProtocol

__all__ = ["JudgeActor", "JudgeRequest"]


class JudgeRequest(Message, frozen=True, tag="judge.request"):
    """Ask a :class:`JudgeActor` for the verdict on one turn; the reply is a JudgeVerdict."""

    context: JudgeContext


class JudgeActor(Actor):
    """The judge of one LLM node, as an actor: ``ask(JudgeRequest(context=...))`` replies
    with the :class:`JudgeVerdict` of :func:`consult` after :func:`safety_net`; when the
    ask fails, the asker applies :func:`judge_failure_verdict`.

    It handles one request at a time, so quality calls of one node never overlap. A judge
    that raises stops the actor and the exception reaches the asker; one that hangs is
    the asker's timeout. Any other message is a programming error: TypeError.
    """

    def __init__(self, implicit: ImplicitJudge, judge: JudgeProtocol | None = None) -> None:
        self.implicit = implicit
        self.judge = judge

    async def receive(self, message: Any) -> Any:
        if type(message) is JudgeRequest:
            context = message.context
            verdict = await consult(context, judge=self.judge, implicit=self.implicit)
            return safety_net(context, verdict)
        raise TypeError(f"JudgeActor cannot handle {type(message).__name__}")
