"""The judge of one LLM node as an actor, so that the node can ask it with a timeout.

:class:`JudgeActor` rules on one turn at a time; :class:`JudgeClient` is the node's side:
it spawns the actor, asks it with a timeout, and turns a judge that raises, stops or hangs
into the judge-failure verdict.

The tokens of the Level 2 calls a failed judge paid for are in that verdict: the actor's
:class:`~._meter.Meter` counts each call as it returns, and the client, once it gives up,
stops the actor and waits until it has stopped before it reads the count, so an answer
that arrived as the judge was being stopped counts too. A call cancelled before its
answer arrived counts nothing: no answer, no usage to read (the provider may bill it all
the same). A custom judge's own calls are known only from the usage of the verdict it
returns: one that fails or hangs records none.
"""

from __future__ import annotations

from typing import Any

from actors import Actor, ActorRef, ActorSystem, AskTimeoutError, Message

from ..providers._base import Usage
from ._judge import ImplicitJudge, consult, describe, judge_failure_verdict, safety_net
from ._meter import Meter
from ._verdict import JudgeContext, JudgeProtocol, JudgeVerdict

__all__ = ["JudgeActor", "JudgeClient", "JudgeRequest"]


class JudgeRequest(Message, frozen=True, tag="judge.request"):
    """Ask a :class:`JudgeActor` for the verdict on one turn; the reply is a JudgeVerdict."""

    context: JudgeContext


class JudgeActor(Actor):
    """The judge of one LLM node, as an actor: ``ask(JudgeRequest(context=...))`` replies
    with the :class:`JudgeVerdict` of :func:`consult` after :func:`safety_net`; when the
    ask fails, the asker applies :func:`judge_failure_verdict`.

    It handles one request at a time, so quality calls of one node never overlap. A judge
    that raises stops the actor and the exception reaches the asker; one that hangs is
    the asker's timeout. ``meter`` counts the quality calls of the request in hand (or
    the last one) as each returns. Any other message is a programming error: TypeError.
    """

    def __init__(self, implicit: ImplicitJudge, judge: JudgeProtocol | None = None) -> None:
        self.implicit = implicit
        self.judge = judge
        self.meter = Meter()

    async def receive(self, message: Any) -> Any:
        if type(message) is JudgeRequest:
            context = message.context
            self.meter = meter = Meter()
            verdict = await consult(context, judge=self.judge, implicit=self.implicit, meter=meter)
            return safety_net(context, verdict)
        raise TypeError(f"JudgeActor cannot handle {type(message).__name__}")


class JudgeClient:
    """One attempt's judge as its LLM node sees it: the :class:`JudgeActor` spawned in
    ``system`` on first use, asked with ``timeout`` seconds per verdict."""

    def __init__(
        self,
        system: ActorSystem,
        implicit: ImplicitJudge,
        judge: JudgeProtocol | None,
        *,
        timeout: float,
    ) -> None:
        self.system = system
        self.implicit = implicit
        self.judge = judge
        self.timeout = timeout
        self.ref: ActorRef | None = None
        self.actor: JudgeActor | None = None

    async def ask(self, context: JudgeContext) -> JudgeVerdict:
        """The verdict of the judge actor, or the judge-failure verdict when it
        raises, stops or does not answer within ``timeout`` seconds, with the tokens of
        the quality calls paid for meanwhile (see the module's docs)."""
        ref = self.ref
        if ref is None or ref.stopped:
            self.actor = actor = JudgeActor(self.implicit, self.judge)
            ref = self.ref = self.system.spawn(actor)
        timeout = self.timeout
        try:
            verdict: JudgeVerdict = await ref.ask(JudgeRequest(context=context), timeout=timeout)
            return verdict
        except AskTimeoutError:
            error = f"no verdict within {timeout:g}s"
        except Exception as exc:  # the judge actor failed: recorded in the verdict
            error = describe(exc)
        usage = await self._abandon()  # a hung judge is abandoned; the next turn gets a fresh one
        custom = self.judge is not None
        error = f"{'custom ' if custom else ''}judge failed: {error}"
        return judge_failure_verdict(
            context, error, implicit=self.implicit, custom=custom, usage=usage
        )

    async def _abandon(self) -> Usage | None:
        """Stop the judge actor; the tokens of the quality calls it paid for in the
        request it failed. The implicit judge is waited for until it has stopped: its
        call in flight is cancelled (a provider's ``complete`` abandons the call when
        cancelled), and an answer that arrived meanwhile is counted. A custom judge is
        not waited for (it may not heed the cancellation): its calls are its own."""
        ref, actor = self.ref, self.actor
        self.stop()
        if ref is None or actor is None:
            return None
        if self.judge is None:
            await ref.wait_stopped()
        return actor.meter.usage

    def stop(self) -> None:
        """Stop the judge actor, if it runs; the next ask spawns a fresh one."""
        if self.ref is not None:
            self.ref.stop_nowait()
            self.ref = None
            self.actor = None
