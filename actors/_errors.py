"""Exceptions of the actor core, and the root of every magistrate exception.

The tree (each package adds its own branches under :class:`MagistrateError`)::

    MagistrateError
    └── ActorError
        ├── ActorStoppedError     the actor is stopped: it takes no more messages
        ├── MailboxFullError      ``tell_nowait`` found the bounded mailbox full
        ├── AskTimeoutError       ``ask`` got no reply within its timeout (also a TimeoutError)
        └── NotAMessageError      something other than a msgspec Struct was sent
"""

from __future__ import annotations

__all__ = [
    "ActorError",
    "ActorStoppedError",
    "AskTimeoutError",
    "MagistrateError",
    "MailboxFullError",
    "NotAMessageError",
]


class MagistrateError(Exception):
    """Root of every error raised by magistrate's packages."""


class ActorError(MagistrateError):
    """An error of the actor core."""


class ActorStoppedError(ActorError):
    """The actor is stopped (or stopped while the message waited) and will not handle it."""

    def __init__(self, actor: str, *, reason: str | None = None) -> None:
        self.actor = actor
        self.reason = reason
        message = f"actor {actor!r} is stopped"
        if reason:
            message += f": {reason}"
        super().__init__(message)


class MailboxFullError(ActorError):
    """``tell_nowait`` could not enqueue: the actor's bounded mailbox is full."""

    def __init__(self, actor: str, capacity: int) -> None:
        self.actor = actor
        self.capacity = capacity
        super().__init__(f"mailbox of actor {actor!r} is full ({capacity} messages)")


class AskTimeoutError(ActorError, TimeoutError):
    """``ask`` waited longer than its timeout for a reply."""

    def __init__(self, actor: str, message_type: str, timeout: float) -> None:
        self.actor = actor
        self.message_type = message_type
        self.timeout = timeout
        super().__init__(f"actor {actor!r} did not answer {message_type} within {timeout:g}s")


class NotAMessageError(ActorError, TypeError):
    """Actors exchange msgspec Structs only, so every message can be encoded."""

    def __init__(self, actor: str, value: object) -> None:
        self.actor = actor
        self.value_type = type(value).__qualname__
        super().__init__(
            f"messages to actor {actor!r} must be msgspec.Struct instances, got {self.value_type}"
        )
