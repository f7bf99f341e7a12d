"""The base of every actor message, and the messages the actor core itself sends."""

from __future__ import annotations

import msgspec

__all__ = ["Message", "Terminated"]


class Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base class for actor messages: frozen, keyword-only, tagged.

    Subclasses give an explicit, stable tag (``class Ping(Message, tag="demo.ping")``) so
    that renaming a class never changes encoded data.
    """


class Terminated(Message, frozen=True, kw_only=True, gc=False, tag="actor.terminated"):
    """Sent to each watcher when an actor stops.

    ``error`` is ``None`` for a clean stop; otherwise it holds ``"ExcType: message"`` and
    the exception object itself is available as ``ActorRef.failure``.
    """

    actor: str
    error: str | None = None
