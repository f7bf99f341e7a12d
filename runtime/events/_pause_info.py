"""Small parts of a run's state: why it paused, and where a fork was copied from."""

from __future__ import annotations

import msgspec

from ._catalogue import PauseReason

__all__ = ["ForkOrigin", "PauseInfo"]


class PauseInfo(msgspec.Struct, frozen=True, kw_only=True):
    reason: PauseReason
    node_id: str | None


class ForkOrigin(msgspec.Struct, frozen=True, kw_only=True):
    """The run and seq a fork's log was copied from, and the source's chain hash there."""

    run_id: str
    seq: int
    hash: str
