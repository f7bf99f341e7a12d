"""What a run reports when it stops."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["RunResult", "RunStatus"]

RunStatus = Literal["completed", "failed", "paused", "cancelled"]


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one run (or of one stretch of it, for paused and cancelled runs).

    ``quality`` is "clean" (no node failed for good), "degraded" (some node failed but the
    graph reached its end by a fallback edge) or "failed"; None while paused or cancelled.
    ``resume_at`` lists the nodes a resume would run next.
    """

    run_id: str
    status: RunStatus
    quality: Literal["clean", "degraded", "failed"] | None = None
    memory: dict[str, Any] = {}
    path: list[str] = []
    steps: int = 0
    total_retries: int = 0
    error: str | None = None
    resume_at: list[str] = []
    paused_reason: str | None = None
