"""An actor's task: ``on_start``, then its mailbox one message at a time, then its stop.

The reference (actors._ref) is the actor's handle and holds its mailbox; this is the one
consumer of that mailbox, started by the system (actors._actor) when the actor is spawned
or, for an idle actor with ``receive_now``, when a message is queued for it.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel

from ._mailbox import Reply
from ._ref import ON_STOP, ActorRef, System

__all__ = ["run_actor"]

_ON_STOP_GRACE = 5.0


async def run_actor(ref: ActorRef, system: System) -> None:
    """A task of ``ref``'s actor: ``on_start`` (the first one), then one message at a time
    until the actor stops or, for an actor with ``receive_now``, until the mailbox is
    empty (the task ends; the actor is idle); then :func:`_shutdown`, which hands the
    stopped actor to ``system._ended`` (the system forgets the actor and tells its
    watchers :class:`Terminated`)."""
    actor = ref._actor
    assert actor is not None
    try:
        # The actor's cancel scope, for this task: stop() cancels the handler in flight
        # through it, so the anyio shields inside handlers hold.
        with anyio.CancelScope() as scope:
            ref._scope = scope
            try:
                if ref._starting:
                    ref._starting = False
                    if not ref._stop_requested:
                        await actor.on_start()
                streak = 0
                while not ref._stop_requested:
                    # Drain without a scheduler round trip while messages are queued,
                    # but yield now and then so a busy actor cannot starve the others.
                    streak += 1
                    if streak % 64 == 0:
                        await anyio.lowlevel.checkpoint()
                    item = ref._take()
                    if item is None:
                        if ref._closed:
                            break
                        if ref._now:
                            # Idle: this task ends, and the next message starts one.
                            # Nothing below awaits, so no message can slip in between.
                            ref._running = False
                            break
                        streak = 0
                        # The wake-up itself (a future), not a get() coroutine: this is
                        # every message's path to an idle actor.
                        await ref._arrival()
                        continue
                    if type(item) is Reply:
                        reply: Reply | None = item
                        message: Any = item.message
                    else:
                        reply, message = None, item
                    ref._current = reply
                    try:
                        result = await actor.receive(message)
                    except Exception as exc:
                        # The actor is stopped; the exception goes to the asker and the
                        # watchers, never to the task group.
                        ref.failure = exc
                        if reply is not None:
                            reply.fail(exc)
                        break
                    ref._processed += 1
                    if reply is not None:
                        reply.set(result)
                    ref._current = None
            except Exception as exc:  # raised by on_start: same treatment
                ref.failure = exc
    finally:
        ref._scope = None
        if ref._running:
            await _shutdown(ref, system)


async def _shutdown(ref: ActorRef, system: System) -> None:
    ref._fail_unanswered()
    actor = ref._actor
    assert actor is not None
    if ref._hooks & ON_STOP:
        with anyio.move_on_after(_ON_STOP_GRACE, shield=True):
            try:
                await actor.on_stop()
            except Exception as exc:
                if ref.failure is None:
                    ref.failure = exc
    ref._stopped_hooks(system)
