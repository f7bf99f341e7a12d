"""How late the event loop wakes up: the lag operators see when something blocks it.

Every run of a runtime shares one event loop. Code that keeps the loop from running (a
blocking call in an ``async def`` node, or a C extension call that holds the GIL, which
stops every thread of the process) delays every run and every timer at once. A task asks
the loop to wake it every :data:`INTERVAL` seconds and measures how much later it woke;
the gauge holds the largest lag of the last :data:`WINDOW` seconds, so a scrape that
comes after a stall still sees it.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Final

from prometheus_client import CollectorRegistry, Gauge

__all__ = ["INTERVAL", "WINDOW", "LoopLag"]

#: How often the loop is asked to wake the watcher, in seconds.
INTERVAL: Final = 0.25
#: The window, in seconds, whose largest lag the gauge holds.
WINDOW: Final = 15.0


class LoopLag:
    """The ``magistrate_event_loop_lag_seconds`` gauge in ``registry``, kept by a watcher
    task of each runtime open with the metrics (:meth:`watch`): the largest lag any of them
    measured over its window; 0 while none watches (nothing measures a loop then, and a
    stall of the past is not shown as current)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.gauge = Gauge(
            "magistrate_event_loop_lag_seconds",
            "Largest delay of the event loop's wake-ups over the last 15 s (blocking code "
            "in an async node, or a C call holding the GIL, stalls every run)",
            registry=registry,
        )
        self._lags: dict[object, float] = {}  # each watcher's largest lag over its window
        self._lock = threading.Lock()  # runtimes on other threads' loops may share it

    async def watch(self) -> None:
        """Measure the running loop's lag until cancelled; its part of the gauge then goes."""
        loop = asyncio.get_running_loop()
        me = object()
        recent: deque[tuple[float, float]] = deque()
        try:
            while True:
                before = loop.time()
                await asyncio.sleep(INTERVAL)
                now = loop.time()
                recent.append((now, max(0.0, now - before - INTERVAL)))
                while recent[0][0] < now - WINDOW:
                    recent.popleft()
                self._set(me, max(lag for _, lag in recent))
        finally:
            self._set(me, None)

    def _set(self, watcher: object, lag: float | None) -> None:
        with self._lock:
            if lag is None:
                self._lags.pop(watcher, None)
            else:
                self._lags[watcher] = lag
            self.gauge.set(max(self._lags.values(), default=0.0))
