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

The node's own ``timeout`` may cut its attempt while the judge works on a turn, or before
the verdict is recorded: :meth:`JudgeClient.unruled` then gives the tokens of that ask's
quality calls (its meter's, the judge stopped), which the node's failure records.
"""

from __future__ import annotations

from typing import Any

from actors import Actor, ActorRef, ActorSystem, AskTimeoutError, Message

from ..events._catalogue import PaidUsage
from ..events._node_visit import NodeVisit
from ..events._tokens import spent
from ..providers._base import Usage
from ._judge import ImplicitJudge, consult, describe, judge_failure_verdict, safety_net
from ._meter import Meter
from ._verdict import JudgeContext, JudgeProtocol, JudgeVerdict

__all__ = ["JudgeActor", "JudgeClient", "JudgeRequest"]


class JudgeRequest(Message, frozen=True, tag="judge.request"):
    """Ask a :class:`JudgeActor` for the verdict on one turn; the reply is a JudgeVerdict.
    ``meter`` counts its quality calls (None: a fresh one, the actor's ``meter``)."""

    context: JudgeContext
    meter: Meter | None = None


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
            self.meter = meter = message.meter or Meter()
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
        #: The last ask: its turn, the meter of its quality calls and the actor asked
        #: (see :meth:`unruled`).
        self.pending: tuple[int, Meter, ActorRef] | None = None

    async def ask(self, context: JudgeContext) -> JudgeVerdict:
        """The verdict of the judge actor, or the judge-failure verdict when it
        raises, stops or does not answer within ``timeout`` seconds, with the tokens of
        the quality calls paid for meanwhile (see the module's docs)."""
        ref = self.ref
        if ref is None or ref.stopped:
            ref = self.ref = self.system.spawn(JudgeActor(self.implicit, self.judge))
        timeout = self.timeout
        meter = Meter()
        self.pending = (context.iteration, meter, ref)
        try:
            request = JudgeRequest(context=context, meter=meter)
            verdict: JudgeVerdict = await ref.ask(request, timeout=timeout)
            return verdict
        except AskTimeoutError:
            error = f"no verdict within {timeout:g}s"
        except Exception as exc:  # the judge actor failed: recorded in the verdict
            error = describe(exc)
        # A hung judge is abandoned; the next turn gets a fresh one.
        usage = await self._abandon(ref, meter)
        custom = self.judge is not None
        error = f"{'custom ' if custom else ''}judge failed: {error}"
        return judge_failure_verdict(
            context, error, implicit=self.implicit, custom=custom, usage=usage
        )

    async def _abandon(self, ref: ActorRef, meter: Meter) -> Usage | None:
        """Stop the judge actor ``ref``; the tokens of the quality calls it paid for in
        the request it failed (``meter``'s). The implicit judge is waited for until it
        has stopped: its call in flight is cancelled (a provider's ``complete`` abandons
        the call when cancelled), and an answer that arrived meanwhile is counted. A
        custom judge is not waited for (it may not heed the cancellation): its calls are
        its own."""
        self.stop()
        if self.judge is None:
            await ref.wait_stopped()
        return meter.usage

    async def unruled(self, record: NodeVisit | None, visit: int) -> PaidUsage | None:
        """Once the node's ``timeout`` cut its attempt: the tokens of the quality calls of
        the last ask when the log does not hold its verdict (the judge had not ruled, or
        its verdict was not recorded); None when it does, or nothing was paid. ``record``
        is the node's visit ``visit`` in the run's state: a verdict on the turn asked
        about, or a later turn (recorded only after that verdict), says the log holds it.
        The judge is stopped and, the implicit one, waited for, as when it is given up
        on (an answer that arrived meanwhile counts)."""
        pending, self.pending = self.pending, None
        self.stop()
        if pending is None:
            return None
        iteration, meter, ref = pending
        if record is not None and record.visit == visit and record.last_turn is not None:
            turn, judged = record.last_turn.iteration, record.last_verdict is not None
            if turn > iteration or (turn == iteration and judged):
                return None  # recorded with its verdict
        if self.judge is None:
            await ref.wait_stopped()
        return spent(meter.usage, "judge")

    def stop(self) -> None:
        """Stop the judge actor, if it runs; the next ask spawns a fresh one."""
        if self.ref is not None:
            self.ref.stop_nowait()
            self.ref = None
