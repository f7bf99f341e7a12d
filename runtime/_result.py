"""What a run reports when it stops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import anyio
import msgspec

__all__ = ["RunOutcome", "RunResult", "RunStatus"]

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


class RunOutcome:
    """Where the executor leaves its result; ``wait()`` blocks until it does."""

    def __init__(self, on_done: Callable[[], None] | None = None) -> None:
        self._event = anyio.Event()
        self._on_done = on_done
        self.result: RunResult | None = None
        self.error: BaseException | None = None

    def set(self, result: RunResult) -> None:
        if not self._event.is_set():
            self.result = result
            self._done()

    def fail(self, error: BaseException) -> None:
        if not self._event.is_set():
            self.error = error
            self._done()

    def _done(self) -> None:
        self._event.set()
        # Dropped once called: the callback usually refers back to this outcome, and a
        # cycle would keep every finished run alive until the cyclic collector runs.
        on_done, self._on_done = self._on_done, None
        if on_done is not None:
            on_done()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> RunResult:
        await self._event.wait()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result
