"""Mailbox configuration and statistics."""

from __future__ import annotations

import msgspec

__all__ = ["MailboxConfig", "MailboxStatistics"]


class MailboxConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How many messages an actor's mailbox holds before ``tell`` waits (backpressure)."""

    capacity: int = 1024

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"MailboxConfig.capacity must be >= 1, got {self.capacity}")


class MailboxStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one actor's mailbox."""

    actor: str
    capacity: int
    queued: int
    received: int
    processed: int
    failed: bool
    stopped: bool
