"""The settings a :class:`~runtime.Runtime` groups by concern: time limits, ownership of
runs, and recovery of runnable runs (a worker). Frozen structs with defaults: a runtime
built without them behaves as documented here."""

from __future__ import annotations

import math

import msgspec

__all__ = ["OwnershipConfig", "RecoveryConfig", "TimeoutConfig"]


class TimeoutConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Time limits (seconds) of one node attempt, one tool call and one judge verdict.

    ``node`` and ``tool`` apply where the spec sets no ``timeout`` / ``tool_timeout``
    (None: no limit). A node past its limit fails with NodeTimeoutError, one whose tool
    call is past its limit with ToolTimeoutError (retry policy and on_failure edges
    apply), and a blocking ``def`` is abandoned in its worker thread. ``judge`` bounds
    each judge verdict of an LLM node: a judge that does not answer in time gets the
    judge-failure verdict.
    """

    node: float | None = 600.0
    tool: float | None = 120.0
    judge: float = 300.0


class OwnershipConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How a runtime holds the runs it executes, on a store that records ownership
    (:class:`eventstore.ClaimingStore`; both built-in stores).

    Every run executed here is claimed first as ``worker_id`` (None: ``host:pid:random``)
    with a lease of ``lease_seconds``, renewed at a third of that while the run is live; a
    run whose claim is lost stops at once (its result raises LeaseLostError). Other
    processes' cancel, pause and input reach a run live here within ``control_interval``
    seconds.
    """

    worker_id: str | None = None
    lease_seconds: float = 15.0
    control_interval: float = 0.25

    def __post_init__(self) -> None:
        if not (_seconds(self.lease_seconds) and _seconds(self.control_interval)):
            raise ValueError(
                "OwnershipConfig.lease_seconds and control_interval must be finite and > 0, "
                f"got {self.lease_seconds} and {self.control_interval}"
            )


class RecoveryConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What makes a runtime a worker: it claims and resumes runs that are running with no
    live lease (a crashed process's, or submitted with :meth:`Runtime.submit`), at start,
    every ``interval`` seconds (None: half the lease) and, on PostgreSQL, as soon as a
    NOTIFY announces one, while fewer than ``concurrency`` runs are live here.
    """

    interval: float | None = None
    concurrency: int = 100

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.interval is not None and not _seconds(self.interval):
            raise ValueError(f"RecoveryConfig.interval must be finite and > 0, got {self.interval}")


def _seconds(value: float) -> bool:
    """Whether ``value`` is a duration a lease or a timer can take: finite and > 0 (NaN
    compares false to everything, and an infinite lease never runs out)."""
    return math.isfinite(value) and value > 0
